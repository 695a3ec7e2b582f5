//! Plugin generations through the real runtime and real `.wasm` files
//! (replacement): broken replacements keep the previous generation serving and are
//! named with their stage; a good replacement is promoted while a probe in flight
//! finishes on the generation it started with; a replacement that traps is rolled
//! back after its probation; a removed file retires its plugin. Each change is told to
//! the runtime's subscribers (what `vigil serve` records in the history).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::broadcast::Receiver;
use vigil_decision::ProbedBy;
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Probed, Prober};
use vigil_domain::reference::{self, Reference, Resolution};
use vigil_fake_kube::{AddressPlan, ClusterHandle, Fleet, KubeconfigOptions, WrittenKubeconfig};
use vigil_plugin_host::{
    CacheStatus, FailureStage, PluginEvent, PluginRuntime, PluginSource, PluginState, PluginStatus,
    ProbationPolicy, Refusal, RuntimeSettings,
};

use vigil_test_support as plugins;

use plugins::wait::until_async_true;
use plugins::{install, plugin_file, plugin_variant};

const GRANTS: &str = "log = true\ncredentials = true\nhttp = true\n";

/// A plugin directory with the first-party plugin installed as `kube`.
fn plugin_dir(temp: &Path) -> PathBuf {
    let dir = temp.join("plugins.d");
    std::fs::create_dir_all(&dir).expect("create the plugin dir");
    install(
        &dir.join("kube.wasm"),
        &std::fs::read(plugin_file("kubeconfig-file")).expect("read"),
    );
    std::fs::write(dir.join("kube.toml"), GRANTS).expect("write the manifest");
    dir
}

async fn load(dir: &Path) -> PluginRuntime {
    load_cached(dir, None).await
}

async fn load_cached(dir: &Path, cache_dir: Option<&Path>) -> PluginRuntime {
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: dir.to_path_buf(),
        cache_dir: cache_dir.map(Path::to_path_buf),
        concurrency: 4,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    assert_eq!(report.loaded[0].generation, 1);
    runtime
}

async fn fleet(temp: &Path) -> (Fleet, WrittenKubeconfig) {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let written = fleet
        .write_kubeconfigs(&temp.join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs")
        .remove(0);
    (fleet, written)
}

/// Waits until a probe's request reached `cluster` and is held there (logged on arrival,
/// not answered yet).
async fn until_held(cluster: &ClusterHandle) {
    until_async_true(
        "the probe's request is held by the cluster",
        Duration::from_secs(10),
        async || cluster.log().entries().iter().any(|e| e.status.is_none()),
    )
    .await;
}

fn target(written: &WrittenKubeconfig, endpoint: &str, plugin: Option<&str>) -> ProbeTarget {
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
        timeout: Duration::from_secs(30),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    }
}

fn by(generation: u64) -> Option<ProbedBy> {
    Some(ProbedBy {
        plugin: "kube".to_owned(),
        generation,
    })
}

fn status(runtime: &PluginRuntime) -> PluginStatus {
    runtime
        .catalog_status()
        .into_iter()
        .find(|s| s.name == "kube")
        .expect("kube is in the catalog")
}

fn healthy(generation: u64) -> Probed {
    Probed {
        outcome: ProbeOutcome::Healthy,
        by: by(generation),
    }
}

/// The events the runtime has sent since `events` subscribed, as (kind, detail).
fn drain(events: &mut Receiver<PluginEvent>) -> Vec<(&'static str, serde_json::Value)> {
    std::iter::from_fn(|| events.try_recv().ok())
        .map(|event| (event.kind(), event.detail()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_replacements_are_refused_with_their_stage_and_the_previous_generation_serves() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (fleet, written) = fleet(temp.path()).await;
    let endpoint = fleet.clusters()[0].server_url();
    let dir = plugin_dir(temp.path());
    let runtime = load(&dir).await;
    let explicit = target(&written, &endpoint, Some("kube"));
    let routed = target(&written, &endpoint, None);
    assert_eq!(runtime.probe_attributed(&explicit).await, healthy(1));
    let mut events = runtime.subscribe();

    let file = dir.join("kube.wasm");
    let broken: [(&str, Vec<u8>, FailureStage); 3] = [
        (
            "not a component",
            b"this is text, not wasm".to_vec(),
            FailureStage::Compile,
        ),
        (
            "a trap in info()",
            std::fs::read(plugin_file("trap-info")).expect("read"),
            FailureStage::Info,
        ),
        (
            "another world",
            std::fs::read(plugin_file("wrong-world")).expect("read"),
            FailureStage::World,
        ),
    ];
    for (index, (what, bytes, stage)) in broken.into_iter().enumerate() {
        install(&file, &bytes);
        let report = runtime.reload().await.expect("reload");
        assert!(report.promoted.is_empty(), "{what}: {report:#?}");
        assert_eq!(report.refused.len(), 1, "{what}: {report:#?}");
        assert_eq!(
            report.refused[0].origin,
            PluginSource::File(file.clone()),
            "{what}"
        );
        assert_eq!(report.refused[0].reason.stage(), stage, "{what}");

        let kube = status(&runtime);
        assert_eq!(kube.state, PluginState::Active, "{what}");
        assert_eq!(
            kube.current.as_ref().map(|p| p.generation),
            Some(1),
            "{what}"
        );
        let failure = kube.last_failure.expect("the failure is kept");
        assert_eq!(failure.source, PluginSource::File(file.clone()), "{what}");
        assert_eq!(failure.stage, stage, "{what}");
        assert_eq!(failure.generation, 2 + index as u64, "{what}");
        assert_eq!(failure.message, report.refused[0].reason.to_string());
        assert_eq!(
            drain(&mut events),
            [(
                "plugin-refused",
                serde_json::json!({
                    "plugin": "kube",
                    "generation": 2 + index as u64,
                    "stage": stage.as_str(),
                    "message": failure.message,
                })
            )],
            "{what}: the history is told"
        );

        // Generation 1 still probes, explicitly and by routing.
        assert_eq!(
            runtime.probe_attributed(&explicit).await,
            healthy(1),
            "{what}"
        );
        assert_eq!(
            runtime.probe_attributed(&routed).await,
            healthy(1),
            "{what}"
        );
    }
    assert!(
        matches!(
            runtime.reload().await.expect("reload").unchanged.as_slice(),
            [name] if name == "kube"
        ),
        "an unchanged broken file is not tried again"
    );
    assert_eq!(
        status(&runtime).last_failure.map(|f| f.generation),
        Some(4),
        "no new candidate for an unchanged file"
    );
    assert_eq!(drain(&mut events), [], "nothing changed, nothing told");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_replacement_is_promoted_while_a_probe_in_flight_finishes_on_its_generation() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (fleet, written) = fleet(temp.path()).await;
    let cluster = &fleet.clusters()[0];
    let endpoint = cluster.server_url();
    let dir = plugin_dir(temp.path());
    let cache = temp.path().join("cache");
    let variant = plugin_variant("kubeconfig-file", "v2");
    {
        // Compiled once beforehand, so that the swap below takes milliseconds, not the
        // seconds a debug build spends compiling.
        let warm = temp.path().join("warm");
        std::fs::create_dir_all(&warm).expect("mkdir");
        install(&warm.join("kube.wasm"), &variant);
        std::fs::write(warm.join("kube.toml"), GRANTS).expect("write");
        load_cached(&warm, Some(&cache)).await;
    }
    let runtime = load_cached(&dir, Some(&cache)).await;
    let explicit = target(&written, &endpoint, Some("kube"));

    // A probe held by the server while the plugin is swapped (compiling the new
    // generation takes seconds in a debug build).
    cluster.delay(Duration::from_secs(3)).await.expect("delay");
    let held = {
        let runtime = runtime.clone();
        let target = explicit.clone();
        tokio::spawn(async move { runtime.probe_attributed(&target).await })
    };
    until_held(cluster).await;
    install(&dir.join("kube.wasm"), &variant);
    let report = runtime.reload().await.expect("reload");
    assert!(report.refused.is_empty(), "{report:#?}");
    assert_eq!(report.promoted.len(), 1, "{report:#?}");
    assert_eq!(report.promoted[0].generation, 2);
    assert_eq!(report.promoted[0].cache, CacheStatus::Hit);
    let kube = status(&runtime);
    assert_eq!(kube.state, PluginState::Probation);
    assert_eq!(kube.previous_generation, Some(1));
    assert!(
        !held.is_finished(),
        "the held probe was still running at the swap"
    );

    assert_eq!(held.await.expect("join"), healthy(1));
    cluster.set_fault(Default::default()).await.expect("clear");
    assert_eq!(runtime.probe_attributed(&explicit).await, healthy(2));
    let routed = target(&written, &endpoint, None);
    assert_eq!(runtime.probe_attributed(&routed).await, healthy(2));
    assert_eq!(status(&runtime).probation, Some((2, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_that_traps_is_rolled_back_after_its_probation_and_marked_failed() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (fleet, written) = fleet(temp.path()).await;
    let endpoint = fleet.clusters()[0].server_url();
    let dir = plugin_dir(temp.path());
    let runtime = load(&dir).await;
    // Judged on 3 probes; a third of them inconclusive at most: the second fails it.
    runtime.set_probation(ProbationPolicy {
        probes: 3,
        max_inconclusive_ratio: 0.34,
    });
    let explicit = target(&written, &endpoint, Some("kube"));
    let mut events = runtime.subscribe();

    install(
        &dir.join("kube.wasm"),
        &std::fs::read(plugin_file("panic")).expect("read"),
    );
    let report = runtime.reload().await.expect("reload");
    assert_eq!(report.promoted.len(), 1, "{report:#?}");
    assert_eq!(status(&runtime).state, PluginState::Probation);

    for _ in 0..2 {
        let probed = runtime.probe_attributed(&explicit).await;
        assert_eq!(probed.by, by(2));
        assert!(
            matches!(
                probed.outcome,
                ProbeOutcome::Inconclusive {
                    class: ReasonClass::PluginFault,
                    ..
                }
            ),
            "{probed:?}"
        );
    }
    let kube = status(&runtime);
    assert_eq!(kube.state, PluginState::Active);
    assert_eq!(kube.current.as_ref().map(|p| p.generation), Some(1));
    let failure = kube
        .last_failure
        .expect("the failed generation is recorded");
    assert_eq!(failure.stage, FailureStage::Probation);
    assert_eq!(failure.generation, 2);
    assert!(
        failure
            .message
            .contains("2 of its first 2 probes were inconclusive"),
        "{}",
        failure.message
    );

    let told = drain(&mut events);
    assert_eq!(
        told.iter().map(|(kind, _)| *kind).collect::<Vec<_>>(),
        ["plugin-promoted", "plugin-rolled-back"],
        "{told:?}"
    );
    assert_eq!(told[0].1["generation"], 2);
    assert_eq!(told[0].1["sha256"], report.promoted[0].hash.as_str());
    assert_eq!(
        (&told[1].1["generation"], &told[1].1["restored"]),
        (&serde_json::json!(2), &serde_json::json!(1))
    );
    assert_eq!(told[1].1["message"], failure.message.as_str());

    assert_eq!(runtime.probe_attributed(&explicit).await, healthy(1));
    let again = runtime.reload().await.expect("reload");
    assert!(
        again.promoted.is_empty(),
        "the failed file is not promoted again: {again:#?}"
    );
    assert_eq!(status(&runtime).current.map(|p| p.generation), Some(1));
}

/// A replacement whose `accepts` always fails probes nothing, so it is judged on those
/// failures: it is rolled back like one whose probes fail, and the previous generation
/// takes the cluster again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_whose_accepts_always_fails_is_rolled_back_by_its_probation() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (fleet, written) = fleet(temp.path()).await;
    let endpoint = fleet.clusters()[0].server_url();
    let dir = plugin_dir(temp.path());
    // The `picky` test plugin's `accepts` does what this file says: trap.
    let credentials = temp.path().join("credentials");
    std::fs::create_dir_all(&credentials).expect("credentials dir");
    let answer = credentials.join("accepts");
    std::fs::write(&answer, "trap").expect("write the answer");
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: dir.clone(),
        cache_dir: None,
        concurrency: 4,
        credential_dirs: vec![credentials],
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    runtime.set_probation(ProbationPolicy {
        probes: 3,
        max_inconclusive_ratio: 0.34,
    });
    let mut routed = target(&written, &endpoint, None);
    routed.parameters = BTreeMap::from([(
        "accepts-from".to_owned(),
        format!("file://{}", answer.display()),
    )]);
    assert_eq!(runtime.probe_attributed(&routed).await, healthy(1));

    install(
        &dir.join("kube.wasm"),
        &std::fs::read(plugin_file("picky")).expect("read"),
    );
    let report = runtime.reload().await.expect("reload");
    assert_eq!(report.promoted.len(), 1, "{report:#?}");
    assert_eq!(status(&runtime).state, PluginState::Probation);
    for _ in 0..2 {
        let probed = runtime.probe_attributed(&routed).await;
        match &probed.outcome {
            ProbeOutcome::Inconclusive {
                class: ReasonClass::PluginFault,
                message,
            } => assert!(message.contains("accepts failed"), "{message}"),
            other => panic!("expected inconclusive(plugin-fault), got {other:?}"),
        }
    }
    let kube = status(&runtime);
    assert_eq!(kube.state, PluginState::Active, "{kube:#?}");
    assert_eq!(kube.current.as_ref().map(|p| p.generation), Some(1));
    let failure = kube
        .last_failure
        .expect("the failed generation is recorded");
    assert_eq!(
        (failure.stage, failure.generation),
        (FailureStage::Probation, 2)
    );
    assert_eq!(runtime.probe_attributed(&routed).await, healthy(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_file_retires_its_plugin_once_running_probes_finish() {
    let temp = tempfile::tempdir().expect("tempdir");
    let (fleet, written) = fleet(temp.path()).await;
    let cluster = &fleet.clusters()[0];
    let endpoint = cluster.server_url();
    let dir = plugin_dir(temp.path());
    let runtime = load(&dir).await;
    let explicit = target(&written, &endpoint, Some("kube"));
    let routed = target(&written, &endpoint, None);
    assert_eq!(runtime.probe_attributed(&routed).await, healthy(1));

    cluster.delay(Duration::from_secs(3)).await.expect("delay");
    let held = {
        let runtime = runtime.clone();
        let target = explicit.clone();
        tokio::spawn(async move { runtime.probe_attributed(&target).await })
    };
    until_held(cluster).await;
    let mut events = runtime.subscribe();
    std::fs::remove_file(dir.join("kube.wasm")).expect("remove");
    let report = runtime.reload().await.expect("reload");
    assert_eq!(report.retired, [("kube".to_owned(), 1)]);
    assert_eq!(
        drain(&mut events),
        [(
            "plugin-retired",
            serde_json::json!({ "plugin": "kube", "generation": 1 })
        )]
    );
    assert_eq!(status(&runtime).state, PluginState::Retired);
    assert!(runtime.plugins().is_empty());
    assert_eq!(
        held.await.expect("join"),
        healthy(1),
        "the running probe finished"
    );

    for target in [&explicit, &routed] {
        let probed = runtime.probe_attributed(target).await;
        assert_eq!(probed.by, None);
        assert!(
            matches!(
                probed.outcome,
                ProbeOutcome::NotProbeable {
                    class: ReasonClass::NoPlugin,
                    ..
                }
            ),
            "{probed:?}"
        );
    }

    // Back again: a new generation.
    install(
        &dir.join("kube.wasm"),
        &std::fs::read(plugin_file("kubeconfig-file")).expect("read"),
    );
    let report = runtime.reload().await.expect("reload");
    assert_eq!(report.promoted[0].generation, 2);
    cluster.set_fault(Default::default()).await.expect("clear");
    assert_eq!(runtime.probe_attributed(&routed).await, healthy(2));
}

#[test]
fn refusals_name_their_stage() {
    assert_eq!(Refusal::NotWasm.stage(), FailureStage::Compile);
    assert_eq!(Refusal::Info("trap".to_owned()).stage(), FailureStage::Info);
    assert_eq!(
        Refusal::Manifest("bad".to_owned()).stage(),
        FailureStage::Manifest
    );
}
