//! `vigil serve` — the real binary, probing through the first-party `kubeconfig-file`
//! plugin of `plugins.d/` — against the fake Kubernetes API server over real TLS. Every
//! address is on loopback.
//!
//! The binary logs at trace level, as JSON. Each test counts the probes it made from that
//! log, and scans all of it for every secret its kubeconfigs hold (tokens, client keys and
//! certificates, in plain and base64 forms). Only Cranelift's code generator is held at
//! `info`: it sees compiled plugin code, never credentials, and at trace level it logs
//! every function it compiles.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use vigil_decision::{AppStatus, ClusterStatus, ConditionType};
use vigil_domain::probe::wall_clock;
use vigil_fake_kube::kubeconfig::write_kubeconfigs;
use vigil_fake_kube::{
    AddressPlan, CaRotation, ClusterHandle, Fleet, HangPoint, KubeconfigOptions, KubeconfigShape,
    ShapePlan, WrittenKubeconfig,
};
use vigil_store::{ClusterRecord, Store};
use vigil_test_support::wait;

use crate::process;
use vigil_test_support as plugins;

use process::{TRACE, log_lines, message, read_log};

/// The one request a probe makes.
const NAMESPACES: &str = "/api/v1/namespaces";

/// How long a cluster may take to reach the state a test waits for.
const WAIT: Duration = Duration::from_secs(30);

/// A running `vigil serve` with its own database and log file, and the database open.
struct Vigil {
    process: process::Vigil,
    store: Store,
}

impl Vigil {
    /// Starts vigil on `kubeconfigs` (1 s interval and timeout, threshold 2) and
    /// waits for its first discovery.
    async fn start(dir: &Path, kubeconfigs: &Path) -> Self {
        Self::start_with(dir, kubeconfigs, &[]).await
    }

    async fn start_with(dir: &Path, kubeconfigs: &Path, env: &[(&str, &str)]) -> Self {
        let process = process::serve(dir)
            .kubeconfigs(kubeconfigs)
            .plugins(plugins::plugin_dir_with_only(dir, "kubeconfig-file"))
            // Shared by the tests of this file (the cache is safe to share): the plugin
            // is compiled once per build of it, not once per test.
            .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-e2e-cache"))
            .policy(1, 1, 2)
            .json_log(TRACE)
            .envs(env.iter().copied())
            .until_discovered()
            .start()
            .await;
        let store = Store::open(&format!("sqlite://{}", dir.join("vigil.db").display()))
            .await
            .unwrap();
        Self { process, store }
    }

    async fn cluster(&self, name: &str) -> ClusterRecord {
        self.store.cluster(name).await.unwrap()
    }

    /// Its log lines so far.
    fn log_lines(&self) -> Vec<serde_json::Value> {
        self.process.log_lines()
    }

    /// Waits until `check` holds for cluster `name`.
    async fn wait_for(&self, name: &str, what: &str, check: impl Fn(&ClusterRecord) -> bool) {
        let seen = RefCell::new(String::new());
        wait::until_async(
            &format!("{name} is {what}"),
            WAIT,
            || format!("{name} is now {}\n{}", seen.borrow(), self.process.tail()),
            async || {
                let cluster = self.cluster(name).await;
                *seen.borrow_mut() = format!(
                    "{:?}, last {:?} ({:?}: {:?}), conditions {:?}",
                    cluster.health.status,
                    cluster.last_outcome,
                    cluster.last_reason_class,
                    cluster.last_reason,
                    cluster.health.conditions,
                );
                check(&cluster).then_some(())
            },
        )
        .await;
    }

    async fn wait_status(&self, name: &str, status: ClusterStatus) {
        self.wait_for(name, status.as_str(), |c| c.health.status == status)
            .await;
    }

    /// Waits until, in the lines its log gained after its first `from`, every cluster of
    /// `names` has an applied outcome that `counted` accepts `count` times.
    async fn wait_outcomes(
        &self,
        what: &str,
        names: &[String],
        from: usize,
        count: usize,
        counted: impl Fn(&str) -> bool,
    ) {
        wait::until_async(
            what,
            WAIT,
            || self.process.tail(),
            async || {
                let lines = self.log_lines();
                let outcomes = applied_outcomes(&lines[from.min(lines.len())..]);
                names
                    .iter()
                    .all(|name| {
                        outcomes
                            .get(name)
                            .map_or(0, |seen| seen.iter().filter(|o| counted(o)).count())
                            >= count
                    })
                    .then_some(())
            },
        )
        .await;
    }

    /// Stops vigil with SIGTERM and returns its log lines.
    async fn stop(self) -> Vec<serde_json::Value> {
        self.store.close().await;
        let log = self.process.log_path().to_owned();
        self.process.stop();
        log_lines(&log)
    }
}

/// The outcomes vigil applied per cluster, in order, from its log.
fn applied_outcomes(log: &[serde_json::Value]) -> BTreeMap<String, Vec<String>> {
    let mut outcomes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in log.iter().filter(|l| message(l) == "probe applied") {
        let cluster = line["fields"]["cluster"].as_str().unwrap().to_owned();
        let outcome = line["fields"]["outcome"].as_str().unwrap().to_owned();
        outcomes.entry(cluster).or_default().push(outcome);
    }
    outcomes
}

fn write(clusters: &[ClusterHandle], dir: &Path, shapes: ShapePlan) -> Vec<WrittenKubeconfig> {
    write_kubeconfigs(
        clusters,
        dir,
        &KubeconfigOptions {
            shapes,
            single_file: false,
        },
    )
    .unwrap()
}

/// Every secret the kubeconfig directory holds, in the forms a leak would take: tokens
/// plain and base64; for certificates and keys, each PEM body line and slices of the
/// base64 `*-data` values (past their common `-----BEGIN` prefix).
fn secrets_in(kubeconfigs: &Path, fleet: &Fleet) -> BTreeSet<String> {
    let mut needles = BTreeSet::new();
    for cluster in fleet.clusters() {
        add_token(&mut needles, cluster.admin_token());
        add_token(&mut needles, cluster.reader_token());
    }
    let mut files = vec![kubeconfigs.to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains("-----BEGIN") {
            // A credential file of the `files` shape. A CA certificate is public, but a
            // client certificate is not, and the files do not say which is which.
            add_pem(&mut needles, &text);
            continue;
        }
        let Ok(kubeconfig) = kube::config::Kubeconfig::from_yaml(&text) else {
            add_token(&mut needles, text.trim()); // a token file
            continue;
        };
        // Serialising writes the secret fields out in plain.
        let kubeconfig = serde_json::to_value(&kubeconfig).unwrap();
        for user in kubeconfig["users"].as_array().into_iter().flatten() {
            let user = &user["user"];
            if let Some(token) = user["token"].as_str() {
                add_token(&mut needles, token);
            }
            for field in ["client-key-data", "client-certificate-data"] {
                if let Some(data) = user[field].as_str() {
                    let decoded = STANDARD.decode(data).unwrap();
                    add_pem(&mut needles, &String::from_utf8(decoded).unwrap());
                    needles.insert(data[64..112].to_owned());
                }
            }
        }
    }
    assert!(needles.len() > 20, "the scan must have secrets to look for");
    needles
}

fn add_token(needles: &mut BTreeSet<String>, token: &str) {
    needles.insert(token.to_owned());
    needles.insert(STANDARD.encode(token));
    needles.insert(STANDARD_NO_PAD.encode(token));
}

fn add_pem(needles: &mut BTreeSet<String>, text: &str) {
    for line in text
        .lines()
        .filter(|l| l.len() >= 40 && !l.starts_with("-----"))
    {
        needles.insert(line.to_owned());
    }
    let encoded = STANDARD.encode(text);
    for start in (64..encoded.len().saturating_sub(48)).step_by(48) {
        needles.insert(encoded[start..start + 48].to_owned());
    }
}

fn assert_no_secret(log_path: &Path, needles: &BTreeSet<String>) {
    let log = read_log(log_path);
    assert!(
        log.lines().count() > 1_000,
        "the log is at trace level ({} lines)",
        log.lines().count()
    );
    for needle in needles {
        if let Some(at) = log.find(needle.as_str()) {
            let line_start = log[..at].rfind('\n').map_or(0, |i| i + 1);
            panic!(
                "a secret appears in the log (line {}): its text starts {:?}",
                log[..at].lines().count(),
                &log[line_start..(line_start + 160).min(log.len())]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_clusters_go_online_an_outage_cascades_and_recovery_restores_exactly_the_marked_apps()
 {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(3)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    // Client certificate inline, client certificate in files, bearer token.
    let written = write(fleet.clusters(), &kubeconfigs, ShapePlan::Mixed);
    let shapes: Vec<KubeconfigShape> = written.iter().map(|w| w.shape).collect();
    assert_eq!(
        shapes,
        [
            KubeconfigShape::Embedded,
            KubeconfigShape::Files,
            KubeconfigShape::Token
        ]
    );
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let down = &names[0];

    let vigil = Vigil::start(dir.path(), &kubeconfigs).await;
    for name in &names {
        vigil.wait_status(name, ClusterStatus::Online).await;
    }
    // Each was discovered UNKNOWN and made ONLINE by a probe.
    for name in &names {
        let events = vigil.store.events(Some(name)).await.unwrap();
        let first = events.iter().find(|e| e.kind == "status-changed").unwrap();
        let detail: serde_json::Value = serde_json::from_str(&first.detail).unwrap();
        assert_eq!(
            (detail["from"].as_str(), detail["to"].as_str()),
            (Some("UNKNOWN"), Some("ONLINE")),
            "{name}: {detail}"
        );
    }

    // Apps on the cluster that goes down: two deployed, one degraded by the platform.
    let now = wall_clock();
    for app in ["shop", "search"] {
        vigil
            .store
            .register_app(app, down, AppStatus::Pending, now)
            .await
            .unwrap();
        vigil
            .store
            .record_deployment(app, Some("1.0"), None, now)
            .await
            .unwrap();
    }
    vigil
        .store
        .register_app("batch", down, AppStatus::Degraded, now)
        .await
        .unwrap();
    vigil
        .store
        .register_app("elsewhere", &names[1], AppStatus::Deployed, now)
        .await
        .unwrap();

    fleet.get(0).unwrap().refuse().await.unwrap();
    vigil.wait_status(down, ClusterStatus::Offline).await;
    let offline = vigil.cluster(down).await;
    assert_eq!(offline.last_reason_class.as_deref(), Some("refused"));
    let status_of = |apps: &[vigil_store::AppRecord], name: &str| {
        apps.iter().find(|a| a.name == name).unwrap().status
    };
    let apps = vigil.store.apps().await.unwrap();
    assert_eq!(status_of(&apps, "shop"), AppStatus::Degraded);
    assert_eq!(status_of(&apps, "search"), AppStatus::Degraded);
    assert_eq!(status_of(&apps, "batch"), AppStatus::Degraded);
    assert_eq!(status_of(&apps, "elsewhere"), AppStatus::Deployed);
    for name in &names[1..] {
        assert_eq!(
            vigil.cluster(name).await.health.status,
            ClusterStatus::Online
        );
    }

    fleet.get(0).unwrap().come_back().await.unwrap();
    vigil.wait_status(down, ClusterStatus::Online).await;
    let apps = vigil.store.apps().await.unwrap();
    assert_eq!(status_of(&apps, "shop"), AppStatus::Deployed);
    assert_eq!(status_of(&apps, "search"), AppStatus::Deployed);
    assert_eq!(
        status_of(&apps, "batch"),
        AppStatus::Degraded,
        "an app the platform degraded is not restored by a cluster's recovery"
    );
    assert_eq!(status_of(&apps, "elsewhere"), AppStatus::Deployed);

    // Quiesce before counting: every cluster probed healthy a few times, then refusing;
    // once each has met the refusal, the probe that was in flight then has finished and
    // later ones reach no server.
    vigil
        .wait_outcomes(
            "every cluster is probed healthy 3 times",
            &names,
            0,
            3,
            |o| o == "healthy",
        )
        .await;
    let refused_from = vigil.log_lines().len();
    for cluster in fleet.clusters() {
        cluster.refuse().await.unwrap();
    }
    vigil
        .wait_outcomes(
            "every cluster is probed once refusing",
            &names,
            refused_from,
            1,
            |o| o == "unhealthy",
        )
        .await;
    let log = vigil.stop().await;

    // One namespace list per probe that reached the server, and no other request.
    let outcomes = applied_outcomes(&log);
    for (cluster, name) in fleet.clusters().iter().zip(&names) {
        let requests = cluster.log().entries();
        let probes = &outcomes[name];
        let healthy = probes.iter().filter(|o| *o == "healthy").count();
        assert!(healthy >= 3, "{name}: {probes:?}");
        assert_eq!(
            requests.len(),
            healthy,
            "{name}: one request per healthy probe (applied: {probes:?})"
        );
        for request in &requests {
            assert_eq!(
                (
                    request.method.as_str(),
                    request.path.as_str(),
                    request.query.as_deref()
                ),
                ("GET", NAMESPACES, Some("limit=1")),
                "{name}"
            );
            assert_eq!(request.status, Some(200), "{name}");
        }
        let connections: BTreeSet<u64> = requests.iter().map(|r| r.connection).collect();
        assert_eq!(
            connections.len(),
            requests.len(),
            "{name}: a fresh connection per probe"
        );
    }
    assert_eq!(
        outcomes[down]
            .iter()
            .filter(|o| *o == "unhealthy")
            .count()
            .min(2),
        2,
        "{down}: the outage took at least two counted failures: {:?}",
        outcomes[down]
    );

    // The host logs where each plugin request goes (the plugin writes no line of its own):
    // at least one line per request each server saw, naming the plugin and the cluster's
    // host and port, and counting it as the cluster's.
    for cluster in fleet.clusters() {
        let port = u64::from(cluster.address().port());
        let host = cluster.address().ip().to_string();
        let logged = log
            .iter()
            .filter(|line| {
                message(line) == "http.send request let out"
                    && line["fields"]["plugin"] == "kubeconfig-file"
                    && line["fields"]["host"] == host.as_str()
                    && line["fields"]["port"] == port
                    && line["fields"]["cluster"] == true
            })
            .count();
        assert!(
            logged >= cluster.log().entries().len(),
            "{}: {logged} requests logged, {} served",
            cluster.name(),
            cluster.log().entries().len()
        );
    }

    assert_no_secret(
        &dir.path().join("vigil.log"),
        &secrets_in(&kubeconfigs, &fleet),
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_ca_wrong_token_hang_exec_and_deleted_kubeconfig_each_give_their_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(5)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    let clusters = fleet.clusters();
    let [wrong_ca, wrong_token, hanging, deleted, control] =
        [0, 1, 2, 3, 4].map(|i| clusters[i].name().to_owned());
    write(
        &clusters[0..1],
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::Embedded),
    );
    write(
        &clusters[1..2],
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::Token),
    );
    write(
        &clusters[2..3],
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::Embedded),
    );
    let deleted_files = write(
        &clusters[3..4],
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::Embedded),
    );
    write(
        &clusters[4..5],
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::TokenFile),
    );
    // An EKS-style kubeconfig: its credentials come from a command vigil never runs.
    std::fs::write(
        kubeconfigs.join("eks.yaml"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: eks\nclusters:\n- name: eks\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: eks\n  context:\n    cluster: eks\n    user: eks\nusers:\n- name: eks\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n      args: [eks, get-token, --cluster-name, eks]\n",
            clusters[4].server_url()
        ),
    )
    .unwrap();
    let needles = secrets_in(&kubeconfigs, &fleet);

    let vigil = Vigil::start(dir.path(), &kubeconfigs).await;
    for name in [&wrong_ca, &wrong_token, &hanging, &deleted, &control] {
        vigil.wait_status(name, ClusterStatus::Online).await;
    }
    vigil
        .wait_for("eks", "not probeable", |c| {
            c.last_outcome.as_deref() == Some("not-probeable")
        })
        .await;
    let eks = vigil.cluster("eks").await;
    assert_eq!(eks.health.status, ClusterStatus::Unknown);
    assert_eq!(eks.last_reason_class.as_deref(), Some("exec-credentials"));
    let condition = eks.health.condition(ConditionType::NotProbeable).unwrap();
    assert!(
        condition.message.contains("exec"),
        "the reason says why: {condition:?}"
    );
    assert!(
        !clusters[4].log().entries().is_empty(),
        "the control cluster (also the EKS entry's server) is probed"
    );

    clusters[0].rotate_certificate(CaRotation::New).unwrap();
    assert!(clusters[1].revoke_token(clusters[1].admin_token()));
    clusters[2].hang(HangPoint::Request).await.unwrap();
    for file in &deleted_files {
        std::fs::remove_file(&file.path).unwrap();
    }

    vigil
        .wait_for(&wrong_ca, "unhealthy (tls)", |c| {
            c.last_outcome.as_deref() == Some("unhealthy")
                && c.last_reason_class.as_deref() == Some("tls")
        })
        .await;
    vigil.wait_status(&wrong_ca, ClusterStatus::Offline).await;

    vigil
        .wait_for(&wrong_token, "credentials-rejected", |c| {
            c.health
                .condition(ConditionType::CredentialsRejected)
                .is_some()
        })
        .await;
    let rejected = vigil.cluster(&wrong_token).await;
    assert_eq!(
        rejected.last_outcome.as_deref(),
        Some("credentials-rejected")
    );
    assert_eq!(
        rejected.health.status,
        ClusterStatus::Online,
        "rejected credentials are not an outage"
    );

    vigil
        .wait_for(&hanging, "unhealthy (timeout)", |c| {
            c.last_outcome.as_deref() == Some("unhealthy")
                && c.last_reason_class.as_deref() == Some("timeout")
        })
        .await;

    vigil
        .wait_for(&deleted, "reference-broken", |c| {
            c.health.condition(ConditionType::ReferenceBroken).is_some()
        })
        .await;
    let broken = vigil.cluster(&deleted).await;
    assert_eq!(
        broken.last_reason_class.as_deref(),
        Some("reference-broken")
    );
    assert_eq!(broken.health.status, ClusterStatus::Online, "status kept");

    // The others of the same ticks went on being probed.
    let before = clusters[4].log().entries().len();
    vigil
        .wait_for(&control, "probed again", |_| {
            clusters[4].log().entries().len() >= before + 2
        })
        .await;
    let control_record = vigil.cluster(&control).await;
    assert_eq!(control_record.health.status, ClusterStatus::Online);
    assert_eq!(control_record.last_outcome.as_deref(), Some("healthy"));
    // Still rejected after several probes: never counted toward an outage.
    assert_eq!(
        vigil.cluster(&wrong_token).await.health.status,
        ClusterStatus::Online
    );

    let log = vigil.stop().await;
    let outcomes = applied_outcomes(&log);
    assert!(
        outcomes[&wrong_token]
            .iter()
            .filter(|o| *o == "credentials-rejected")
            .count()
            >= 2,
        "{:?}",
        outcomes[&wrong_token]
    );
    assert_no_secret(&dir.path().join("vigil.log"), &needles);
    fleet.shutdown().await;
}

/// One HTTP/1.1 request to vigil's API on a fresh connection; the status and the body.
async fn http(
    api: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(api).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, api.to_string());
    if let Some(token) = token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if body.is_some() {
        request = request.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads the event stream for `duration`; everything it sent.
async fn read_events(api: std::net::SocketAddr, duration: Duration) -> String {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(api).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get("/api/v1/events?after=0")
        .header(hyper::header::HOST, api.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let mut body = sender.send_request(request).await.unwrap().into_body();
    let mut text = String::new();
    let deadline = Instant::now() + duration;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match tokio::time::timeout(left, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                }
            }
            _ => break,
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_api_responses_the_event_stream_metrics_or_the_log() {
    const API_TOKEN: &str = "api-token-never-shown-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let credentials = dir.path().join("credentials");
    std::fs::create_dir_all(&credentials).unwrap();
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    let written = write(fleet.clusters(), &kubeconfigs, ShapePlan::Mixed);
    // A credential parameter: a file whose content is a secret.
    let header_secret = "header-secret-value-9876543210";
    std::fs::write(credentials.join("auth-header"), header_secret).unwrap();
    let mut needles = secrets_in(&kubeconfigs, &fleet);
    add_token(&mut needles, API_TOKEN);
    add_token(&mut needles, header_secret);

    let vigil = Vigil::start_with(
        dir.path(),
        &kubeconfigs,
        &[
            ("VIGIL_API_TOKEN", API_TOKEN),
            ("VIGIL_CREDENTIAL_DIRS", credentials.to_str().unwrap()),
        ],
    )
    .await;
    let names: Vec<String> = written.iter().map(|w| w.cluster.clone()).collect();
    for name in &names {
        vigil.wait_status(name, ClusterStatus::Online).await;
    }
    let api = vigil.process.api();
    let events = tokio::spawn(read_events(api, Duration::from_secs(6)));

    // Every route, with the token where a change needs it.
    let parameter = format!("file://{}", credentials.join("auth-header").display());
    let reference = format!("{}#{}", written[0].path.display(), written[0].context);
    let mut replies = Vec::new();
    let mut call = async |method: &str, path: &str, body: Option<serde_json::Value>| {
        let (status, text) = http(api, method, path, Some(API_TOKEN), body).await;
        assert!(status < 500, "{method} {path}: {status} {text}");
        replies.push(format!("{method} {path} {status} {text}"));
        (status, text)
    };
    let manual = serde_json::json!({
        "name": "manual",
        "endpoint": fleet.get(0).unwrap().server_url(),
        "kubeconfig_secret_ref": reference,
        "parameters": { "header.Authorization": parameter, "mode": "strict" },
        "labels": { "team": "ops" },
    });
    assert_eq!(call("POST", "/api/v1/clusters", Some(manual)).await.0, 201);
    call("GET", "/api/v1/clusters", None).await;
    call("GET", "/api/v1/clusters/manual", None).await;
    call(
        "PATCH",
        "/api/v1/clusters/manual",
        Some(serde_json::json!({ "labels": { "team": "web" } })),
    )
    .await;
    // The worker probes a newly registered cluster at once: probe-now waits its turn.
    let probe = wait::until_async(
        "probe-now has its turn (no longer 409)",
        WAIT,
        || vigil.process.tail(),
        async || {
            let probe = call("POST", "/api/v1/clusters/manual/probe", None).await;
            (probe.0 != 409).then_some(probe)
        },
    )
    .await;
    assert_eq!(probe.0, 200, "{}", probe.1);
    call("GET", "/api/v1/clusters/manual/history", None).await;
    call(
        "POST",
        "/api/v1/apps",
        Some(serde_json::json!({ "name": "shop", "cluster": "manual" })),
    )
    .await;
    call(
        "POST",
        "/api/v1/deployments",
        Some(serde_json::json!({ "app": "shop", "version": "2" })),
    )
    .await;
    call(
        "PUT",
        "/api/v1/apps/shop/status",
        Some(serde_json::json!({ "status": "DEGRADED" })),
    )
    .await;
    call(
        "POST",
        "/api/v1/apps/shop/reassign",
        Some(serde_json::json!({ "cluster": names[1] })),
    )
    .await;
    call("GET", "/api/v1/apps", None).await;
    call("GET", "/api/v1/apps/shop", None).await;
    assert_eq!(call("DELETE", "/api/v1/clusters/manual", None).await.0, 204);
    call("GET", "/api/v1/plugins", None).await;
    call("GET", "/healthz", None).await;
    let (ready, text) = call("GET", "/readyz", None).await;
    assert_eq!(ready, 200, "discovered and every cluster probed: {text}");
    let (_, metrics) = call("GET", "/metrics", None).await;
    assert!(metrics.contains("vigil_clusters{"), "{metrics}");
    call("GET", "/openapi.json", None).await;
    // Refusals say why without echoing what was sent.
    let (status, refused) = http(
        api,
        "POST",
        "/api/v1/clusters",
        Some("wrong-token-but-long-enough"),
        Some(serde_json::json!({})),
    )
    .await;
    assert_eq!(status, 401, "{refused}");
    replies.push(refused);
    let stream = events.await.unwrap();
    assert!(
        stream.contains("cluster-registered"),
        "the stream saw the changes: {stream}"
    );
    replies.push(stream);

    let log = vigil.stop().await;
    assert!(!log.is_empty());
    let seen = replies.join("\n");
    assert!(
        !seen.contains(&parameter),
        "a credential parameter's reference is never returned"
    );
    for needle in &needles {
        assert!(
            !seen.contains(needle.as_str()),
            "a secret appears in an API reply or the event stream"
        );
    }
    assert_no_secret(&dir.path().join("vigil.log"), &needles);
    fleet.shutdown().await;
}

/// Replaces the value of `field` (a `*-data` field of the kubeconfig text, whose value may
/// continue on more deeply indented lines) with `value`.
fn with_field(kubeconfig: &str, field: &str, value: &str) -> String {
    let mut out = Vec::new();
    let mut continuation: Option<usize> = None;
    for line in kubeconfig.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(key_indent) = continuation {
            if indent > key_indent && !line.trim().is_empty() && !line.contains(": ") {
                continue;
            }
            continuation = None;
        }
        match line.split_once(&format!("{field}:")) {
            Some((before, _)) => {
                out.push(format!("{before}{field}: {value}"));
                continuation = Some(indent);
            }
            None => out.push(line.to_owned()),
        }
    }
    out.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_material_from_the_reference_never_calls_a_cluster_down_while_real_failures_still_do()
 {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(7)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    let clusters = fleet.clusters();
    let written = write(
        clusters,
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::Embedded),
    );
    let [
        mismatched,
        corrupt,
        refused,
        silent,
        dropped,
        failing,
        control,
    ] = [0, 1, 2, 3, 4, 5, 6].map(|i| clusters[i].name().to_owned());
    let down = [&refused, &silent, &dropped, &failing];

    let vigil = Vigil::start(dir.path(), &kubeconfigs).await;
    for name in [&mismatched, &corrupt, &control].into_iter().chain(down) {
        vigil.wait_status(name, ClusterStatus::Online).await;
    }
    let now = wall_clock();
    let app_of = |cluster: &str| format!("on-{cluster}");
    for cluster in [&mismatched, &corrupt].into_iter().chain(down) {
        vigil
            .store
            .register_app(&app_of(cluster), cluster, AppStatus::Deployed, now)
            .await
            .unwrap();
    }

    // A half-done rotation: a new client key beside the old certificate. And a client key
    // that is not PEM at all.
    let text = |i: usize| std::fs::read_to_string(&written[i].path).unwrap();
    let other_key = STANDARD.encode(rcgen::KeyPair::generate().unwrap().serialize_pem());
    let garbage =
        STANDARD.encode("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n");
    let replace = |i: usize, field: &str, value: &str| {
        let path = &written[i].path;
        let temporary = path.with_extension("tmp");
        std::fs::write(&temporary, with_field(&text(i), field, value)).unwrap();
        std::fs::rename(&temporary, path).unwrap();
    };
    replace(0, "client-key-data", &other_key);
    replace(1, "client-key-data", &garbage);
    for name in [&mismatched, &corrupt] {
        vigil
            .wait_for(name, "reference-broken", |c| {
                c.health.condition(ConditionType::ReferenceBroken).is_some()
            })
            .await;
    }
    let broken = vigil.cluster(&mismatched).await;
    assert_eq!(broken.last_outcome.as_deref(), Some("not-probeable"));
    assert_eq!(
        broken.last_reason_class.as_deref(),
        Some("reference-broken")
    );
    let condition = broken
        .health
        .condition(ConditionType::ReferenceBroken)
        .unwrap();
    assert!(
        condition.message.contains("do not fit"),
        "the reason names what is wrong: {condition:?}"
    );
    let connections = |i: usize| clusters[i].log().counts().connections;
    let seen = [connections(0), connections(1)];

    // Real failures still go OFFLINE at the threshold and degrade their apps: a closed
    // port, a server that accepts and never starts TLS, a SYN that is never answered, and
    // a server that answers 500.
    let black_hole = BlackHole::open();
    clusters[2].refuse().await.unwrap();
    clusters[3].hang(HangPoint::Handshake).await.unwrap();
    replace(4, "server", &format!("https://{}", black_hole.address));
    clusters[5].fail_with(500).await.unwrap();
    for name in down {
        vigil.wait_status(name, ClusterStatus::Offline).await;
    }
    // Several more probes of everyone.
    let before = clusters[6].log().entries().len();
    vigil
        .wait_for(&control, "probed again", |_| {
            clusters[6].log().entries().len() >= before + 3
        })
        .await;

    for name in [&mismatched, &corrupt] {
        let cluster = vigil.cluster(name).await;
        assert_eq!(cluster.health.status, ClusterStatus::Online, "{name}");
        assert_eq!(cluster.health.consecutive_failures, 0, "{name}");
    }
    assert_eq!(
        [connections(0), connections(1)],
        seen,
        "no connection reached a cluster whose material cannot be used"
    );
    for (name, class) in [
        (&refused, "refused"),
        (&silent, "timeout"),
        (&dropped, "timeout"),
        (&failing, "server-error"),
    ] {
        let cluster = vigil.cluster(name).await;
        assert_eq!(cluster.last_outcome.as_deref(), Some("unhealthy"), "{name}");
        assert_eq!(cluster.last_reason_class.as_deref(), Some(class), "{name}");
    }
    let apps = vigil.store.apps().await.unwrap();
    let status_of = |cluster: &str| {
        apps.iter()
            .find(|a| a.name == app_of(cluster))
            .unwrap()
            .status
    };
    assert_eq!(status_of(&mismatched), AppStatus::Deployed);
    assert_eq!(status_of(&corrupt), AppStatus::Deployed);
    for name in down {
        assert_eq!(status_of(name), AppStatus::Degraded, "{name}");
    }

    let log = vigil.stop().await;
    let outcomes = applied_outcomes(&log);
    for name in [&mismatched, &corrupt] {
        assert!(
            !outcomes[name].iter().any(|o| o == "unhealthy"),
            "{name}: {:?}",
            outcomes[name]
        );
    }
    fleet.shutdown().await;
}

/// A loopback port that never answers a SYN: its accept queue is full and nobody accepts,
/// so the kernel drops every new connection attempt, as a firewall that drops packets does.
struct BlackHole {
    address: std::net::SocketAddr,
    _listener: tokio::net::TcpListener,
    _queued: Vec<std::net::TcpStream>,
}

impl BlackHole {
    fn open() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
        // A backlog of 0 holds one established connection; the next SYN finds the queue full.
        let listener = socket.listen(0).unwrap();
        let address = listener.local_addr().unwrap();
        let attempt = || std::net::TcpStream::connect_timeout(&address, Duration::from_millis(300));
        let queued: Vec<_> = (0..2).filter_map(|_| attempt().ok()).collect();
        let probe = attempt();
        assert!(
            probe
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
            "a connection to the full queue must go unanswered: {probe:?}"
        );
        Self {
            address,
            _listener: listener,
            _queued: queued,
        }
    }
}

/// `prlimit --pid PID --nofile=LIMIT`: the soft and hard limits of a running process.
fn set_open_files_limit(pid: u32, limit: &str) {
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--nofile={limit}"))
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --nofile={limit}: {status:?}");
}

/// The soft and hard `RLIMIT_NOFILE` of a running process.
fn open_files_limit(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_owned(), fields[4].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_descriptors_is_vigils_trouble_never_the_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    let clusters = fleet.clusters();
    write(
        clusters,
        &kubeconfigs,
        ShapePlan::Only(KubeconfigShape::Embedded),
    );
    let names: Vec<String> = clusters.iter().map(|c| c.name().to_owned()).collect();
    let vigil = Vigil::start(dir.path(), &kubeconfigs).await;
    for name in &names {
        vigil.wait_status(name, ClusterStatus::Online).await;
    }
    let now = wall_clock();
    for name in &names {
        vigil
            .store
            .register_app(&format!("on-{name}"), name, AppStatus::Deployed, now)
            .await
            .unwrap();
    }

    // A soft limit below what vigil holds open already: every new socket or file fails
    // with EMFILE while the descriptors it has keep working. (Only the soft limit: raising
    // a hard limit back needs a capability a container may not have.)
    let pid = vigil.process.pid();
    let (soft, hard) = open_files_limit(pid);
    let lines_before = vigil.log_lines().len();
    set_open_files_limit(pid, &format!("8:{hard}"));
    let host_faults = |lines: &[serde_json::Value]| {
        lines[lines_before.min(lines.len())..]
            .iter()
            .filter(|l| {
                message(l) == "probe applied" && l["fields"]["class"].as_str() == Some("host-fault")
            })
            .count()
    };
    // Several probes of each cluster, more than the failure threshold.
    wait::until_async(
        "probes meet the exhausted descriptor table",
        Duration::from_secs(60),
        || vigil.process.tail(),
        async || (host_faults(&vigil.log_lines()) >= 3 * names.len()).then_some(()),
    )
    .await;
    set_open_files_limit(pid, &format!("{soft}:{hard}"));

    for name in &names {
        let cluster = vigil.cluster(name).await;
        assert_eq!(cluster.health.status, ClusterStatus::Online, "{name}");
        assert_eq!(cluster.health.consecutive_failures, 0, "{name}");
    }
    let apps = vigil.store.apps().await.unwrap();
    assert!(
        apps.iter().all(|a| a.status == AppStatus::Deployed),
        "{apps:?}"
    );
    // The engine saw its own fault, said so, and probes normally again.
    let (status, metrics) = http(vigil.process.api(), "GET", "/metrics", None, None).await;
    assert_eq!(status, 200);
    let counted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("vigil_host_faults_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("vigil_host_faults_total in:\n{metrics}"));
    assert!(counted >= (3 * names.len()) as f64, "{counted}");
    let before = clusters[0].log().counts().requests;
    vigil
        .wait_for(&names[0], "probed again", |_| {
            clusters[0].log().counts().requests >= before + 2
        })
        .await;

    let log = vigil.stop().await;
    let outcomes = applied_outcomes(&log);
    for name in &names {
        assert!(
            !outcomes[name].iter().any(|o| o == "unhealthy"),
            "{name}: {:?}",
            outcomes[name]
        );
    }
    fleet.shutdown().await;
}
