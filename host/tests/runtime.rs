//! The plugin runtime running real `.wasm` plugins: the first-party `kubeconfig-file`
//! plugin as the positive control, and the hostile test plugins of `tests/plugins/`
//! (built by `scripts/build-plugins` into `target/test-plugins/`), against fake API
//! servers on loopback.
//!
//! A missing plugin file fails the test: run `scripts/build-plugins` first.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vigil::reference::{self, Reference, Resolution};
use vigil::runtime::{CacheStatus, LoadReport, PluginRuntime, Refusal, RuntimeSettings};
use vigil::worker::{ProbeTarget, Prober};
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use vigil_fake_kube::{AddressPlan, Fleet, HangPoint, KubeconfigOptions, WrittenKubeconfig};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// A built plugin: first-party ones in `plugins.d/`, test ones in `target/test-plugins/`.
fn plugin_file(name: &str) -> PathBuf {
    let candidates = [
        root().join("plugins.d").join(format!("{name}.wasm")),
        root()
            .join("target/test-plugins")
            .join(format!("{name}.wasm")),
    ];
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("plugin {name} is not built: run scripts/build-plugins"))
}

/// Grants for the test plugins.
const ALL_GRANTS: &str = "log = true\ncredentials = true\nhttp = true\n";

/// Grants for the first-party plugin, ahead of the test plugins (which accept
/// everything) in routing.
const CONTROL_GRANTS: &str = "log = true\ncredentials = true\nhttp = true\npriority = 10\n";

/// A plugin directory holding `plugins` (name, NAME.toml text).
fn plugin_dir(dir: &Path, plugins: &[(&str, &str)]) -> PathBuf {
    let plugins_dir = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins_dir).expect("create the plugin dir");
    for (name, manifest) in plugins {
        std::fs::copy(plugin_file(name), plugins_dir.join(format!("{name}.wasm")))
            .expect("copy the plugin");
        std::fs::write(plugins_dir.join(format!("{name}.toml")), manifest)
            .expect("write the manifest");
    }
    plugins_dir
}

async fn load(plugin_dir: &Path, cache_dir: Option<&Path>) -> (PluginRuntime, LoadReport) {
    PluginRuntime::load(&RuntimeSettings {
        plugin_dir: plugin_dir.to_path_buf(),
        cache_dir: cache_dir.map(Path::to_path_buf),
        concurrency: 4,
    })
    .await
    .expect("the runtime starts")
}

/// The probe target of a written kubeconfig, resolved by the host as the worker does.
fn target(
    written: &WrittenKubeconfig,
    endpoint: &str,
    plugin: Option<&str>,
    timeout: Duration,
) -> ProbeTarget {
    let reference = Reference::parse(&format!("{}#{}", written.path.display(), written.context))
        .expect("reference");
    let connection = match reference::resolve(&reference) {
        Resolution::Connection(material) => Some(material),
        other => panic!("the test kubeconfig does not resolve: {other}"),
    };
    ProbeTarget {
        cluster: ClusterId(1),
        name: written.cluster.clone(),
        endpoint: endpoint.to_owned(),
        reference,
        connection,
        plugin: plugin.map(str::to_owned),
        timeout,
    }
}

fn assert_fault(outcome: &ProbeOutcome, needle: &str) {
    match outcome {
        ProbeOutcome::Inconclusive {
            class: ReasonClass::PluginFault,
            message,
        } => assert!(
            message.contains(needle),
            "expected {needle:?} in the message, got {message:?}"
        ),
        other => panic!("expected inconclusive(plugin-fault), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_refused_by_name_and_good_ones_load_and_cache() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(
        temp.path(),
        &[
            ("kubeconfig-file", ALL_GRANTS),
            ("wrong-world", ""),
            ("future-version", ""),
            ("trap-info", ""),
        ],
    );
    std::fs::write(dir.join("not-a-component.wasm"), b"this is text, not wasm").expect("write");
    let good = std::fs::read(plugin_file("kubeconfig-file")).expect("read");
    std::fs::write(dir.join("truncated.wasm"), &good[..good.len() / 2]).expect("write");
    std::fs::write(dir.join("bad-manifest.wasm"), &good).expect("write");
    std::fs::write(dir.join("bad-manifest.toml"), "shell = true\n").expect("write");
    let cache = temp.path().join("cache");

    let (runtime, report) = load(&dir, Some(&cache)).await;
    let loaded: Vec<&str> = report.loaded.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(loaded, ["kubeconfig-file"], "{report:#?}");
    assert_eq!(report.loaded[0].cache, CacheStatus::Miss);
    assert_eq!(runtime.plugins().len(), 1);

    let refusal = |file: &str| {
        report
            .refused
            .iter()
            .find(|r| r.file == dir.join(file))
            .unwrap_or_else(|| panic!("{file} was not refused: {report:#?}"))
            .clone()
    };
    assert_eq!(refusal("not-a-component.wasm").reason, Refusal::NotWasm);
    assert!(matches!(
        refusal("truncated.wasm").reason,
        Refusal::Invalid(_)
    ));
    assert!(matches!(
        refusal("wrong-world.wasm").reason,
        Refusal::WrongWorld { .. }
    ));
    assert!(matches!(refusal("trap-info.wasm").reason, Refusal::Info(_)));
    assert!(matches!(
        refusal("bad-manifest.wasm").reason,
        Refusal::Manifest(_)
    ));
    let future = refusal("future-version.wasm");
    assert_eq!(
        future.reason,
        Refusal::UnsupportedVersion {
            package: "vigil:plugin".to_owned(),
            version: "0.9.0".to_owned()
        }
    );
    let text = future.to_string();
    assert!(
        text.contains("future-version.wasm") && text.contains("0.9.0"),
        "{text}"
    );
    drop(runtime);

    let (_runtime, again) = load(&dir, Some(&cache)).await;
    assert_eq!(again.loaded[0].cache, CacheStatus::Hit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_are_inconclusive_next_to_a_healthy_control() {
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let own = &kubeconfigs[0];
    let sibling_name = kubeconfigs[1]
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name")
        .to_owned();
    let cluster = &fleet.clusters()[0];
    let other = &fleet.clusters()[1];
    let endpoint = cluster.server_url();

    let sibling_toml = format!("{ALL_GRANTS}[parameters]\nsibling = \"{sibling_name}\"\n");
    let egress_toml = format!(
        "{ALL_GRANTS}[parameters]\nforeign-url = \"{}/api\"\n",
        other.server_url()
    );
    let dir = plugin_dir(
        temp.path(),
        &[
            ("kubeconfig-file", CONTROL_GRANTS),
            ("loop", ALL_GRANTS),
            ("alloc", ALL_GRANTS),
            ("panic", ALL_GRANTS),
            ("malformed", ALL_GRANTS),
            ("liar", ALL_GRANTS),
            ("sibling", sibling_toml.as_str()),
            ("egress", egress_toml.as_str()),
        ],
    );
    let (runtime, report) = load(&dir, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");

    let timeout = Duration::from_millis(800);
    let probe = |plugin: &str| {
        let target = target(own, &endpoint, Some(plugin), timeout);
        let runtime = runtime.clone();
        async move {
            let started = Instant::now();
            let outcome = runtime.probe(&target).await;
            (outcome, started.elapsed())
        }
    };

    // The positive control: the first-party plugin, routed by `accepts`, is healthy.
    let routed = target(own, &endpoint, None, timeout);
    assert_eq!(runtime.probe(&routed).await, ProbeOutcome::Healthy);
    assert!(!cluster.log().entries_for("/api/v1/namespaces").is_empty());

    let (outcome, elapsed) = probe("loop").await;
    assert_fault(&outcome, "deadline");
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(1),
        "{elapsed:?}"
    );

    let (outcome, _) = probe("alloc").await;
    assert_fault(&outcome, "memory limit of 64 MiB");

    let (outcome, _) = probe("panic").await;
    assert_fault(&outcome, "trapped");

    let (outcome, _) = probe("malformed").await;
    assert_fault(&outcome, "malformed");

    let (outcome, _) = probe("liar").await;
    assert_fault(&outcome, "without a request to the cluster");

    // The sibling plugin answers healthy only when its own kubeconfig was readable and
    // every read of the sibling was denied.
    let (outcome, _) = probe("sibling").await;
    assert_eq!(outcome, ProbeOutcome::Healthy);

    // The egress plugin answers healthy only when the foreign request was denied and
    // the cluster's own endpoint was reached.
    let before = other.log().count();
    let (outcome, _) = probe("egress").await;
    assert_eq!(outcome, ProbeOutcome::Healthy);
    assert_eq!(
        other.log().count(),
        before,
        "the foreign cluster was reached"
    );

    let stats = runtime.stats("loop").expect("loop is loaded");
    assert_eq!((stats.probes, stats.faults), (1, 1));
    let stats = runtime.stats("kubeconfig-file").expect("loaded");
    assert_eq!(stats.faults, 0);

    // The control still works after all of it.
    assert_eq!(probe("kubeconfig-file").await.0, ProbeOutcome::Healthy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_call_held_past_the_budget_is_bounded_and_attributed_to_the_cluster() {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let cluster = &fleet.clusters()[0];
    let endpoint = cluster.server_url();
    let dir = plugin_dir(
        temp.path(),
        &[("kubeconfig-file", ALL_GRANTS), ("stall", ALL_GRANTS)],
    );
    let (runtime, _) = load(&dir, None).await;
    let timeout = Duration::from_millis(700);

    // Control: the stall plugin against an answering server gets an answer.
    let control = target(&kubeconfigs[0], &endpoint, Some("kubeconfig-file"), timeout);
    assert_eq!(runtime.probe(&control).await, ProbeOutcome::Healthy);

    cluster.hang(HangPoint::Request).await.expect("hang");
    let stalled = target(&kubeconfigs[0], &endpoint, Some("stall"), timeout);
    let started = Instant::now();
    let outcome = runtime.probe(&stalled).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(
            outcome,
            ProbeOutcome::Unhealthy {
                class: ReasonClass::Timeout,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(
        elapsed < timeout + Duration::from_millis(500),
        "{elapsed:?}"
    );

    // The first-party plugin against the hanging cluster: a cluster timeout too.
    let outcome = runtime.probe(&control).await;
    assert!(
        matches!(
            outcome,
            ProbeOutcome::Unhealthy {
                class: ReasonClass::Timeout,
                ..
            }
        ),
        "{outcome:?}"
    );
    cluster.come_back().await.expect("come back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_no_plugin_accepts_is_not_probeable() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(temp.path(), &[("kubeconfig-file", ALL_GRANTS)]);
    let (runtime, _) = load(&dir, None).await;
    let target = ProbeTarget {
        cluster: ClusterId(7),
        name: "web".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("https://127.0.0.1:9/healthz").expect("reference"),
        connection: None,
        plugin: None,
        timeout: Duration::from_millis(500),
    };
    match runtime.probe(&target).await {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::NoPlugin,
            ..
        } => {}
        other => panic!("expected not-probeable(no-plugin), got {other:?}"),
    }
    let unknown = ProbeTarget {
        plugin: Some("nope".to_owned()),
        ..target
    };
    assert!(matches!(
        runtime.probe(&unknown).await,
        ProbeOutcome::NotProbeable {
            class: ReasonClass::NoPlugin,
            ..
        }
    ));
}
