//! The Prometheus metrics: a worker with scripted probers on a real SQLite file
//! records probes, transitions and cascades, the store's aggregates are read at
//! scrape time, and (in the system tier) `promtool check metrics` accepts the result.

use vigil_test_support::engine as support;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{Sandbox, ScriptedProber, refused, settings, wait_until};
use vigil_decision::{
    AppStatus, BrakeConfig, ClusterId, ClusterStatus, HealthPolicy, PolicyOverrides, ProbeOutcome,
    ReasonClass, Timestamp,
};
use vigil_domain::probe::{ProbeTarget, Prober, wall_clock};
use vigil_engine::metrics::Metrics;
use vigil_engine::worker::{Worker, probe_now_recorded};
use vigil_store::{ApplySettings, Store};

/// Answers each cluster's probes from a script, then hangs: once a script is
/// played out, nothing more is recorded until the worker stops (a hanging probe
/// abandoned at shutdown records nothing), so every count is exact.
#[derive(Debug, Clone, Default)]
struct ScriptThenHang {
    scripts: Arc<Mutex<HashMap<String, VecDeque<ProbeOutcome>>>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl ScriptThenHang {
    fn script(&self, cluster: &str, outcomes: Vec<ProbeOutcome>) {
        self.scripts
            .lock()
            .unwrap()
            .insert(cluster.to_owned(), outcomes.into());
    }

    fn calls(&self, cluster: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(cluster)
            .copied()
            .unwrap_or(0)
    }
}

impl Prober for ScriptThenHang {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(target.name.clone())
            .or_default() += 1;
        let next = self
            .scripts
            .lock()
            .unwrap()
            .get_mut(&target.name)
            .and_then(VecDeque::pop_front);
        match next {
            Some(outcome) => outcome,
            None => std::future::pending().await,
        }
    }
}

/// The value of one series (name and labels exactly as rendered), which must be
/// present once.
fn value(text: &str, series: &str) -> f64 {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(
        values.len(),
        1,
        "expected exactly one series {series} in:\n{text}"
    );
    values[0]
}

/// Asserts each `(series, value)`.
fn check(text: &str, expected: &[(&str, f64)]) {
    for (series, want) in expected {
        assert_eq!(value(text, series), *want, "{series} in:\n{text}");
    }
}

fn plugin_fault() -> ProbeOutcome {
    ProbeOutcome::Inconclusive {
        class: ReasonClass::PluginFault,
        message: "the plugin trapped".to_owned(),
    }
}

fn credentials_rejected() -> ProbeOutcome {
    ProbeOutcome::CredentialsRejected {
        message: "401 Unauthorized".to_owned(),
    }
}

async fn register(sandbox: &Sandbox, store: &Store, name: &str, port: u16) {
    let reference = sandbox.kubeconfig(name, port);
    store
        .register_cluster(
            name,
            "https://127.0.0.1",
            &reference,
            &PolicyOverrides::default(),
            wall_clock(),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_records_an_outage_its_cascade_and_the_recovery() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    register(&sandbox, &store, "edge", 42_000).await;
    register(&sandbox, &store, "calm", 42_001).await;
    register(&sandbox, &store, "flaky", 42_002).await;
    // An explicit plugin labels the probe with its name; the others are routed ("auto").
    sqlx::query("UPDATE clusters SET plugin = 'kubeconfig-file' WHERE name = 'calm'")
        .execute(store.pool())
        .await
        .unwrap();
    let now = wall_clock();
    for (app, status) in [
        ("web", AppStatus::Deployed),
        ("api", AppStatus::Deployed),
        ("batch", AppStatus::Pending),
    ] {
        store.register_app(app, "edge", status, now).await.unwrap();
    }

    let prober = ScriptThenHang::default();
    prober.script("edge", vec![ProbeOutcome::Healthy, refused(), refused()]);
    prober.script("calm", vec![ProbeOutcome::Healthy]);
    prober.script("flaky", vec![plugin_fault(), credentials_rejected()]);
    let mut settings = settings(1, 2);
    // A played-out script hangs; a long timeout keeps it from turning into an
    // inconclusive outcome before the worker stops.
    settings.defaults.timeout_seconds = 60;

    let metrics = Metrics::new(false);
    let worker = Worker::new(store.clone(), prober.clone(), settings).with_metrics(metrics.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async move {
        let _ = stopped.await;
    }));
    // The probe after the last scripted answer starts only once the job of that
    // answer has finished, metrics included (one probe per cluster at a time).
    wait_until(
        Duration::from_secs(15),
        "every script is played out",
        || {
            let prober = prober.clone();
            async move {
                prober.calls("edge") == 4 && prober.calls("calm") == 2 && prober.calls("flaky") == 3
            }
        },
    )
    .await;
    stop.send(()).unwrap();
    let stats = running.await.unwrap();
    assert_eq!(stats.applied, 6, "{stats:?}");

    assert_eq!(
        store.cluster("edge").await.unwrap().health.status,
        ClusterStatus::Offline
    );
    let text = metrics.render(&store).await.unwrap();
    check(
        &text,
        &[
            (r#"vigil_clusters{status="ONLINE"}"#, 1.0),
            (r#"vigil_clusters{status="OFFLINE"}"#, 1.0),
            (r#"vigil_clusters{status="UNKNOWN"}"#, 1.0),
            (
                r#"vigil_clusters_with_condition{condition="credentials-rejected"}"#,
                1.0,
            ),
            (
                r#"vigil_clusters_with_condition{condition="probe-stale"}"#,
                0.0,
            ),
            (
                r#"vigil_transitions_total{from="UNKNOWN",to="ONLINE"}"#,
                2.0,
            ),
            (
                r#"vigil_transitions_total{from="ONLINE",to="OFFLINE"}"#,
                1.0,
            ),
            (r#"vigil_probe_failures_total{class="refused"}"#, 2.0),
            (r#"vigil_probe_failures_total{class="plugin-fault"}"#, 1.0),
            (r#"vigil_probe_failures_total{class="unauthorized"}"#, 1.0),
            (r#"vigil_plugin_faults_total{plugin="auto"}"#, 1.0),
            (r#"vigil_cascades_total{kind="degrade"}"#, 1.0),
            (r#"vigil_cascade_apps_total{kind="degrade"}"#, 2.0),
            (
                r#"vigil_probe_duration_seconds_count{plugin="auto",outcome="healthy"}"#,
                1.0,
            ),
            (
                r#"vigil_probe_duration_seconds_count{plugin="kubeconfig-file",outcome="healthy"}"#,
                1.0,
            ),
            (
                r#"vigil_probe_duration_seconds_count{plugin="auto",outcome="unhealthy"}"#,
                2.0,
            ),
            (
                r#"vigil_probe_duration_seconds_count{plugin="auto",outcome="inconclusive"}"#,
                1.0,
            ),
            (
                r#"vigil_probe_duration_seconds_bucket{plugin="auto",outcome="unhealthy",le="60"}"#,
                2.0,
            ),
            ("vigil_brake_holding", 0.0),
            ("vigil_brake_suppressed_failures_total", 0.0),
        ],
    );
    assert!(
        !text.contains("vigil_transitions_total{from=\"OFFLINE\""),
        "no recovery yet:\n{text}"
    );
    assert!(
        !text.contains(r#"kind="restore""#),
        "no restore cascade yet:\n{text}"
    );
    assert!(value(&text, "vigil_tick_duration_seconds_count") >= 1.0);
    // Every probe started, the three still hanging included, says how late it started.
    assert_eq!(value(&text, "vigil_probe_start_delay_seconds_count"), 9.0);
    assert!(
        !text.contains("cluster="),
        "no per-cluster series by default:\n{text}"
    );

    let per_cluster = Metrics::new(true).render(&store).await.unwrap();
    check(
        &per_cluster,
        &[
            (
                r#"vigil_cluster_status{cluster="edge",status="OFFLINE"}"#,
                1.0,
            ),
            (
                r#"vigil_cluster_status{cluster="calm",status="ONLINE"}"#,
                1.0,
            ),
            (
                r#"vigil_cluster_status{cluster="flaky",status="UNKNOWN"}"#,
                1.0,
            ),
        ],
    );
    assert_eq!(
        per_cluster.matches("vigil_cluster_status{").count(),
        3,
        "one series per cluster:\n{per_cluster}"
    );

    // Probe-now records through the same metrics: the recovery restores both apps.
    let healthy = ScriptedProber::default();
    let (outcome, _) = probe_now_recorded(&store, &healthy, &settings, Some(&metrics), "edge")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.outcome, ProbeOutcome::Healthy);
    let text = metrics.render(&store).await.unwrap();
    check(
        &text,
        &[
            (r#"vigil_clusters{status="ONLINE"}"#, 2.0),
            (r#"vigil_clusters{status="OFFLINE"}"#, 0.0),
            (
                r#"vigil_transitions_total{from="OFFLINE",to="ONLINE"}"#,
                1.0,
            ),
            (r#"vigil_cascades_total{kind="restore"}"#, 1.0),
            (r#"vigil_cascade_apps_total{kind="restore"}"#, 2.0),
            (r#"vigil_cascades_total{kind="degrade"}"#, 1.0),
            (
                r#"vigil_probe_duration_seconds_count{plugin="auto",outcome="healthy"}"#,
                2.0,
            ),
        ],
    );
}

const T0: i64 = 1_800_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_secs(T0 + seconds)
}

/// A fleet of three, all failing at once, so that the brake holds and suppresses
/// failures; the results are applied through the store at chosen instants and
/// recorded as the worker records them.
async fn braked_fleet(store: &Store, metrics: &Metrics) {
    let settings = ApplySettings {
        defaults: HealthPolicy::default(),
        brake: BrakeConfig {
            enabled: true,
            ratio: 1.0,
            min_failed: 3,
            window_millis: 300_000,
        },
        brake_window_explicit: true,
        replicas: Default::default(),
    };
    let mut ids: Vec<ClusterId> = Vec::new();
    // A name that needs escaping in the text format.
    for name in ["b0", "b1", "b\"2\\"] {
        let id = store
            .register_cluster(
                name,
                "https://127.0.0.1:6443",
                &format!("/nonexistent/{}.yaml", ids.len()),
                &PolicyOverrides::default(),
                at(-1000),
            )
            .await
            .unwrap();
        ids.push(id);
    }
    store
        .register_app("on-b0", "b0", AppStatus::Deployed, at(-1000))
        .await
        .unwrap();
    let apply = async |id: ClusterId, outcome: ProbeOutcome, seconds: i64| {
        metrics.record_probe("auto", &outcome, Duration::from_millis(3));
        let applied = store
            .apply_probe(id, &outcome, at(seconds), at(seconds + 300), &settings)
            .await
            .unwrap()
            .unwrap();
        metrics.record_applied(&applied);
    };
    for &id in &ids {
        apply(id, ProbeOutcome::Healthy, 0).await;
    }
    for round in [200, 400] {
        for &id in &ids {
            apply(id, refused(), round).await;
        }
    }
    metrics.record_tick(Duration::from_micros(250));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brake_is_reported_from_the_store() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let metrics = Metrics::new(false);
    braked_fleet(&store, &metrics).await;
    let brake = store.brake_state().await.unwrap();
    assert!(brake.verdict.holds(), "{brake:?}");
    assert!(brake.suppressed >= 1, "{brake:?}");

    let text = metrics.render(&store).await.unwrap();
    check(
        &text,
        &[
            ("vigil_brake_holding", 1.0),
            (
                "vigil_brake_suppressed_failures_total",
                f64::from(u32::try_from(brake.suppressed).unwrap()),
            ),
            (r#"vigil_clusters{status="ONLINE"}"#, 3.0),
            (r#"vigil_clusters{status="OFFLINE"}"#, 0.0),
            (r#"vigil_probe_failures_total{class="refused"}"#, 6.0),
        ],
    );
    assert!(!text.contains("vigil_cascades_total"), "{text}");
}

/// `promtool check metrics` on a scrape with every family present, per-cluster series
/// included. A system test: missing promtool fails it, naming
/// `scripts/install-tools promtool`.
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_the_scrape() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let promtool = vigil_test_support::tools::require("promtool", "promtool");
    assert_eq!(
        vigil_engine::metrics::CONTENT_TYPE,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let metrics = Metrics::new(true);
    braked_fleet(&store, &metrics).await;
    metrics.record_probe("kubeconfig-file", &plugin_fault(), Duration::from_secs(61));
    metrics.record_plugin_change("kubeconfig-file", "rolled-back");
    let text = metrics.render(&store).await.unwrap();
    assert!(
        text.contains(r#"vigil_cluster_status{cluster="b\"2\\",status="ONLINE"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"vigil_plugin_generation_changes_total{plugin="kubeconfig-file",change="rolled-back"} 1"#
        ),
        "{text}"
    );

    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", promtool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics refused the scrape ({}):\n{}{}\n--- scrape ---\n{text}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}
