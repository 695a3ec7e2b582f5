//! The compiled-code cache seen through `PluginRuntime::load`: a first load compiles and
//! writes, a second one loads the artifact and the plugin still probes a fake cluster;
//! damaged, foreign or misplaced artifacts are never loaded but deleted and rewritten; a
//! changed plugin file gets a new key.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vigil_decision::{ClusterId, ProbeOutcome};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::{self, Reference, Resolution};
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions, WrittenKubeconfig};
use vigil_plugin_host::{CacheStatus, PluginRuntime, RuntimeSettings};

/// The workspace root.
use vigil_test_support::plugin_file;

const GRANTS: &str = "log = true\ncredentials = true\nhttp = true\n";

/// A plugin directory under `dir` holding the built `source` plugin as `kubeconfig-file`.
fn plugin_dir(dir: &Path, source: &str) -> PathBuf {
    named_plugin_dir(dir, "kubeconfig-file", source)
}

/// A plugin directory under `dir` holding the built `source` plugin as `name`.
fn named_plugin_dir(dir: &Path, name: &str, source: &str) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("create the plugin dir");
    std::fs::copy(plugin_file(source), plugins.join(format!("{name}.wasm"))).expect("copy");
    std::fs::write(plugins.join(format!("{name}.toml")), GRANTS).expect("write the manifest");
    plugins
}

/// Loads the plugin directory with `cache`, and returns the runtime and what the cache
/// did for the one plugin.
async fn load(plugins: &Path, cache: Option<&Path>) -> (PluginRuntime, CacheStatus) {
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugins.to_path_buf(),
        cache_dir: cache.map(Path::to_path_buf),
        concurrency: 2,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    assert_eq!(report.loaded.len(), 1, "{report:#?}");
    let status = report.loaded[0].cache;
    (runtime, status)
}

/// The artifact files of a cache directory.
fn artifacts(cache: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache.join("components-v1")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    files.sort();
    files
}

fn only_artifact(cache: &Path) -> PathBuf {
    let files = artifacts(cache);
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// One cluster of a fake fleet, and its kubeconfig.
struct Cluster {
    fleet: Fleet,
    kubeconfig: WrittenKubeconfig,
    _dir: tempfile::TempDir,
}

async fn cluster() -> Cluster {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = fleet
        .write_kubeconfigs(&dir.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs")
        .remove(0);
    Cluster {
        fleet,
        kubeconfig,
        _dir: dir,
    }
}

/// Probes the cluster with the loaded plugin; the server must have seen the request.
async fn assert_probes(runtime: &PluginRuntime, cluster: &Cluster) {
    let server = &cluster.fleet.clusters()[0];
    let before = server.log().entries_for("/api/v1/namespaces").len();
    let written = &cluster.kubeconfig;
    let reference = Reference::parse(&format!("{}#{}", written.path.display(), written.context))
        .expect("reference");
    let Resolution::Connection(material) = reference::resolve(&reference) else {
        panic!("the test kubeconfig does not resolve");
    };
    let target = ProbeTarget {
        cluster: ClusterId(1),
        name: written.cluster.clone(),
        endpoint: server.server_url(),
        reference,
        connection: Some(material),
        plugin: Some("kubeconfig-file".to_owned()),
        timeout: Duration::from_secs(2),
        labels: Default::default(),
        parameters: Default::default(),
    };
    assert_eq!(runtime.probe(&target).await, ProbeOutcome::Healthy);
    assert_eq!(
        server.log().entries_for("/api/v1/namespaces").len(),
        before + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_writes_the_artifact_and_the_next_one_loads_it() {
    let cluster = cluster().await;
    let temp = tempfile::tempdir().expect("tempdir");
    let plugins = plugin_dir(temp.path(), "kubeconfig-file");
    let cache = temp.path().join("cache");

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss);
    assert_probes(&runtime, &cluster).await;
    drop(runtime);

    // Written for this user only, nothing else beside it, nothing in the plugin dir.
    let artifact = only_artifact(&cache);
    let mode = |path: &Path| std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&cache.join("components-v1")), 0o700);
    assert_eq!(mode(&artifact), 0o600);
    // The cache's key (see the forging test) is its one other file, this user's only.
    assert_eq!(mode(&cache.join("components-v1/.key")), 0o600);
    assert_eq!(
        std::fs::read_dir(cache.join("components-v1"))
            .expect("list")
            .filter(|entry| entry.as_ref().expect("entry").file_name() != ".key")
            .count(),
        1,
        "a temporary file was left behind"
    );
    assert_eq!(std::fs::read_dir(&plugins).expect("list").count(), 2);
    let written = std::fs::read(&artifact).expect("read");

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Hit);
    assert_probes(&runtime, &cluster).await;
    assert_eq!(
        std::fs::read(&artifact).expect("read"),
        written,
        "a hit rewrote the artifact"
    );

    let (runtime, status) = load(&plugins, None).await;
    assert_eq!(status, CacheStatus::Disabled);
    assert_probes(&runtime, &cluster).await;
}

/// Damages the cache's one artifact with `damage` after a first load; the next load
/// must recompile (never load it), the plugin must answer, and the load after that must
/// be a hit on the rewritten artifact. The small `noop` plugin keeps the compiles short.
async fn check_damaged(case: &str, damage: impl FnOnce(&Path, &Path)) {
    let temp = tempfile::tempdir().expect("tempdir");
    let plugins = named_plugin_dir(temp.path(), "noop", "noop");
    let cache = temp.path().join("cache");
    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss, "{case}");
    drop(runtime);
    let artifact = only_artifact(&cache);
    damage(&artifact, temp.path());

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Recompiled, "{case}");
    assert_eq!(
        runtime.probe(&noop_target()).await,
        ProbeOutcome::Healthy,
        "{case}"
    );
    drop(runtime);
    assert_eq!(only_artifact(&cache), artifact, "{case}");
    assert!(
        std::fs::symlink_metadata(&artifact)
            .expect("stat")
            .file_type()
            .is_file(),
        "{case}: the artifact was not rewritten as a regular file"
    );

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Hit, "{case}: the rewritten artifact");
    assert_eq!(
        runtime.probe(&noop_target()).await,
        ProbeOutcome::Healthy,
        "{case}"
    );
}

/// A probe of the `noop` plugin, which answers without any request.
fn noop_target() -> ProbeTarget {
    ProbeTarget {
        cluster: ClusterId(1),
        name: "noop".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("/nonexistent/kubeconfig#noop").expect("reference"),
        connection: None,
        plugin: Some("noop".to_owned()),
        timeout: Duration::from_secs(2),
        labels: Default::default(),
        parameters: Default::default(),
    }
}

fn rewrite(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).expect("read");
    change(&mut bytes);
    std::fs::write(path, bytes).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_foreign_artifact_is_recompiled_never_loaded() {
    check_damaged("truncated to half", |a, _| {
        rewrite(a, |b| b.truncate(b.len() / 2));
    })
    .await;
    check_damaged("last byte dropped", |a, _| {
        rewrite(a, |b| {
            b.pop();
        });
    })
    .await;
    check_damaged("empty", |a, _| rewrite(a, Vec::clear)).await;
    check_damaged("one code byte flipped", |a, _| {
        rewrite(a, |b| {
            let middle = b.len() / 2;
            b[middle] ^= 0x01;
        });
    })
    .await;
    check_damaged("digest flipped", |a, _| {
        rewrite(a, |b| b[20] ^= 0x80);
    })
    .await;
    check_damaged("a bare wasmtime artifact", |a, _| {
        // What `Component::serialize` writes, without the host's header and digest.
        rewrite(a, |b| {
            b.drain(..48);
        });
    })
    .await;
    check_damaged("a dangling symlink", |a, _| {
        std::fs::remove_file(a).expect("remove");
        std::os::unix::fs::symlink("/nonexistent/artifact.cwasm", a).expect("symlink");
    })
    .await;
    check_damaged("a symlink to an intact copy", |a, temp| {
        // The content verifies, but the host did not write this file: a link to a file
        // elsewhere is never followed. The target is left alone.
        let elsewhere = temp.join("copy.cwasm");
        std::fs::rename(a, &elsewhere).expect("move");
        std::os::unix::fs::symlink(&elsewhere, a).expect("symlink");
    })
    .await;
    check_damaged("writable by others", |a, _| {
        std::fs::set_permissions(a, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    })
    .await;
    // A file owned by someone else can only be made by root.
    if running_as_root() {
        check_damaged("owned by another user", |a, _| {
            std::os::unix::fs::chown(a, Some(4242), None).expect("chown");
        })
        .await;
    }
}

/// Whether the tests run as root (then they can make files owned by another user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let probe = tempfile::NamedTempFile::new().expect("tempfile");
    probe.as_file().metadata().expect("stat").uid() == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_copied_under_another_key_is_not_loaded() {
    let cluster = cluster().await;
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");
    // The noop plugin's artifact, intact, put under the kubeconfig-file plugin's key: it
    // verifies as a file, but not for that key.
    let noop = plugin_dir(&temp.path().join("noop"), "noop");
    let (runtime, status) = load(&noop, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss);
    drop(runtime);
    let noop_artifact = only_artifact(&cache);
    let plugins = plugin_dir(temp.path(), "kubeconfig-file");
    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss);
    drop(runtime);
    let files = artifacts(&cache);
    assert_eq!(files.len(), 2);
    let own = files
        .iter()
        .find(|f| **f != noop_artifact)
        .expect("the plugin's artifact");
    std::fs::copy(&noop_artifact, own).expect("copy");

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Recompiled);
    // It is the real kubeconfig-file plugin that runs, not the noop one.
    assert_eq!(runtime.plugins()[0].self_name, "kubeconfig-file");
    assert_probes(&runtime, &cluster).await;
}

/// A forged artifact: another plugin's artifact, intact, put under the kubeconfig-file
/// plugin's name with its digest recomputed as a process without the cache's key would
/// (sha256 over the header, the key and the artifact, as artifacts were once signed). It
/// does not verify: the real plugin is compiled again and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_forged_without_the_caches_key_is_recompiled_never_loaded() {
    use sha2::{Digest, Sha256};
    let cluster = cluster().await;
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");
    let noop = plugin_dir(&temp.path().join("noop"), "noop");
    let (runtime, _) = load(&noop, Some(&cache)).await;
    drop(runtime);
    let noop_artifact = only_artifact(&cache);
    let plugins = plugin_dir(temp.path(), "kubeconfig-file");
    let (runtime, _) = load(&plugins, Some(&cache)).await;
    drop(runtime);
    let own = artifacts(&cache)
        .into_iter()
        .find(|f| *f != noop_artifact)
        .expect("the plugin's artifact");
    let key = own.file_stem().unwrap().to_str().unwrap().to_owned();
    let mut forged = std::fs::read(&noop_artifact).expect("read");
    let digest = {
        let mut digest = Sha256::new();
        digest.update(b"vigil-cwasm-v1\0");
        digest.update(key.as_bytes());
        digest.update(b"\0");
        digest.update(&forged[48..]);
        digest.finalize()
    };
    forged[16..48].copy_from_slice(&digest);
    std::fs::write(&own, &forged).expect("write");
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    // The secret is the cache's own, readable by its user only.
    let secret = cache.join("components-v1/.key");
    let mode = std::fs::metadata(&secret)
        .expect("the cache's key")
        .permissions();
    assert_eq!(
        PermissionsExt::mode(&mode) & 0o077,
        0,
        "the cache's key is for vigil's user only"
    );

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Recompiled);
    assert_eq!(runtime.plugins()[0].self_name, "kubeconfig-file");
    assert_probes(&runtime, &cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_plugin_file_gets_a_new_key() {
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");
    let plugins = named_plugin_dir(temp.path(), "plugin", "noop");
    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss);
    assert_eq!(runtime.plugins()[0].self_name, "noop");
    drop(runtime);
    let first = only_artifact(&cache);

    // Other content under the same name.
    std::fs::copy(plugin_file("liar"), plugins.join("plugin.wasm")).expect("copy");
    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss);
    assert_eq!(runtime.plugins()[0].self_name, "liar");
    drop(runtime);
    let files = artifacts(&cache);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.contains(&first));

    // And back: the first artifact is still valid.
    std::fs::copy(plugin_file("noop"), plugins.join("plugin.wasm")).expect("copy");
    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Hit);
    assert_eq!(runtime.plugins()[0].self_name, "noop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_directory_others_can_write_is_not_used() {
    let temp = tempfile::tempdir().expect("tempdir");
    let plugins = named_plugin_dir(temp.path(), "noop", "noop");
    let cache = temp.path().join("cache");
    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Miss);
    drop(runtime);
    let artifact = only_artifact(&cache);
    let components = cache.join("components-v1");
    std::fs::set_permissions(&components, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    let (runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Disabled);
    assert_eq!(runtime.probe(&noop_target()).await, ProbeOutcome::Healthy);
    drop(runtime);
    // Nothing was read, deleted or written there.
    assert_eq!(artifacts(&cache), [artifact]);

    std::fs::set_permissions(&components, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let (_runtime, status) = load(&plugins, Some(&cache)).await;
    assert_eq!(status, CacheStatus::Hit);
}
