//! Bounded resources under load and store faults: a flood of probe-now calls against slow
//! clusters on a running `vigil serve` (the real `kubeconfig-file` plugin, the fake
//! server over TLS), a database on a small tmpfs filled under it, and a worker whose reads
//! of the schedule fail for a while. Every address is on loopback; every check is a count
//! or a bound.

use std::collections::BTreeMap;
#[cfg(feature = "system-tests")]
use std::fs::File;
#[cfg(feature = "system-tests")]
use std::io::Write as _;
use std::path::Path;
#[cfg(feature = "system-tests")]
use std::path::PathBuf;
#[cfg(feature = "system-tests")]
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use vigil_decision::PolicyOverrides;
use vigil_fake_kube::kubeconfig::write_kubeconfigs;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions, ShapePlan};

use crate::process;
use vigil_test_support as plugins;
use vigil_test_support::{engine, wait};

use engine::{Behaviour, Sandbox, ScriptedProber, settings, wait_until};

/// The one request a probe makes.
const NAMESPACES: &str = "/api/v1/namespaces";

/// The API token of these tests.
const TOKEN: &str = "bounds-test-token-0123456789";

/// A running `vigil serve`, with the API token of these tests.
struct Vigil {
    vigil: process::Vigil,
    api: std::net::SocketAddr,
}

impl Vigil {
    /// Starts `serve` with the token, logging JSON filtered by `filter`, and waits for its
    /// first discovery.
    async fn start(serve: process::Serve, filter: &str) -> Self {
        let vigil = serve
            .json_log(filter)
            .env("VIGIL_API_TOKEN", TOKEN)
            .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("bounds-cache"))
            .until_discovered()
            .start()
            .await;
        Self {
            api: vigil.api(),
            vigil,
        }
    }

    /// Fails the test if vigil is no longer running.
    fn assert_running(&mut self) {
        if let Some(status) = self.vigil.try_wait() {
            panic!("vigil exited with {status:?}:\n{}", self.vigil.tail());
        }
    }

    async fn get_json(&self, path: &str) -> serde_json::Value {
        let answer = http(self.api, "GET", path).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        serde_json::from_str(&answer.body).unwrap()
    }

    /// Waits until every cluster of `names` is ONLINE.
    async fn wait_online(&self, names: &[String]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for name in names {
            wait::until_async(
                &format!("{name} is ONLINE"),
                deadline.saturating_duration_since(Instant::now()),
                || self.vigil.tail(),
                async || {
                    let cluster = self.get_json(&format!("/api/v1/clusters/{name}")).await;
                    (cluster["status"] == "ONLINE").then_some(())
                },
            )
            .await;
        }
    }

    fn stop(self) {
        self.vigil.stop();
    }
}

/// One answer of vigil's API.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: String,
}

/// One HTTP/1.1 request to vigil's API on a fresh connection, with the token.
async fn http(api: std::net::SocketAddr, method: &str, path: &str) -> Answer {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(api).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, api.to_string())
        .header(hyper::header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(hyper::header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        retry_after,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The sum of a counter's samples in a Prometheus scrape (every label set).
fn counter_total(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with("_total") || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How many namespace lists (probes) each cluster of `fleet` has been sent.
fn probes_seen(fleet: &Fleet) -> BTreeMap<String, usize> {
    fleet
        .clusters()
        .iter()
        .map(|c| (c.name().to_owned(), c.log().entries_for(NAMESPACES).len()))
        .collect()
}

/// 200 probe-now calls at once against 40 slow clusters, while a replacement plugin
/// generation is on probation: each call gets the probe's answer or a 429 with
/// `Retry-After` (or a 409 for a cluster already being probed); no probe is a plugin or
/// host fault, the probation sees no inconclusive probe and is not rolled back, and every
/// cluster keeps getting its scheduled probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_probe_now_calls_is_bounded_and_the_schedule_and_probation_hold() {
    const CLUSTERS: usize = 40;
    const CALLS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(CLUSTERS)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    write_kubeconfigs(
        fleet.clusters(),
        &kubeconfigs,
        &KubeconfigOptions {
            shapes: ShapePlan::Mixed,
            single_file: false,
        },
    )
    .unwrap();
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let plugin_dir = plugins::plugin_dir_with_only(dir.path(), "kubeconfig-file");

    let serve = process::serve(dir.path())
        .kubeconfigs(&kubeconfigs)
        .plugins(&plugin_dir)
        .env("CLUSTER_HEALTH_INTERVAL", "5")
        .env("CLUSTER_HEALTH_TIMEOUT", "3")
        .env("CLUSTER_HEALTH_CONCURRENCY", "8")
        // A replacement stays on probation through the test, and one inconclusive probe
        // would roll it back.
        .env("VIGIL_PLUGIN_PROBATION_PROBES", "100000")
        .env("VIGIL_PLUGIN_PROBATION_MAX_INCONCLUSIVE", "0");
    let mut vigil = Vigil::start(
        serve,
        "info,vigil_plugin_host=debug,cranelift_codegen=info,wasmtime=info",
    )
    .await;
    vigil.wait_online(&names).await;

    // A new generation of the plugin, on probation.
    plugins::install(
        &plugin_dir.join("kubeconfig-file.wasm"),
        &plugins::plugin_variant("kubeconfig-file", "bounds-v2"),
    );
    let reload = http(vigil.api, "POST", "/api/v1/plugins/reload").await;
    assert_eq!(reload.status, 200, "{}", reload.body);
    let plugin = plugin_view(&vigil).await;
    assert_eq!(
        (plugin["state"].as_str(), plugin["generation"].as_u64()),
        (Some("probation"), Some(2)),
        "{plugin}"
    );

    // Slow clusters: every probe holds its slot for a while.
    for cluster in fleet.clusters() {
        cluster.delay(Duration::from_millis(700)).await.unwrap();
    }
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let api = vigil.api;
            let name = names[i % CLUSTERS].clone();
            tokio::spawn(async move {
                http(api, "POST", &format!("/api/v1/clusters/{name}/probe")).await
            })
        })
        .collect();
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for call in calls {
        let answer = call.await.unwrap();
        *by_status.entry(answer.status).or_default() += 1;
        let problem: serde_json::Value =
            serde_json::from_str(&answer.body).unwrap_or(serde_json::Value::Null);
        match answer.status {
            200 => assert_eq!(problem["outcome"], "healthy", "{}", answer.body),
            429 => {
                assert_eq!(
                    problem["type"], "https://vigil.dev/problems/probes-busy",
                    "{}",
                    answer.body
                );
                let seconds: u64 = answer
                    .retry_after
                    .as_deref()
                    .expect("a 429 says when to retry")
                    .parse()
                    .unwrap();
                assert!((1..=10).contains(&seconds), "Retry-After {seconds}");
            }
            409 => assert_eq!(
                problem["type"], "https://vigil.dev/problems/probe-in-progress",
                "{}",
                answer.body
            ),
            other => panic!("probe-now answered {other}: {}", answer.body),
        }
    }
    assert!(
        by_status.get(&429).copied().unwrap_or(0) > 0
            && by_status.get(&200).copied().unwrap_or(0) > 0,
        "the flood met the bound and some probes ran: {by_status:?}"
    );
    vigil.assert_running();

    // The schedule goes on: every cluster gets its scheduled probes after the flood.
    let before = probes_seen(&fleet);
    let starved = || {
        let now = probes_seen(&fleet);
        names
            .iter()
            .filter(|n| now[*n] < before[*n] + 2)
            .cloned()
            .collect::<Vec<String>>()
    };
    wait::until_async(
        "every cluster gets two scheduled probes after the flood",
        Duration::from_secs(40),
        || {
            format!(
                "clusters without two scheduled probes after the flood: {:?}\n{}",
                starved(),
                vigil.vigil.tail()
            )
        },
        async || starved().is_empty().then_some(()),
    )
    .await;

    // No probe was anyone's fault, and the probation saw none inconclusive.
    let scrape = http(vigil.api, "GET", "/metrics").await.body;
    assert_eq!(
        counter_total(&scrape, "vigil_plugin_faults"),
        0.0,
        "{scrape}"
    );
    assert_eq!(counter_total(&scrape, "vigil_host_faults"), 0.0, "{scrape}");
    let plugin = plugin_view(&vigil).await;
    assert_eq!(
        (plugin["state"].as_str(), plugin["generation"].as_u64()),
        (Some("probation"), Some(2)),
        "not rolled back: {plugin}"
    );
    assert_eq!(plugin["faults"], 0, "{plugin}");
    assert_eq!(plugin["probation"]["inconclusive"], 0, "{plugin}");
    assert!(
        plugin["probation"]["judged"].as_u64().unwrap() > 0,
        "{plugin}"
    );
    for name in &names {
        let cluster = vigil.get_json(&format!("/api/v1/clusters/{name}")).await;
        assert_eq!(cluster["status"], "ONLINE", "{cluster}");
        assert_eq!(cluster["last_outcome"], "healthy", "{cluster}");
    }
    vigil.stop();
    fleet.shutdown().await;
}

async fn plugin_view(vigil: &Vigil) -> serde_json::Value {
    let plugins = vigil.get_json("/api/v1/plugins").await;
    plugins
        .as_array()
        .or_else(|| plugins["items"].as_array())
        .expect("a list of plugins")
        .iter()
        .find(|p| p["name"] == "kubeconfig-file")
        .cloned()
        .expect("kubeconfig-file is listed")
}

/// Whether this process may make a private mount namespace and mount a tmpfs in it.
#[cfg(feature = "system-tests")]
fn private_tmpfs_works() -> bool {
    Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Writes zeros to `path` until the file system holding it is full.
#[cfg(feature = "system-tests")]
fn fill(path: &Path) -> u64 {
    let mut file = File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(error) => {
                assert_eq!(
                    error.raw_os_error(),
                    Some(28),
                    "filling stopped with {error}, not ENOSPC"
                );
                break;
            }
        }
    }
    // What is still buffered may fail too: the file system is full either way.
    let _ = file.sync_all();
    written
}

/// The database on a 4 MiB tmpfs in a private mount namespace (as root, file modes do
/// not stop writes; a full file system does), filled under a running engine: vigil stays
/// up, each cluster is probed at most about once per interval (not back to back),
/// `/readyz` answers 503 saying that store writes fail, and once space is freed the
/// results are written again and `/readyz` recovers. A system test: a mount namespace
/// and a tmpfs need root.
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_a_running_engine_backs_off_and_readyz_says_why() {
    assert!(
        private_tmpfs_works(),
        "`unshare -m` with a tmpfs mount must work here (run as root)"
    );
    const INTERVAL: u64 = 1;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let db_dir = dir.path().join("db");
    std::fs::create_dir_all(&db_dir).unwrap();
    let fleet = Fleet::builder()
        .clusters(3)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    write_kubeconfigs(
        fleet.clusters(),
        &kubeconfigs,
        &KubeconfigOptions {
            shapes: ShapePlan::Mixed,
            single_file: false,
        },
    )
    .unwrap();
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();

    // `vigil serve` in a mount namespace of its own, its database on a small tmpfs there.
    let serve = process::serve(dir.path())
        .database(format!("sqlite://{}", db_dir.join("vigil.db").display()))
        .kubeconfigs(&kubeconfigs)
        .plugins(plugins::plugin_dir_with_only(dir.path(), "kubeconfig-file"))
        .env("CLUSTER_HEALTH_INTERVAL", INTERVAL.to_string())
        .env("CLUSTER_HEALTH_TIMEOUT", "1")
        .wrapped("unshare", {
            let args: [&std::ffi::OsStr; 8] = [
                "-m".as_ref(),
                "--propagation".as_ref(),
                "private".as_ref(),
                "sh".as_ref(),
                "-c".as_ref(),
                "mount -t tmpfs -o size=4m tmpfs \"$1\" && shift && exec \"$@\"".as_ref(),
                "sh".as_ref(),
                db_dir.as_os_str(),
            ];
            args
        });
    let mut vigil = Vigil::start(serve, "info,cranelift_codegen=info,wasmtime=info").await;
    vigil.wait_online(&names).await;
    // The tmpfs as vigil sees it: `sh` exec'd vigil, so the child is vigil itself.
    let private_db_dir = PathBuf::from(format!("/proc/{}/root", vigil.vigil.pid()))
        .join(db_dir.strip_prefix("/").unwrap());
    assert!(
        private_db_dir.join("vigil.db").is_file(),
        "the database lies on the private tmpfs"
    );
    assert!(
        !db_dir.join("vigil.db").exists(),
        "the tmpfs is not visible outside vigil's mount namespace"
    );

    let filler = private_db_dir.join("filler");
    let filled = fill(&filler);
    assert!(filled > 0);

    // `/readyz` says that writes fail, and why.
    let last = std::cell::RefCell::new(None);
    let ready = wait::until_async(
        "/readyz answers 503 after the disk filled",
        Duration::from_secs(30),
        || format!("last answer: {:?}\n{}", last.borrow(), vigil.vigil.tail()),
        async || {
            let answer = http(vigil.api, "GET", "/readyz").await;
            if answer.status == 503 {
                return Some(serde_json::from_str::<serde_json::Value>(&answer.body).unwrap());
            }
            *last.borrow_mut() = Some(answer);
            None
        },
    )
    .await;
    assert_eq!(ready["store_writes"], false, "{ready}");
    assert_eq!(ready["ready"], false, "{ready}");
    let reasons = ready["reasons"].to_string();
    assert!(
        reasons.contains("store writes failing") && reasons.contains("full"),
        "{ready}"
    );

    // Over a window that ends once every cluster was probed twice more (probing goes on),
    // each is probed at most once per interval and a little: never back to back. (Held
    // back for its interval, doubling with each failed write, it takes a few intervals.)
    let before = probes_seen(&fleet);
    let since = Instant::now();
    wait::until_async(
        "every cluster probed twice more with the disk full",
        Duration::from_secs(60),
        || vigil.vigil.tail(),
        async || {
            let now = probes_seen(&fleet);
            names
                .iter()
                .all(|name| now[name] >= before[name] + 2)
                .then_some(())
        },
    )
    .await;
    let after = probes_seen(&fleet);
    let window = since.elapsed();
    vigil.assert_running();
    // Ten intervals allowed twelve probes: once per interval and a fifth, and one for the
    // window's start falling just before a probe.
    let intervals = window.as_secs_f64() / INTERVAL as f64;
    let most = (intervals * 1.2).ceil() as usize + 1;
    for name in &names {
        let probes = after[name] - before[name];
        assert!(
            (1..=most).contains(&probes),
            "{name}: {probes} probes in {window:?} with the disk full\n{}",
            vigil.vigil.tail()
        );
    }

    // Space again: results are written, `/readyz` recovers.
    std::fs::remove_file(&filler).unwrap();
    let last = std::cell::RefCell::new(String::new());
    wait::until_async(
        "/readyz recovers after space was freed",
        Duration::from_secs(60),
        || {
            format!(
                "/readyz did not recover after space was freed: {}",
                last.borrow()
            )
        },
        async || {
            let answer = http(vigil.api, "GET", "/readyz").await;
            if answer.status == 200 {
                return Some(());
            }
            *last.borrow_mut() = answer.body;
            None
        },
    )
    .await;
    vigil.stop();
    fleet.shutdown().await;
}

/// The worker's reads of the schedule fail for a while (the table is renamed away under
/// it): the worker logs, backs off and keeps running, and probes every cluster again once
/// the reads work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_schedule_read_is_retried_and_the_worker_keeps_running() {
    use sqlx::Connection as _;
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let names = ["a", "b"];
    for (i, name) in names.iter().enumerate() {
        let reference = sandbox.kubeconfig(name, 41_000 + u16::try_from(i).unwrap());
        store
            .register_cluster(
                name,
                "https://127.0.0.1",
                &reference,
                &PolicyOverrides::default(),
                vigil_domain::probe::wall_clock(),
            )
            .await
            .unwrap();
    }
    let prober = ScriptedProber::new(Behaviour::healthy());
    let worker = vigil_engine::worker::Worker::new(store.clone(), prober.clone(), settings(1, 2));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The worker's own log, to count its failed reads.
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("vigil_engine=debug"))
        .with_ansi(false)
        .with_writer(log.clone())
        .finish();
    let running = tokio::spawn(tracing::instrument::WithSubscriber::with_subscriber(
        worker.run(async move {
            let _ = stopped.await;
        }),
        subscriber,
    ));
    // Written, not only probed: results wait a moment for others to share their commit.
    wait_until(
        Duration::from_secs(10),
        "both clusters' results are written",
        || {
            let store = store.clone();
            async move {
                for n in names {
                    if store.cluster(n).await.unwrap().last_outcome.is_none() {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;

    // Another connection takes the table away: every read of the schedule fails.
    let mut admin =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rw", sandbox.db().display()))
            .await
            .unwrap();
    sqlx::query("ALTER TABLE clusters RENAME TO clusters_away")
        .execute(&mut admin)
        .await
        .unwrap();
    // Until the worker looked, failed and backed off several times.
    let failed_reads = || log.text().matches("schedule read failed").count();
    let before = failed_reads();
    wait::until_async(
        "the worker fails to read the schedule three times",
        Duration::from_secs(30),
        || log.text(),
        async || (failed_reads() >= before + 3).then_some(()),
    )
    .await;
    assert!(
        !running.is_finished(),
        "the worker ended on a failed read: {:?}",
        running.await
    );
    let during: Vec<usize> = names.iter().map(|n| prober.call_count(n)).collect();

    sqlx::query("ALTER TABLE clusters_away RENAME TO clusters")
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    wait_until(
        Duration::from_secs(30),
        "both clusters are probed again",
        || {
            let prober = prober.clone();
            let during = during.clone();
            async move {
                names
                    .iter()
                    .zip(&during)
                    .all(|(n, seen)| prober.call_count(n) > *seen)
            }
        },
    )
    .await;
    let _ = stop.send(());
    let stats = running.await.unwrap();
    assert!(stats.applied >= 4, "{stats:?}");
    store.close().await;
}

/// Everything written through `tracing` while it is set, as text without colours.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
