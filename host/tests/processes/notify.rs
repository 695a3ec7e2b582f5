//! Notifications delivered from the outbox by a real `vigil serve`, to a loopback webhook
//! receiver that verifies every signature with the reference `standardwebhooks` package
//! (tests/notify/receiver.py, run by the Python that `scripts/install-tools
//! webhook-verifier` installs into target/tools/), and to Debian's Alertmanager. System
//! tests: the webhook verifier comes from PyPI, Alertmanager and PostgreSQL are outside
//! programs.
//!
//! A cluster that goes down and comes back is notified (the transition, the cascade, the
//! recovery, the restoration), each once and in order, and a cluster's first status is
//! not; a receiver that refuses attempt after attempt makes the sink failing in `/readyz`
//! and gets everything once it recovers; vigil killed with SIGKILL while the receiver holds
//! a notification sends it again after a restart, with the same id; vigil killed after a
//! change committed but before it was delivered delivers it after a restart; a bad
//! notifications file is refused on SIGHUP (the one in force is kept, `/readyz` says why;
//! at start-up, serve.rs shows it); no secret reaches the log, the outbox or the receiver's
//! bodies.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vigil_decision::{AppStatus, ClusterStatus};
use vigil_domain::probe::wall_clock;
use vigil_fake_kube::kubeconfig::write_kubeconfigs;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions, KubeconfigShape, ShapePlan};
use vigil_store::Store;

use crate::process::{self, Vigil, http_get, tail};
use vigil_test_support as plugins;
use vigil_test_support::{tools, wait};

/// The receiver's secret (a test value: `whsec_` and 24 random bytes in base64).
const SECRET: &str = "whsec_QmFzZTY0U2VjcmV0Rm9yVGVzdHNPbmx5MTI=";

/// The Python that has `standardwebhooks` (`scripts/install-tools webhook-verifier` makes
/// it), or `VIGIL_WEBHOOK_PYTHON`.
fn receiver_python() -> PathBuf {
    if let Some(python) = std::env::var_os("VIGIL_WEBHOOK_PYTHON") {
        return python.into();
    }
    let python = plugins::root().join("target/tools/webhook-receiver-1.3.0/bin/python");
    assert!(
        python.exists(),
        "{} (or set VIGIL_WEBHOOK_PYTHON to a Python that has standardwebhooks)",
        tools::missing(&python.display().to_string(), "webhook-verifier")
    );
    python
}

/// The webhook receiver, killed with the test.
struct Receiver {
    child: Child,
    port: u16,
    log: PathBuf,
    control: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    fn start(dir: &Path) -> Self {
        Self::start_with(dir, None)
    }

    /// With `tls` (certificate and key PEM files), over HTTPS.
    fn start_with(dir: &Path, tls: Option<(&Path, &Path)>) -> Self {
        let control = dir.join("receiver-control");
        std::fs::create_dir_all(&control).unwrap();
        let log = dir.join("received.jsonl");
        let port_file = dir.join("receiver.port");
        let child = Command::new(receiver_python())
            .arg(plugins::root().join("tests/notify/receiver.py"))
            .args([SECRET])
            .arg(&log)
            .arg(&control)
            .arg(&port_file)
            .args(tls.iter().flat_map(|(cert, key)| [cert, key]))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut receiver = Self {
            child,
            port: 0,
            log,
            control,
        };
        // The port file is written whole (renamed into place) once the receiver listens.
        receiver.port = wait::until(
            "the receiver listens",
            Duration::from_secs(30),
            String::new,
            || {
                if let Some(status) = receiver.child.try_wait().unwrap() {
                    panic!("the webhook receiver exited with {status}");
                }
                std::fs::read_to_string(&port_file).ok()
            },
        )
        .trim()
        .parse()
        .unwrap();
        receiver
    }

    /// Every request received, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The notifications accepted (verified, answered 2xx or held), in order.
    fn accepted(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r.get("invalid").is_none()
                    && r.get("refused").is_none()
                    && r.get("rejected").is_none()
            })
            .collect()
    }

    fn set(&self, switch: &str, on: bool) {
        let path = self.control.join(switch);
        if on {
            File::create(path).unwrap();
        } else {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The receiver's secret in a file of `dir` that only its owner may read, as vigil
/// requires of a secret file.
fn secret_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join("webhook.secret");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{SECRET}\n").as_bytes()).unwrap();
    path
}

/// `(type, cluster, from→to)` of a notification.
fn summary(request: &Value) -> String {
    let body = &request["body"];
    let data = &body["data"];
    let detail = &data["detail"];
    match body["type"].as_str().unwrap_or("") {
        "status-changed" => format!(
            "{} {} {}->{}",
            body["type"].as_str().unwrap(),
            data["cluster"].as_str().unwrap_or("-"),
            detail["from"].as_str().unwrap_or("?"),
            detail["to"].as_str().unwrap_or("?")
        ),
        kind => format!(
            "{kind} {} {}",
            data["cluster"].as_str().unwrap_or("-"),
            data["apps"]
        ),
    }
}

struct Setup {
    dir: tempfile::TempDir,
    kubeconfigs: PathBuf,
    notify: PathBuf,
    database: PathBuf,
    /// The log of the current run (each run has its own file).
    log: PathBuf,
    runs: u32,
}

impl Setup {
    /// A vigil in `dir`, on a SQLite file there, discovering `kubeconfigs`, notifying as
    /// `notify` says.
    fn new(dir: tempfile::TempDir, kubeconfigs: PathBuf, notify: PathBuf) -> Self {
        Self {
            kubeconfigs,
            notify,
            database: dir.path().join("vigil.db"),
            log: PathBuf::new(),
            runs: 0,
            dir,
        }
    }

    /// Its database, opened beside it.
    async fn store(&self) -> Store {
        Store::open(&format!("sqlite://{}", self.database.display()))
            .await
            .unwrap()
    }

    /// Starts vigil (again) on the same database, with a log file of its own.
    async fn serve(&mut self) -> Vigil {
        self.runs += 1;
        self.log = self.dir.path().join(format!("vigil-{}.log", self.runs));
        process::serve(self.dir.path())
            .kubeconfigs(&self.kubeconfigs)
            .plugins(plugins::plugin_dir_with_only(
                self.dir.path(),
                "kubeconfig-file",
            ))
            .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-e2e-cache"))
            .database(format!("sqlite://{}", self.database.display()))
            .env("VIGIL_NOTIFY_CONFIG", &self.notify)
            .policy(1, 5, 2)
            .log_file(&self.log)
            .start()
            .await
    }
}

/// `clusters` fake clusters, and a directory of token kubeconfigs for them.
async fn fleet_of(clusters: usize, dir: &Path) -> (Fleet, PathBuf) {
    let kubeconfigs = dir.join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(clusters)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    write_kubeconfigs(
        fleet.clusters(),
        &kubeconfigs,
        &KubeconfigOptions {
            shapes: ShapePlan::Only(KubeconfigShape::Token),
            single_file: false,
        },
    )
    .unwrap();
    (fleet, kubeconfigs)
}

/// Waits for `clusters` clusters, all ONLINE.
async fn all_online(store: &Store, clusters: usize, log: &Path) {
    wait_until("all ONLINE", log, async || {
        let all = store.clusters().await.unwrap();
        all.len() == clusters && all.iter().all(|c| c.health.status == ClusterStatus::Online)
    })
    .await;
}

/// Waits until `check` holds, failing with the tail of the vigil log `log`.
async fn wait_until(what: &str, log: &Path, mut check: impl AsyncFnMut() -> bool) {
    wait::until_async(
        what,
        Duration::from_secs(90),
        || tail(log),
        async || check().await.then_some(()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_and_recoveries_reach_a_signed_webhook_once_in_order_across_failures_and_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let (fleet, kubeconfigs) = fleet_of(5, dir.path()).await;
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let secret_file = secret_file(dir.path());
    let notify = dir.path().join("notify.toml");
    let config = format!(
        "[delivery]\nfailing_after = 3\nmax_backoff = \"2s\"\n\n\
         [[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:{}/hook\"\n\
         secret_file = \"{}\"\ntimeout = \"3s\"\n",
        receiver.port,
        secret_file.display()
    );
    std::fs::write(&notify, &config).unwrap();
    let mut setup = Setup::new(dir, kubeconfigs, notify);
    let server = setup.serve().await;
    let api = server.api();
    let store = setup.store().await;
    let status_of = async |name: &str| store.cluster(name).await.unwrap().health.status;
    all_online(&store, 5, &setup.log).await;
    let now = wall_clock();
    store
        .register_app("shop", &names[0], AppStatus::Deployed, now)
        .await
        .unwrap();

    // An outage: the transition and the cascade, signed, once each, in order; the
    // clusters' first status (UNKNOWN→ONLINE) is not notified.
    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_until("the outage notified", &setup.log, async || {
        receiver.accepted().len() >= 2
    })
    .await;
    let down = format!("status-changed {} ONLINE->OFFLINE", names[0]);
    let degraded = format!("apps-degraded {} [\"shop\"]", names[0]);
    assert_eq!(
        receiver.accepted().iter().map(summary).collect::<Vec<_>>(),
        [down.clone(), degraded.clone()]
    );
    let first = &receiver.accepted()[0];
    assert_eq!(first["body"]["data"]["reason_class"], "refused");
    assert_eq!(first["path"], "/hook");
    assert!(first["signature"].as_str().unwrap().starts_with("v1,"));
    let skew = wall_clock().0 / 1000 - first["timestamp"].as_str().unwrap().parse::<i64>().unwrap();
    assert!((0..60).contains(&skew), "timestamp of the attempt: {skew}");

    // The receiver refuses for 30 s: the recovery is tried again and again, the sink
    // shows as failing, and once the receiver accepts, the recovery arrives, once.
    receiver.set("fail", true);
    fleet.get(0).unwrap().come_back().await.unwrap();
    wait_until("ONLINE again", &setup.log, async || {
        status_of(&names[0]).await == ClusterStatus::Online
    })
    .await;
    let failing_since = Instant::now();
    wait_until("the sink failing in /readyz", &setup.log, async || {
        let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
        ready["notifications"]["sinks"][0]["failing"] == true
    })
    .await;
    let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
    assert_eq!(ready["notifications"]["sinks"][0]["name"], "ops");
    assert_eq!(
        ready["ready"], true,
        "a failing sink does not make vigil unready"
    );
    assert!(
        ready["notifications"]["sinks"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("503"),
        "{ready}"
    );
    let metrics = http_get(api, "/metrics");
    for series in [
        "vigil_notify_sink_failing{sink=\"ops\",kind=\"webhook\"} 1",
        "vigil_notify_pending{sink=\"ops\",kind=\"webhook\"} 2",
        "vigil_notify_delivered_total{sink=\"ops\",kind=\"webhook\"} 2",
    ] {
        assert!(metrics.contains(series), "{series} not in\n{metrics}");
    }
    // Retried again and again while refused: five attempts within 30 s of the sink
    // showing as failing.
    let refused = || {
        receiver
            .requests()
            .iter()
            .filter(|r| r.get("refused").is_some())
            .count()
    };
    wait::until_async(
        "five attempts refused",
        Duration::from_secs(30).saturating_sub(failing_since.elapsed()),
        || format!("{} refused so far\n{}", refused(), tail(&setup.log)),
        async || (refused() >= 5).then_some(()),
    )
    .await;
    let refused = refused();
    assert!(refused >= 5, "retried while refused: {refused} attempts");
    receiver.set("fail", false);
    let up = format!("status-changed {} OFFLINE->ONLINE", names[0]);
    let restored = format!("apps-restored {} [\"shop\"]", names[0]);
    wait_until("the recovery notified", &setup.log, async || {
        receiver.accepted().len() >= 4
    })
    .await;
    wait_until("the sink healthy again", &setup.log, async || {
        let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
        ready["notifications"]["sinks"][0]["failing"] == false
    })
    .await;

    // vigil killed while the receiver holds a notification: after a restart it is sent
    // again with the same id.
    receiver.set("hold", true);
    fleet.get(1).unwrap().refuse().await.unwrap();
    wait_until("the next outage received", &setup.log, async || {
        receiver.accepted().len() >= 5
    })
    .await;
    let held = receiver.accepted()[4].clone();
    assert_eq!(
        summary(&held),
        format!("status-changed {} ONLINE->OFFLINE", names[1])
    );
    server.kill();
    receiver.set("hold", false);

    // And a change committed while vigil cannot deliver (the receiver refuses), then vigil
    // killed: delivered after the restart.
    let server = setup.serve().await;
    wait_until("the held notification sent again", &setup.log, async || {
        receiver.accepted().len() >= 6
    })
    .await;
    assert_eq!(receiver.accepted()[5]["id"], held["id"], "the same id");
    assert_eq!(
        receiver.accepted()[5]["body"],
        held["body"],
        "the same body"
    );
    receiver.set("fail", true);
    let committed_before = store.events(None).await.unwrap().len();
    fleet.get(2).unwrap().refuse().await.unwrap();
    wait_until("the third outage committed", &setup.log, async || {
        status_of(&names[2]).await == ClusterStatus::Offline
    })
    .await;
    assert!(store.events(None).await.unwrap().len() > committed_before);
    server.kill();
    receiver.set("fail", false);
    let mut server = setup.serve().await;
    let api = server.api();
    let third = format!("status-changed {} ONLINE->OFFLINE", names[2]);
    wait_until("the third outage delivered", &setup.log, async || {
        receiver.accepted().iter().any(|r| summary(r) == third)
    })
    .await;

    // Everything once, in order (the held one twice, with one id), all verified.
    let accepted = receiver.accepted();
    let summaries: Vec<String> = accepted.iter().map(summary).collect();
    assert_eq!(
        summaries[..4],
        [down, degraded, up, restored],
        "{summaries:#?}"
    );
    let mut ids: Vec<&str> = accepted.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let held_id = held["id"].as_str().unwrap();
    assert_eq!(ids.iter().filter(|id| **id == held_id).count(), 2);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        accepted.len() - 1,
        "each id once but the held one"
    );
    assert!(
        receiver
            .requests()
            .iter()
            .all(|r| r.get("invalid").is_none()),
        "every signature verifies: {:?}",
        receiver.requests()
    );

    // A bad file on SIGHUP is refused, said in /readyz; the one in force stays.
    std::fs::write(&setup.notify, config.replace("http://", "ftp://")).unwrap();
    server.signal("HUP");
    wait_until("the refusal in /readyz", &setup.log, async || {
        let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
        ready["notifications"]["config_error"]
            .as_str()
            .is_some_and(|e| e.contains("notify.toml:5:") && e.contains("webhook[0].url"))
    })
    .await;
    fleet.get(2).unwrap().come_back().await.unwrap();
    let back = format!("status-changed {} OFFLINE->ONLINE", names[2]);
    wait_until("the old sink still sent to", &setup.log, async || {
        receiver.accepted().iter().any(|r| summary(r) == back)
    })
    .await;

    // No secret anywhere: not in the logs, the outbox, nor what the receiver got.
    let key = SECRET.trim_start_matches("whsec_");
    let log: String = (1..=setup.runs)
        .map(|run| {
            std::fs::read_to_string(setup.dir.path().join(format!("vigil-{run}.log"))).unwrap()
        })
        .collect();
    assert!(!log.contains(key), "the secret in the log");
    let received = std::fs::read_to_string(&receiver.log).unwrap();
    assert!(!received.contains(key));
    let outbox: Vec<String> = sqlx::query_scalar("SELECT payload FROM outbox")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert!(outbox.iter().all(|p| !p.contains(key)));
    for token_file in std::fs::read_dir(&setup.kubeconfigs).unwrap() {
        let text = std::fs::read_to_string(token_file.unwrap().path()).unwrap();
        for token in text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("token: "))
        {
            assert!(!log.contains(token) && !received.contains(token));
            assert!(outbox.iter().all(|p| !p.contains(token)));
        }
    }
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
}

/// An RFC 3339 time, as a point in time (Alertmanager writes fewer fraction digits).
fn at(text: &str) -> std::time::SystemTime {
    humantime::parse_rfc3339_weak(text.trim_end_matches('Z')).unwrap()
}

/// Debian's Alertmanager on loopback, killed with the test.
struct Alertmanager {
    child: Child,
    address: SocketAddr,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Alertmanager {
    fn start(dir: &Path) -> Self {
        let config = dir.join("alertmanager.yml");
        // A short resolve_timeout: an alert posted once, without vigil posting it again,
        // would be resolved by Alertmanager after it.
        std::fs::write(
            &config,
            "global:\n  resolve_timeout: 5s\nroute:\n  receiver: none\nreceivers:\n  - name: none\n",
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let program = tools::require("prometheus-alertmanager", "alertmanager");
        let mut child = Command::new(program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.join("alertmanager").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            // No gossip with peers: one Alertmanager, nothing but loopback.
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.join("alertmanager.log")).unwrap())
            .spawn()
            .expect("start Alertmanager");
        wait::until(
            "Alertmanager listens",
            Duration::from_secs(30),
            || std::fs::read_to_string(dir.join("alertmanager.log")).unwrap_or_default(),
            || {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("Alertmanager exited with {status}");
                }
                std::net::TcpStream::connect(address).ok()
            },
        );
        Self { child, address }
    }

    /// The alerts Alertmanager holds as active.
    fn active(&self) -> Vec<Value> {
        let body = http_get(
            self.address,
            "/api/v2/alerts?active=true&silenced=false&inhibited=false",
        );
        let alerts: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        alerts
            .into_iter()
            .filter(|a| a["status"]["state"] == "active")
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_cluster_fires_in_alertmanager_past_its_resolve_timeout_and_resolves_on_recovery()
 {
    let dir = tempfile::tempdir().unwrap();
    let alertmanager = Alertmanager::start(dir.path());
    let (fleet, kubeconfigs) = fleet_of(3, dir.path()).await;
    let down = fleet.clusters()[0].name().to_owned();
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            // An alert ends four intervals, or the longest wait between attempts and two
            // intervals, ahead: here 8 s, so that its first expiry is soon past.
            "[delivery]\nmax_backoff = \"2s\"\n\n\
             [[alertmanager]]\nname = \"alerts\"\nurls = [\"http://{}\"]\nrepeat_interval = \"2s\"\n",
            alertmanager.address
        ),
    )
    .unwrap();
    let mut setup = Setup::new(dir, kubeconfigs, notify);
    let mut server = setup.serve().await;
    let store = setup.store().await;
    all_online(&store, 3, &setup.log).await;
    assert!(alertmanager.active().is_empty());

    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_until("the alert firing", &setup.log, async || {
        !alertmanager.active().is_empty()
    })
    .await;
    let firing = alertmanager.active();
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0]["labels"]["alertname"], "VigilClusterOffline");
    assert_eq!(firing[0]["labels"]["cluster"], down.as_str());
    assert_eq!(firing[0]["labels"]["severity"], "critical");
    assert!(
        firing[0]["annotations"]["description"]
            .as_str()
            .unwrap()
            .starts_with("refused"),
        "{firing:?}"
    );
    let outage = store.outages(&down).await.unwrap()[0];
    let starts_at = firing[0]["startsAt"].as_str().unwrap().to_owned();
    assert_eq!(
        at(&starts_at),
        at(&vigil_notify::message::rfc3339(outage.opened_at)),
        "startsAt is the outage's opening"
    );

    // Twice the resolve_timeout later, and past the first post's endsAt: still firing,
    // because vigil posts it again. The witness: Alertmanager received the alert again
    // (its `updatedAt`) after both (the resolve_timeout is 5 s).
    let expired = at(firing[0]["endsAt"].as_str().unwrap())
        .max(at(firing[0]["updatedAt"].as_str().unwrap()) + Duration::from_secs(2 * 5));
    wait_until(
        "Alertmanager receives the alert again past its first expiry",
        &setup.log,
        async || {
            alertmanager.active().iter().any(|alert| {
                alert["updatedAt"]
                    .as_str()
                    .is_some_and(|updated| at(updated) > expired)
            })
        },
    )
    .await;
    let still = alertmanager.active();
    assert_eq!(still.len(), 1, "{still:?}");
    assert_eq!(at(still[0]["startsAt"].as_str().unwrap()), at(&starts_at));

    fleet.get(0).unwrap().come_back().await.unwrap();
    wait_until("the alert resolved", &setup.log, async || {
        alertmanager.active().is_empty()
    })
    .await;
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
}

/// An Alertmanager sink with two URLs, one dead (nothing listens): the live one gets every
/// outage within its repeat interval, and each alert stays active there for as long as its
/// cluster is OFFLINE — past the first `endsAt` and Alertmanager's `resolve_timeout` —
/// although the dead URL's attempts back off far longer (`max_backoff` 5 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_alertmanager_url_never_holds_back_the_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let alertmanager = Alertmanager::start(dir.path());
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (fleet, kubeconfigs) = fleet_of(3, dir.path()).await;
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[delivery]\nfailing_after = 2\nmax_backoff = \"5m\"\n\n\
             [[alertmanager]]\nname = \"alerts\"\n\
             urls = [\"http://{dead}\", \"http://{}\"]\nrepeat_interval = \"2s\"\ntimeout = \"2s\"\n",
            alertmanager.address
        ),
    )
    .unwrap();
    let mut setup = Setup::new(dir, kubeconfigs, notify);
    let mut server = setup.serve().await;
    let api = server.api();
    let store = setup.store().await;
    all_online(&store, 3, &setup.log).await;
    let firing = |name: &str| {
        alertmanager
            .active()
            .iter()
            .any(|alert| alert["labels"]["cluster"] == name)
    };

    // One outage, then another: each reaches the live Alertmanager, although the dead
    // URL is still being retried for the first.
    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_until("the first alert firing", &setup.log, async || {
        firing(&names[0])
    })
    .await;
    wait_until("the dead URL failing in /readyz", &setup.log, async || {
        let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
        ready["notifications"]["sinks"][0]["failing"] == true
    })
    .await;
    let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
    let error = ready["notifications"]["sinks"][0]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains(&format!("http://{dead}"))
            && !error.contains(&alertmanager.address.to_string()),
        "the dead URL, and only it, named: {ready}"
    );
    assert_eq!(
        ready["ready"], true,
        "a failing sink does not make vigil unready"
    );
    fleet.get(1).unwrap().refuse().await.unwrap();
    let second_down = Instant::now();
    wait_until("the second alert firing", &setup.log, async || {
        firing(&names[1])
    })
    .await;
    assert!(
        second_down.elapsed() < Duration::from_secs(60),
        "the second outage reached the live Alertmanager {:?} after the cluster was refused",
        second_down.elapsed()
    );

    // Each alert ends later than the longest wait between two attempts (5 minutes), so a
    // notification being retried never lets it resolve; and both stay active while their
    // clusters are OFFLINE: watched until Alertmanager was sent them again past twice its
    // resolve_timeout, never resolved in between.
    let first = alertmanager.active();
    for alert in &first {
        let ends = at(alert["endsAt"].as_str().unwrap());
        let updated = at(alert["updatedAt"].as_str().unwrap());
        assert!(
            ends.duration_since(updated).unwrap() > Duration::from_secs(300),
            "{alert}"
        );
    }
    let expired = first
        .iter()
        .map(|alert| at(alert["updatedAt"].as_str().unwrap()) + Duration::from_secs(2 * 5))
        .max()
        .unwrap();
    wait_until(
        "both alerts received again past their first expiry, active throughout",
        &setup.log,
        async || {
            let active = alertmanager.active();
            for name in &names[..2] {
                assert!(
                    active
                        .iter()
                        .any(|alert| alert["labels"]["cluster"] == name.as_str()),
                    "{name}'s alert resolved while the cluster is OFFLINE: {active:?}"
                );
            }
            active.iter().all(|alert| {
                alert["updatedAt"]
                    .as_str()
                    .is_some_and(|updated| at(updated) > expired)
            })
        },
    )
    .await;
    for alert in alertmanager.active() {
        assert!(
            at(alert["endsAt"].as_str().unwrap()) >= at(alert["startsAt"].as_str().unwrap()),
            "{alert}"
        );
    }

    fleet.get(0).unwrap().come_back().await.unwrap();
    fleet.get(1).unwrap().come_back().await.unwrap();
    wait_until("both alerts resolved", &setup.log, async || {
        alertmanager.active().is_empty()
    })
    .await;
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
}

/// A webhook receiver that cannot take one payload (400), then one that refuses every
/// attempt for a while (503): each of those notifications is passed over — a dead letter,
/// counted in `/readyz` and `/metrics` — and the ones after it arrive; vigil stays ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_notification_is_dead_lettered_and_the_later_ones_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    // Four of ten go down, one after the other: too few for the mass-failure brake.
    let (fleet, kubeconfigs) = fleet_of(10, dir.path()).await;
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let secret_file = secret_file(dir.path());
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[delivery]\nfailing_after = 2\nmax_backoff = \"1s\"\ndead_letter_after = 3\n\n\
             [[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:{}/hook\"\n\
             secret_file = \"{}\"\ntimeout = \"3s\"\nevents = [\"status-changed\"]\n",
            receiver.port,
            secret_file.display()
        ),
    )
    .unwrap();
    let mut setup = Setup::new(dir, kubeconfigs, notify);
    let mut server = setup.serve().await;
    let api = server.api();
    let store = setup.store().await;
    all_online(&store, 10, &setup.log).await;
    let arrived = |name: &str| {
        let wanted = format!("status-changed {name} ONLINE->OFFLINE");
        receiver.accepted().iter().any(|r| summary(r) == wanted)
    };
    let sink = || -> Value {
        let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
        assert_eq!(
            ready["ready"], true,
            "a dead letter never makes vigil unready"
        );
        ready["notifications"]["sinks"][0].clone()
    };

    // The receiver cannot take the first cluster's notification: passed over at once.
    std::fs::write(receiver.control.join("reject"), &names[0]).unwrap();
    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_until(
        "the refused notification dead-lettered",
        &setup.log,
        async || sink()["dead_letters"] == 1,
    )
    .await;
    let last = sink()["last_dead_letter"].as_str().unwrap().to_owned();
    assert!(
        last.contains("refused for good") && last.contains("400"),
        "{last}"
    );
    fleet.get(1).unwrap().refuse().await.unwrap();
    wait_until("the next outage delivered", &setup.log, async || {
        arrived(&names[1])
    })
    .await;
    let rejected = |name: &str| {
        receiver
            .requests()
            .iter()
            .filter(|r| r.get("rejected").is_some() && summary(r).contains(name))
            .count()
    };
    assert_eq!(rejected(&names[0]), 1, "a 400 is not tried again");
    assert!(!arrived(&names[0]));

    // The receiver refuses everything (503): three attempts, then passed over; once it
    // accepts again, the next outage arrives.
    receiver.set("fail", true);
    fleet.get(2).unwrap().refuse().await.unwrap();
    wait_until(
        "the refused-again notification dead-lettered",
        &setup.log,
        async || sink()["dead_letters"] == 2,
    )
    .await;
    let last = sink()["last_dead_letter"].as_str().unwrap().to_owned();
    assert!(
        last.contains("3 attempts failed") && last.contains("503"),
        "{last}"
    );
    let attempts = receiver
        .requests()
        .iter()
        .filter(|r| r.get("refused").is_some() && summary(r).contains(&names[2]))
        .count();
    assert_eq!(attempts, 3, "dead_letter_after attempts, then no more");
    receiver.set("fail", false);
    fleet.get(3).unwrap().refuse().await.unwrap();
    wait_until("the outage after it delivered", &setup.log, async || {
        arrived(&names[3])
    })
    .await;
    let metrics = http_get(api, "/metrics");
    let series = "vigil_notify_dead_letters_total{sink=\"ops\",kind=\"webhook\"} 2";
    assert!(metrics.contains(series), "{series} not in\n{metrics}");

    // The count is the database's: it survives a restart.
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
    let mut server = setup.serve().await;
    let api = server.api();
    wait_until(
        "the dead letters known after a restart",
        &setup.log,
        async || {
            let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
            ready["notifications"]["sinks"][0]["dead_letters"] == 2
        },
    )
    .await;
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
}

/// Two replicas on PostgreSQL: one sends the sink's notifications (it holds the sink's
/// lease); killed with SIGKILL while the receiver holds a notification, the other takes
/// the sink over once the lease lapses and sends that notification again, with the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicas_one_sends_and_the_other_takes_over_a_killed_senders_notification() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let database_url =
        tokio::task::spawn_blocking(|| vigil_test_support::postgres::server().fresh_database().url)
            .await
            .unwrap();
    let (fleet, kubeconfigs) = fleet_of(3, dir.path()).await;
    let down = fleet.clusters()[0].name().to_owned();
    let secret_file = secret_file(dir.path());
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:{}/hook\"\n\
             secret_file = \"{}\"\ntimeout = \"60s\"\n",
            receiver.port,
            secret_file.display()
        ),
    )
    .unwrap();
    let start = async |id: &str| {
        let work = dir.path().join(id);
        std::fs::create_dir_all(&work).unwrap();
        let vigil = process::serve(&work)
            .database(&database_url)
            .kubeconfigs(&kubeconfigs)
            .plugins(plugins::plugin_dir_with_only(&work, "kubeconfig-file"))
            .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-e2e-cache"))
            .env("VIGIL_REPLICA_ID", id)
            .env("VIGIL_NOTIFY_CONFIG", &notify)
            .policy(1, 5, 2)
            .start()
            .await;
        let log = vigil.log_path().to_path_buf();
        (vigil, log)
    };
    let (r1, log1) = start("r1").await;
    let (r2, log2) = start("r2").await;
    let mut replicas = [(Some(r1), log1), (Some(r2), log2)];
    let store = Store::open(&database_url).await.unwrap();
    all_online(&store, 3, &replicas[0].1).await;

    receiver.set("hold", true);
    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_until("the outage received", &replicas[0].1, async || {
        !receiver.accepted().is_empty()
    })
    .await;
    let held = receiver.accepted()[0].clone();
    assert_eq!(
        summary(&held),
        format!("status-changed {down} ONLINE->OFFLINE")
    );
    let holder: String = sqlx::query_scalar("SELECT holder FROM leases WHERE name = 'notify:ops'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let (killed, other) = if holder == "r1" { (0, 1) } else { (1, 0) };
    replicas[killed].0.take().unwrap().kill();
    receiver.set("hold", false);

    wait_until(
        "the other replica sending it again",
        &replicas[other].1,
        async || receiver.accepted().len() >= 2,
    )
    .await;
    let again = &receiver.accepted()[1];
    assert_eq!(again["id"], held["id"], "the same id");
    assert_eq!(again["body"], held["body"], "the same body");
    let holder: String = sqlx::query_scalar("SELECT holder FROM leases WHERE name = 'notify:ops'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(holder, if other == 0 { "r1" } else { "r2" });

    // And it goes on: the recovery, once.
    fleet.get(0).unwrap().come_back().await.unwrap();
    wait_until("the recovery sent", &replicas[other].1, async || {
        receiver
            .accepted()
            .iter()
            .any(|r| summary(r) == format!("status-changed {down} OFFLINE->ONLINE"))
    })
    .await;
    // Nothing more: not when every cluster has been probed twice more (once a second).
    let probes =
        |fleet: &Fleet| -> Vec<u64> { fleet.clusters().iter().map(|c| c.log().count()).collect() };
    let before = probes(&fleet);
    wait_until(
        "every cluster probed twice more",
        &replicas[other].1,
        async || {
            probes(&fleet)
                .iter()
                .zip(&before)
                .all(|(now, then)| *now >= then + 2)
        },
    )
    .await;
    let summaries: Vec<String> = receiver.accepted().iter().map(summary).collect();
    assert_eq!(summaries.len(), 3, "{summaries:#?}");
    let mut survivor = replicas[other].0.take().unwrap();
    survivor.signal("TERM");
    assert!(survivor.wait_exit(Duration::from_secs(20)).success());
}

/// A webhook over HTTPS: delivered when the sink trusts the receiver's CA (`ca_file`);
/// with the system's trust store instead, refused at the handshake, and the sink failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_over_https_is_delivered_only_to_a_receiver_the_sink_trusts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = vigil_fake_kube::tls::CertificateAuthority::generate("receiver CA").unwrap();
    let issued = ca
        .issue_server_certificate("127.0.0.1".parse().unwrap())
        .unwrap();
    let (cert, key, ca_file) = (
        dir.path().join("receiver.pem"),
        dir.path().join("receiver.key"),
        dir.path().join("ca.pem"),
    );
    std::fs::write(&cert, issued.certificate_pem()).unwrap();
    std::fs::write(&key, issued.key_pem()).unwrap();
    std::fs::write(&ca_file, ca.certificate_pem()).unwrap();
    let receiver = Receiver::start_with(dir.path(), Some((&cert, &key)));
    let (fleet, kubeconfigs) = fleet_of(2, dir.path()).await;
    let secret_file = secret_file(dir.path());
    let webhook = |name: &str, trust: &str| {
        format!(
            "[[webhook]]\nname = \"{name}\"\nurl = \"https://127.0.0.1:{}/hook\"\n\
             secret_file = \"{}\"\n{trust}\n",
            receiver.port,
            secret_file.display()
        )
    };
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[delivery]\nfailing_after = 2\nmax_backoff = \"1s\"\n\n{}\n{}",
            webhook("trusting", &format!("ca_file = \"{}\"", ca_file.display())),
            webhook("system-trust", "")
        ),
    )
    .unwrap();
    let mut setup = Setup::new(dir, kubeconfigs, notify);
    let mut server = setup.serve().await;
    let api = server.api();
    let store = setup.store().await;
    all_online(&store, 2, &setup.log).await;
    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_until("delivered over TLS", &setup.log, async || {
        !receiver.accepted().is_empty()
    })
    .await;
    wait_until("the untrusting sink failing", &setup.log, async || {
        let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
        ready["notifications"]["sinks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "system-trust" && s["failing"] == true)
    })
    .await;
    let ready: Value = serde_json::from_str(&http_get(api, "/readyz")).unwrap();
    let sinks = ready["notifications"]["sinks"].as_array().unwrap();
    let untrusting = sinks.iter().find(|s| s["name"] == "system-trust").unwrap();
    assert!(
        untrusting["last_error"]
            .as_str()
            .unwrap()
            .contains("TLS handshake"),
        "{ready}"
    );
    let trusting = sinks.iter().find(|s| s["name"] == "trusting").unwrap();
    assert_eq!(trusting["failing"], false, "{ready}");
    assert_eq!(
        receiver.accepted().len(),
        1,
        "only the trusting sink got through"
    );
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
}
