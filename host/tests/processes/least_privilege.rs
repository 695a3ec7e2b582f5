//! Least privilege kept: a kubeconfig file reference is read only where its file really
//! lies (a link cannot lead out of the allowed directories, a Secret volume's `..data`
//! rotation keeps working), a special file never blocks a read, the resolution of a
//! reference ends within the probe's deadline, plugins are loaded only from a directory
//! that no other user can change, and a plugin's output cannot forge lines of the log.
//!
//! The plugin tests load the plugins cargo built for the tests. Those that change a file's
//! owner or mount a file system need root: they are system tests.

use vigil_test_support::engine as support;

use vigil_test_support as plugins;

use std::collections::BTreeMap;
#[cfg(feature = "system-tests")]
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use support::{Sandbox, settings};
use vigil_decision::{ClusterId, PolicyOverrides, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{NoPlugins, ProbeTarget, Prober, wall_clock};
use vigil_domain::reference::{self, PathRefused, Reference, Resolution};
use vigil_engine::worker::probe_once;
#[cfg(feature = "system-tests")]
use vigil_plugin_host::{FailureStage, Refusal};
use vigil_plugin_host::{PluginRuntime, RuntimeSettings};

/// A kubeconfig whose only context `c` talks to `server` with the token in the file
/// `token` beside it.
fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
current-context: c
clusters:
- name: c
  cluster:
    server: {server}
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    tokenFile: token
contexts:
- name: c
  context:
    cluster: c
    user: u
"
    )
}

fn file_reference(path: &Path) -> Reference {
    Reference::parse(&format!("{}#c", path.display())).expect("a file reference")
}

/// The server a resolution found, or what it said instead.
fn server_of(resolution: Resolution) -> Result<String, String> {
    match resolution {
        Resolution::Connection(material) => Ok(material.server),
        other => Err(other.describe()),
    }
}

/// Writes a directory `..STAMP` of a Secret volume at `volume` with `config` and `token`,
/// and points `..data` at it by renaming a fresh link over the old one, as the kubelet
/// does: a reader sees the old files or the new ones, never a mix.
fn secret_volume_generation(volume: &Path, stamp: &str, server: &str, token: &str) {
    let generation = volume.join(format!("..{stamp}"));
    std::fs::create_dir(&generation).expect("a generation directory");
    std::fs::write(generation.join("config"), kubeconfig(server)).expect("config");
    std::fs::write(generation.join("token"), token).expect("token");
    let fresh = volume.join("..data_tmp");
    symlink(format!("..{stamp}"), &fresh).expect("a fresh ..data link");
    std::fs::rename(&fresh, volume.join("..data")).expect("..data swapped");
    for key in ["config", "token"] {
        let visible = volume.join(key);
        if std::fs::symlink_metadata(&visible).is_err() {
            symlink(format!("..data/{key}"), &visible).expect("a key's link");
        }
    }
}

#[test]
fn a_kubeconfig_is_read_only_where_it_really_lies() {
    let temp = tempfile::tempdir().expect("tempdir");
    let root = temp.path().join("kubeconfigs");
    let outside = temp.path().join("outside");
    std::fs::create_dir_all(outside.join("sub")).expect("dirs");
    std::fs::create_dir_all(&root).expect("dirs");
    std::fs::write(root.join("inside"), kubeconfig("https://127.0.0.1:1")).expect("write");
    std::fs::write(root.join("token"), "t").expect("write");
    std::fs::write(outside.join("x"), kubeconfig("https://127.0.0.1:2")).expect("write");
    std::fs::write(outside.join("sub/x"), kubeconfig("https://127.0.0.1:3")).expect("write");
    std::fs::write(outside.join("token"), "t").expect("write");
    std::fs::write(outside.join("sub/token"), "t").expect("write");
    // A link inside the allowed directory, to a directory outside it.
    symlink(outside.join("sub"), root.join("link")).expect("symlink");
    let roots = [root.clone()];

    assert_eq!(
        server_of(reference::resolve_under(
            &file_reference(&root.join("inside")),
            &roots
        )),
        Ok("https://127.0.0.1:1".to_owned())
    );
    // By name both lie inside; the kernel takes the first through the link to
    // `outside/sub/x`, the second to `outside/x`.
    for escaping in [root.join("link/x"), root.join("link/../x")] {
        let reference = file_reference(&escaping);
        assert!(
            matches!(reference::resolve(&reference), Resolution::Connection(_)),
            "without the bound the file is read: the bound does the work"
        );
        match reference::resolve_under(&reference, &roots) {
            Resolution::NotProbeable {
                class: ReasonClass::ReferenceBroken,
                message,
            } => assert!(
                message.contains("real path") && message.contains("lies outside"),
                "{message}"
            ),
            other => panic!("{}: {other}", escaping.display()),
        }
    }
    // What the API stores: `..` is refused by name, `.` and `//` are dropped.
    assert_eq!(
        reference::normalised_path(&format!("{}/link/../x", root.display())),
        Err(PathRefused::ParentComponent)
    );
    assert_eq!(
        reference::normalised_path(&format!("{}/.//inside", root.display())),
        Ok(format!("{}/inside", root.display()))
    );
    // A root that is itself a link is compared by where it leads.
    let linked_root = temp.path().join("linked-root");
    symlink(&root, &linked_root).expect("symlink");
    assert!(
        server_of(reference::resolve_under(
            &file_reference(&linked_root.join("inside")),
            std::slice::from_ref(&linked_root)
        ))
        .is_ok()
    );
}

#[test]
fn a_secret_volume_rotation_keeps_resolving() {
    let temp = tempfile::tempdir().expect("tempdir");
    let volume = temp.path().join("volume");
    std::fs::create_dir(&volume).expect("volume");
    secret_volume_generation(&volume, "2026_01_01_a", "https://127.0.0.1:1", "first");
    let reference = file_reference(&volume.join("config"));
    let roots = [volume.clone()];

    let resolved = reference::resolve_under(&reference, &roots);
    let Resolution::Connection(material) = &resolved else {
        panic!("{resolved}");
    };
    assert_eq!(material.server, "https://127.0.0.1:1");
    // The token file is named as the kubeconfig's context names it, through `..data`.
    assert_eq!(
        material.token.as_ref().and_then(|t| t.file()),
        Some(volume.join("token").as_path())
    );

    secret_volume_generation(&volume, "2026_01_02_b", "https://127.0.0.1:2", "second");
    std::fs::remove_dir_all(volume.join("..2026_01_01_a")).expect("old generation gone");
    assert_eq!(
        server_of(reference::resolve_under(&reference, &roots)),
        Ok("https://127.0.0.1:2".to_owned())
    );
}

#[test]
fn a_kubeconfig_that_is_a_fifo_is_refused_without_blocking() {
    let temp = tempfile::tempdir().expect("tempdir");
    let fifo = temp.path().join("config");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let reference = file_reference(&fifo);
    let roots = vec![temp.path().to_path_buf()];
    // In a thread of its own, so that a resolution that blocked fails the test instead
    // of hanging it.
    let (done, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(reference::resolve_under(&reference, &roots));
    });
    match answer
        .recv_timeout(Duration::from_secs(30))
        .expect("the resolution returned")
    {
        Resolution::NotProbeable {
            class: ReasonClass::ReferenceBroken,
            message,
        } => assert!(message.contains("FIFO"), "{message}"),
        other => panic!("{other}"),
    }
}

/// A resolution that cannot run (the blocking threads are all taken, as by reads stuck
/// on a hung file system) ends at the probe's deadline as vigil's own fault, and the
/// probe's slot is free again.
#[test]
fn a_resolution_that_does_not_finish_ends_at_the_probe_deadline() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let sandbox = Sandbox::new();
        let store = sandbox.store().await;
        let reference = sandbox.kubeconfig("c", 9);
        let policy = PolicyOverrides {
            timeout_seconds: Some(1),
            ..PolicyOverrides::default()
        };
        store
            .register_cluster(
                "c",
                "https://127.0.0.1:9",
                &reference,
                &policy,
                wall_clock(),
            )
            .await
            .expect("registered");
        let record = store.cluster("c").await.expect("the cluster");

        let (release, held) = std::sync::mpsc::channel::<()>();
        let stuck = tokio::task::spawn_blocking(move || {
            let _ = held.recv();
        });
        let probed = tokio::time::timeout(
            Duration::from_secs(30),
            probe_once(&NoPlugins, &record, &settings(60, 2)),
        )
        .await
        .expect("the probe ended");
        match probed.outcome {
            ProbeOutcome::Inconclusive {
                class: ReasonClass::HostFault,
                message,
            } => assert!(message.contains("did not finish"), "{message}"),
            other => panic!("{other:?}"),
        }
        release.send(()).expect("release");
        stuck.await.expect("the blocking task ends");
    });
}

#[cfg(feature = "system-tests")]
fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[cfg(feature = "system-tests")]
fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), None).expect("chown (the tests run as root)");
}

fn plugin_settings(plugin_dir: &Path) -> RuntimeSettings {
    RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugin_dir.to_path_buf(),
        cache_dir: None,
        concurrency: 2,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    }
}

/// The reason a file of the plugin directory was refused, as the load reported it and as
/// the plugin API shows it.
#[cfg(feature = "system-tests")]
fn untrusted_reason(
    runtime: &PluginRuntime,
    refused: &[vigil_plugin_host::RefusedPlugin],
    name: &str,
) -> String {
    let refusal = refused
        .iter()
        .find(|r| {
            matches!(&r.origin, vigil_plugin_host::PluginSource::File(file)
                if file.file_stem().is_some_and(|s| s == name))
        })
        .unwrap_or_else(|| panic!("{name} was not refused: {refused:?}"));
    let Refusal::Untrusted(reason) = &refusal.reason else {
        panic!("{name}: {:?}", refusal.reason);
    };
    let status = runtime
        .catalog_status()
        .into_iter()
        .find(|status| status.name == name)
        .expect("the plugin API lists it");
    let failure = status.last_failure.expect("its failure is shown");
    assert_eq!(failure.stage, FailureStage::Read);
    assert!(failure.message.contains(reason.as_str()), "{failure:?}");
    reason.clone()
}

/// A system test: giving a file to another user needs root.
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_directory_others_can_write_is_refused_with_the_reason() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path().join("plugins.d");
    std::fs::create_dir(&dir).expect("plugin dir");
    chmod(&dir, 0o755);
    for name in ["writable", "foreign", "fine"] {
        let file = dir.join(format!("{name}.wasm"));
        std::fs::copy(plugins::plugin_file("noop"), &file).expect("copy");
        chmod(&file, 0o644);
    }
    chmod(&dir.join("writable.wasm"), 0o646);
    chown(&dir.join("foreign.wasm"), 65_534);
    // A manifest grants as much as the code: it is checked too.
    std::fs::write(dir.join("fine.toml"), "log = true\n").expect("manifest");
    chmod(&dir.join("fine.toml"), 0o666);

    let (runtime, report) = PluginRuntime::load(&plugin_settings(&dir))
        .await
        .expect("the runtime starts");
    assert!(report.loaded.is_empty(), "{:?}", report.loaded);
    let reason = untrusted_reason(&runtime, &report.refused, "writable");
    assert!(
        reason.contains("writable.wasm") && reason.contains("other users (mode 646)"),
        "{reason}"
    );
    let reason = untrusted_reason(&runtime, &report.refused, "foreign");
    assert!(
        reason.contains("foreign.wasm") && reason.contains("owned by user 65534"),
        "{reason}"
    );
    let reason = untrusted_reason(&runtime, &report.refused, "fine");
    assert!(
        reason.contains("fine.toml") && reason.contains("mode 666"),
        "{reason}"
    );

    // Fixed, the same files load at the next reload.
    chmod(&dir.join("writable.wasm"), 0o644);
    chown(&dir.join("foreign.wasm"), 0);
    chmod(&dir.join("fine.toml"), 0o644);
    let reload = runtime.reload().await.expect("reload");
    assert!(reload.refused.is_empty(), "{:?}", reload.refused);
    assert_eq!(runtime.plugins().len(), 3);

    // A directory others can write to: nothing new is loaded from it, and what serves
    // (loaded while it was trusted) keeps serving.
    chmod(&dir, 0o777);
    std::fs::copy(plugins::plugin_file("noop"), dir.join("late.wasm")).expect("copy");
    chmod(&dir.join("late.wasm"), 0o644);
    let reload = runtime.reload().await.expect("reload");
    let reason = untrusted_reason(&runtime, &reload.refused, "late");
    assert!(
        reason.contains(&format!("{} is writable by", dir.display()))
            && reason.contains("mode 777"),
        "{reason}"
    );
    assert_eq!(runtime.plugins().len(), 3);
}

/// A read-only mount (a Kubernetes ConfigMap volume) is trusted whatever its modes; the
/// same files on a writable mount are not. Run with the binary in a private mount
/// namespace (`unshare -m`: root ignores file modes, and mounting needs a namespace of
/// its own), on a tmpfs remounted read-only. A system test: root and a mount namespace.
#[cfg(feature = "system-tests")]
#[test]
fn a_read_only_mount_is_trusted_whatever_its_modes() {
    let temp = tempfile::tempdir().expect("tempdir");
    let plugins = temp.path().join("plugins");
    std::fs::create_dir(&plugins).expect("mount point");
    let kube = temp.path().join("config");
    std::fs::write(
        &kube,
        kubeconfig("https://127.0.0.1:9").replace("tokenFile: token", "token: t"),
    )
    .expect("kubeconfig");
    let script = r#"set -e
mount -t tmpfs tmpfs "$1"
cp "$2" "$1/noop.wasm"
chmod 777 "$1"
chmod 666 "$1/noop.wasm"
"$3" probe c || true
mount -o remount,ro "$1"
echo "--- read-only"
"$3" probe c || true
"#;
    let output = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&plugins)
        .arg(plugins::plugin_file("noop"))
        .arg(crate::process::binary())
        .env("KUBECONFIG_PATH", &kube)
        .env("VIGIL_PLUGIN_DIR", &plugins)
        .env("VIGIL_PLUGINS_EMBEDDED", "false")
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", temp.path().join("absent.db").display()),
        )
        .env("VIGIL_CACHE_DIR", temp.path().join("cache"))
        .env_remove("RUST_LOG")
        .output()
        .expect("unshare runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let (writable, read_only) = text.split_once("--- read-only").expect("both probes ran");
    assert!(
        writable.contains("no-plugin") && !writable.contains("healthy"),
        "{writable}"
    );
    assert!(read_only.contains("healthy"), "{read_only}");
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

/// The forged record's start, as the `chatty` plugin writes it after a newline.
const FORGED_START: &str = "2026-01-01T00:00:00.000000Z";

/// One thread: the subscriber set here is the one the host calls see.
#[tokio::test(flavor = "current_thread")]
async fn guest_output_reaches_the_log_only_with_the_grant_and_forges_no_line() {
    let temp = tempfile::tempdir().expect("tempdir");
    let mut runtimes = Vec::new();
    for (label, manifest) in [("granted", "log = true\n"), ("silent", "")] {
        let dir = temp.path().join(label);
        std::fs::create_dir(&dir).expect("plugin dir");
        std::fs::copy(plugins::plugin_file("chatty"), dir.join("chatty.wasm")).expect("copy");
        std::fs::write(dir.join("chatty.toml"), manifest).expect("manifest");
        let (runtime, report) = PluginRuntime::load(&plugin_settings(&dir))
            .await
            .expect("the runtime starts");
        assert!(report.refused.is_empty(), "{:?}", report.refused);
        runtimes.push(runtime);
    }
    let target = ProbeTarget {
        cluster: ClusterId(1),
        name: "c".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("/nonexistent/kubeconfig#c").expect("reference"),
        connection: None,
        plugin: Some("chatty".to_owned()),
        timeout: Duration::from_secs(5),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    };

    let mut logs = Vec::new();
    for runtime in &runtimes {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_ansi(false)
            .with_writer(captured.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        match runtime.probe(&target).await {
            ProbeOutcome::NotProbeable { message, .. } => {
                assert_eq!(message, "chatty has spoken");
            }
            other => panic!("{other:?}"),
        }
        logs.push(captured.text());
    }
    let (granted, silent) = (&logs[0], &logs[1]);

    for mark in ["stdout", "stderr", "log"] {
        assert!(
            granted
                .lines()
                .any(|line| line.contains(&format!("chatty-{mark}"))),
            "{mark} missing from the log:\n{granted}"
        );
        assert!(
            !silent.contains(&format!("chatty-{mark}")),
            "{mark} logged without the grant:\n{silent}"
        );
    }
    for line in granted.lines() {
        assert!(!line.starts_with(FORGED_START), "a forged line:\n{granted}");
        if line.contains("FORGED-") {
            assert!(line.contains("chatty"), "untagged: {line}");
        }
    }
    // `log.write`'s message is one record, its newline shown escaped.
    assert!(
        granted
            .lines()
            .any(|line| line.contains(&format!("chatty-log\\n{FORGED_START}"))),
        "{granted}"
    );
    assert!(
        !granted.contains('\r') && !granted.contains('\u{1b}'),
        "raw control characters reached the log:\n{granted:?}"
    );
}
