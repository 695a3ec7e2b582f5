//! Discovery over the kubeconfig corpus (`tests/corpus/kubeconfigs`) and over temporary
//! directories built for cases a repository cannot hold (FIFOs, symlinks, Secret volumes).
//!
//! Every test names its own sources; none reads the real `~/.kube` or `$KUBECONFIG`, and none
//! opens a network connection.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use tokio::sync::mpsc;
use vigil_domain::discovery::{
    DiscoveryReport, DiscoverySettings, SourceFile, SourceProblem, Sources, discover, watch,
};
use vigil_domain::reference::{Material, Reference, Resolution, resolve};

/// How long a test waits for something that should happen within milliseconds.
const DEADLINE: Duration = Duration::from_secs(10);

fn corpus() -> PathBuf {
    vigil_test_support::corpus::corpus()
}

/// The good corpus files, in the order the tests list them as `KUBECONFIG_PATH`.
const GOOD_FILES: [&str; 10] = [
    "kind/config",
    "k3s/k3s.yaml",
    "k3s-edge/k3s.yaml",
    "minikube/config",
    "eks/config",
    "gke/config",
    "static-token/config",
    "token-file/config",
    "insecure/config",
    "shared-cluster/config",
];

/// Discovers `sources` and compares the whole report with the expectation, paths given
/// relative to `root`: clusters as (name, endpoint, file), clashes as (context, kept file,
/// ignored file), errors as their full `Display` text with `root` written `<root>`.
fn check(
    root: &Path,
    sources: &Sources,
    clusters: &[(&str, &str, &str)],
    clashes: &[(&str, &str, &str)],
    errors: &[&str],
) -> DiscoveryReport {
    let report = discover(sources);
    let shown = |path: &Path| {
        path.strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    let actual_clusters: Vec<(String, String, String)> = report
        .clusters
        .iter()
        .map(|cluster| {
            // A reference is always the file as found plus the context, and parses back.
            assert_eq!(
                cluster.reference,
                format!("{}#{}", cluster.source_file.display(), cluster.name)
            );
            assert_eq!(
                Reference::parse(&cluster.reference),
                Ok(Reference::File {
                    path: cluster.source_file.display().to_string(),
                    context: Some(cluster.name.clone()),
                })
            );
            (
                cluster.name.clone(),
                cluster.endpoint.clone(),
                shown(&cluster.source_file),
            )
        })
        .collect();
    let expected_clusters: Vec<(String, String, String)> = clusters
        .iter()
        .map(|(name, endpoint, file)| (name.to_string(), endpoint.to_string(), file.to_string()))
        .collect();
    assert_eq!(
        actual_clusters, expected_clusters,
        "clusters of {sources:?}"
    );

    let actual_clashes: Vec<(String, String, String)> = report
        .clashes
        .iter()
        .map(|clash| {
            (
                clash.context.clone(),
                shown(&clash.kept_file),
                shown(&clash.ignored_file),
            )
        })
        .collect();
    let expected_clashes: Vec<(String, String, String)> = clashes
        .iter()
        .map(|(context, kept, ignored)| {
            (context.to_string(), kept.to_string(), ignored.to_string())
        })
        .collect();
    assert_eq!(actual_clashes, expected_clashes, "clashes of {sources:?}");

    let root_text = root.display().to_string();
    let actual_errors: Vec<String> = report
        .errors
        .iter()
        .map(|error| error.to_string().replace(&root_text, "<root>"))
        .collect();
    assert_eq!(actual_errors, errors, "errors of {sources:?}");
    report
}

fn corpus_sources(files: &[&str]) -> Sources {
    Sources::new(files.iter().map(|file| corpus().join(file)), None)
}

#[test]
fn good_corpus_gives_one_cluster_per_context_and_reports_the_k3s_clash() {
    let report = check(
        &corpus(),
        &corpus_sources(&GOOD_FILES),
        &[
            ("kind-kind", "https://127.0.0.1:41357", "kind/config"),
            ("default", "https://127.0.0.1:6443", "k3s/k3s.yaml"),
            ("minikube", "https://127.0.0.1:32771", "minikube/config"),
            (
                "arn:aws:eks:eu-west-1:111122223333:cluster/vigil-demo",
                "https://localhost:7443",
                "eks/config",
            ),
            (
                "gke_vigil-fake-project_europe-west1-b_demo",
                "https://127.0.0.5",
                "gke/config",
            ),
            ("static", "https://127.0.0.1:8443", "static-token/config"),
            ("projected", "https://127.0.0.1:10443", "token-file/config"),
            ("lab", "https://127.0.0.1:9443", "insecure/config"),
            (
                "prod-admin",
                "https://127.0.0.1:16443",
                "shared-cluster/config",
            ),
            (
                "prod-readonly",
                "https://127.0.0.1:16443",
                "shared-cluster/config",
            ),
            (
                "prod-monitoring",
                "https://127.0.0.1:16443",
                "shared-cluster/config",
            ),
        ],
        &[("default", "k3s/k3s.yaml", "k3s-edge/k3s.yaml")],
        &[],
    );
    // The clash reads well in a log and names both files.
    let clash = report.clashes[0].to_string();
    let root = corpus().display().to_string();
    assert_eq!(
        clash,
        format!(
            "context \"default\" is defined in {root}/k3s/k3s.yaml and again in {root}/k3s-edge/k3s.yaml; the first is used, the second ignored"
        )
    );
}

#[test]
fn the_first_source_wins_a_clash_whatever_the_order() {
    let check_order = |files: &[&str], endpoint: &str, kept: &str, ignored: &str| {
        check(
            &corpus(),
            &corpus_sources(files),
            &[("default", endpoint, kept)],
            &[("default", kept, ignored)],
            &[],
        );
    };
    check_order(
        &["k3s/k3s.yaml", "k3s-edge/k3s.yaml"],
        "https://127.0.0.1:6443",
        "k3s/k3s.yaml",
        "k3s-edge/k3s.yaml",
    );
    check_order(
        &["k3s-edge/k3s.yaml", "k3s/k3s.yaml"],
        "https://127.0.0.2:6443",
        "k3s-edge/k3s.yaml",
        "k3s/k3s.yaml",
    );
}

#[test]
fn kubeconfig_path_files_come_before_the_directory() {
    // The directory holds a copy of k3s-edge; the explicitly listed k3s file is read first.
    let dir = tempfile::tempdir().expect("temporary directory");
    fs::copy(
        corpus().join("k3s-edge/k3s.yaml"),
        dir.path().join("edge.yaml"),
    )
    .expect("copy");
    let sources = Sources::new(
        [corpus().join("k3s/k3s.yaml")],
        Some(dir.path().to_path_buf()),
    );
    let report = discover(&sources);
    assert_eq!(report.clusters.len(), 1);
    assert_eq!(report.clusters[0].endpoint, "https://127.0.0.1:6443");
    assert_eq!(report.clashes.len(), 1);
    assert_eq!(report.clashes[0].ignored_file, dir.path().join("edge.yaml"));
}

#[test]
fn sources_follow_kubectls_precedence() {
    let check_settings =
        |path: Option<&str>, env: Option<&str>, home: Option<&str>, expected: &[(&str, bool)]| {
            let settings = DiscoverySettings {
                kubeconfig_path: path.map(OsString::from),
                kubeconfig_env: env.map(OsString::from),
                home_dir: home.map(PathBuf::from),
                kubeconfig_dir: None,
                kubeconfig_credential_dirs: Vec::new(),
            };
            let expected: Vec<SourceFile> = expected
                .iter()
                .map(|(path, required)| SourceFile {
                    path: PathBuf::from(path),
                    required: *required,
                })
                .collect();
            assert_eq!(
                Sources::from_settings(&settings).files(),
                expected,
                "{settings:?}"
            );
        };
    check_settings(
        Some("/a:/b"),
        Some("/c"),
        Some("/home/u"),
        &[("/a", true), ("/b", true)],
    );
    check_settings(
        None,
        Some("/c::/d"),
        Some("/home/u"),
        &[("/c", true), ("/d", true)],
    );
    check_settings(Some(""), Some("/c"), Some("/home/u"), &[("/c", true)]);
    check_settings(
        Some(":"),
        None,
        Some("/home/u"),
        &[("/home/u/.kube/config", false)],
    );
    check_settings(
        None,
        Some(""),
        Some("/home/u"),
        &[("/home/u/.kube/config", false)],
    );
    check_settings(None, None, None, &[]);
    check_settings(Some("/a:/b:/a"), None, None, &[("/a", true), ("/b", true)]);

    // Relative entries become absolute (a reference must be), without resolving symlinks.
    let cwd = std::env::current_dir().expect("current directory");
    check_settings(
        Some("kube/config"),
        None,
        None,
        &[(cwd.join("kube/config").to_str().expect("UTF-8 cwd"), true)],
    );
    let with_dir = Sources::from_settings(&DiscoverySettings {
        kubeconfig_dir: Some(PathBuf::from("/run/secrets/kubeconfigs")),
        ..DiscoverySettings::default()
    });
    assert_eq!(with_dir.dir(), Some(Path::new("/run/secrets/kubeconfigs")));
    assert!(with_dir.files().is_empty());
}

#[test]
fn a_missing_default_file_is_no_error_but_a_named_one_is() {
    let home = tempfile::tempdir().expect("temporary directory");
    let default_only = Sources::from_settings(&DiscoverySettings {
        home_dir: Some(home.path().to_path_buf()),
        ..DiscoverySettings::default()
    });
    check(home.path(), &default_only, &[], &[], &[]);

    let named = Sources::new([home.path().join("missing.yaml")], None);
    check(
        home.path(),
        &named,
        &[],
        &[],
        &["<root>/missing.yaml: the file does not exist"],
    );

    // The default file is read like any other when it is there.
    fs::create_dir(home.path().join(".kube")).expect("mkdir");
    fs::copy(
        corpus().join("kind/config"),
        home.path().join(".kube/config"),
    )
    .expect("copy");
    check(
        home.path(),
        &default_only,
        &[("kind-kind", "https://127.0.0.1:41357", ".kube/config")],
        &[],
        &[],
    );
}

#[test]
fn bad_corpus_gives_one_error_per_broken_file_or_context_and_keeps_the_rest() {
    let dir = corpus().join("bad");
    check(
        &dir,
        &Sources::new([], Some(dir.clone())),
        &[
            ("works", "https://127.0.0.1:20443", "broken-contexts.yaml"),
            (
                "absent-files",
                "https://127.0.0.1:21443",
                "missing-files.yaml",
            ),
            // Discovered: the bad data breaks its resolution, not its discovery.
            ("unpadded", "https://127.0.0.1:22443", "unpadded-data.yaml"),
        ],
        &[],
        &[
            "<root>/broken-contexts.yaml: context \"no-such-cluster\" names cluster \"ghost\", which this file does not define",
            "<root>/broken-contexts.yaml: context \"no-such-user\" names user \"ghost\", which this file does not define",
            "<root>/broken-contexts.yaml: context \"no-server\": cluster \"serverless\" has no server",
            "<root>/context-without-cluster.yaml: invalid kubeconfig YAML at line 10, column 5: missing field `cluster` at `contexts[0].context`",
            "<root>/deployment.yaml: not a kubeconfig: its kind is not Config",
            "<root>/duplicate-key.yaml: invalid kubeconfig YAML at line 11, column 5: duplicate mapping key",
            "<root>/empty.yaml: the file is empty",
            "<root>/garbage.bin: not text (binary content, or not UTF-8/UTF-16)",
            "<root>/missing-sections.yaml: context \"orphan\" names cluster \"orphan\", which this file does not define",
            "<root>/notes.txt: invalid kubeconfig YAML at line 1, column 1: expected mapping start",
            "<root>/syntax-error.yaml: invalid kubeconfig YAML at line 6, column 6: while parsing a flow mapping, did not find expected ',' or '}'",
            "<root>/unclosed-quote.yaml: invalid kubeconfig YAML at line 10, column 12: unclosed quote",
        ],
    );
}

#[test]
fn odd_kubeconfig_texts_are_reported_clearly() {
    // One line of data per case: file content, expected error (None: it parses, no cluster).
    let cases: &[(&str, Option<&str>)] = &[
        ("   \n\n", Some("the file is empty")),
        ("# only a comment\n", Some("the file is empty")),
        ("apiVersion: v1\nkind: Config\n", None),
        (
            "just: a mapping\n",
            Some("not a kubeconfig: it has no kind, clusters, contexts or users"),
        ),
        (
            "- a\n- list\n",
            Some("invalid kubeconfig YAML at line 1, column 1: expected mapping start"),
        ),
        (
            "kind: Config\n---\nkind: Secret\n",
            Some("not a kubeconfig: its YAML documents disagree on kind or apiVersion"),
        ),
        (
            "clusters: vigil-fake-scalar-secret-11\n",
            Some(
                "invalid kubeconfig YAML at line 1, column 11: expected sequence start at `clusters`, found a string",
            ),
        ),
        (
            "clusters:\n- name: c\n  cluster:\n    insecure-skip-tls-verify: vigil-fake-bool-secret-22\n",
            Some(
                "invalid kubeconfig YAML at line 4, column 31: invalid boolean at `clusters[0].cluster.insecure-skip-tls-verify`, found a string",
            ),
        ),
        (
            "clusters:\n- name: c\n  cluster:\n    server: [vigil-fake-list-secret-44]\n",
            Some(
                "invalid kubeconfig YAML at line 4, column 13: expected string scalar at `clusters[0].cluster.server`, found a list",
            ),
        ),
        (
            "users:\n- name: u\n  user:\n    token: {vigil-fake-map-secret-55: x}\n",
            Some(
                "invalid kubeconfig YAML at line 4, column 12: expected string scalar at `users[0].user.token`, found a mapping",
            ),
        ),
        (
            "users:\n\t- name: vigil-fake-tab-secret-33\n",
            Some(
                "invalid kubeconfig YAML at line 2, column 2: tabs disallowed within this context (block indentation)",
            ),
        ),
    ];
    let dir = tempfile::tempdir().expect("temporary directory");
    for (index, (text, expected)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("case-{index}.yaml"));
        fs::write(&file, text).expect("write");
        let report = discover(&Sources::new([file.clone()], None));
        let errors: Vec<String> = report
            .errors
            .iter()
            .map(|error| error.reason.to_string())
            .collect();
        let expected: Vec<String> = expected.iter().map(|text| text.to_string()).collect();
        assert_eq!(errors, expected, "{text:?}");
        assert!(report.clusters.is_empty(), "{text:?}");
    }
}

#[test]
fn contexts_that_cannot_be_referenced_or_are_repeated_are_reported() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("config");
    fs::write(
        &file,
        "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: https://127.0.0.1:6443}
- name: nohttp
  cluster: {server: 127.0.0.1:6443}
- name: withcreds
  cluster: {server: 'https://admin:vigil-fake-url-password-44@127.0.0.1:6443'}
contexts:
- name: 'a#b'
  context: {cluster: c}
- name: ok
  context: {cluster: c}
- name: ok
  context: {cluster: nohttp}
- name: ''
  context: {cluster: c}
- name: bare
- name: nohttp
  context: {cluster: nohttp}
- name: withcreds
  context: {cluster: withcreds}
",
    )
    .expect("write");
    check(
        dir.path(),
        &Sources::new([file], None),
        &[("ok", "https://127.0.0.1:6443", "config")],
        &[],
        &[
            "<root>/config: context \"a#b\" cannot be referenced: its name contains '#' or a control character",
            "<root>/config: context \"ok\" is defined more than once in this file; the first definition is used",
            "<root>/config: a context has an empty name",
            "<root>/config: context \"bare\" has no `context` section",
            "<root>/config: context \"nohttp\": the server of cluster \"nohttp\" is not an http:// or https:// URL",
            "<root>/config: context \"withcreds\": the server of cluster \"withcreds\" embeds credentials (user@host), which vigil refuses",
        ],
    );
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Runs discovery on another thread so that a blocking open (a FIFO) fails the test at the
/// deadline instead of hanging it.
fn discover_within_deadline(sources: Sources) -> DiscoveryReport {
    let (done, result) = std_mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(discover(&sources));
    });
    result
        .recv_timeout(DEADLINE)
        .expect("discovery finished before the deadline (did it open a FIFO?)")
}

#[test]
fn special_entries_in_the_directory_are_reported_or_skipped_without_blocking() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path();
    fs::copy(corpus().join("kind/config"), root.join("good.yaml")).expect("copy");
    mkfifo(&root.join("x.yaml"));
    // A directory named like a file is skipped, and not descended into.
    fs::create_dir(root.join("dir.yaml")).expect("mkdir");
    fs::copy(
        corpus().join("static-token/config"),
        root.join("dir.yaml/config"),
    )
    .expect("copy");
    symlink(root.join("nowhere.yaml"), root.join("dangling.yaml")).expect("symlink");
    symlink(root.join("loop-b.yaml"), root.join("loop-a.yaml")).expect("symlink");
    symlink(root.join("loop-a.yaml"), root.join("loop-b.yaml")).expect("symlink");
    // Dot-entries are skipped, whatever they hold.
    fs::copy(corpus().join("insecure/config"), root.join(".hidden.yaml")).expect("copy");

    let report = discover_within_deadline(Sources::new([], Some(root.to_path_buf())));
    let names: Vec<&str> = report
        .clusters
        .iter()
        .map(|cluster| cluster.name.as_str())
        .collect();
    assert_eq!(names, ["kind-kind"]);
    assert!(report.clashes.is_empty());
    let errors: Vec<(String, &SourceProblem)> = report
        .errors
        .iter()
        .map(|error| {
            let name = error
                .file
                .strip_prefix(root)
                .expect("under root")
                .display()
                .to_string();
            (name, &error.reason)
        })
        .collect();
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert_eq!(
        errors[0],
        ("dangling.yaml".to_owned(), &SourceProblem::DanglingSymlink)
    );
    for (index, name) in [(1, "loop-a.yaml"), (2, "loop-b.yaml")] {
        assert_eq!(errors[index].0, name);
        assert!(
            matches!(errors[index].1, SourceProblem::Unreadable(why) if why.contains("symbolic links")),
            "{errors:?}"
        );
    }
    assert_eq!(
        errors[3],
        (
            "x.yaml".to_owned(),
            &SourceProblem::NotRegularFile("a FIFO (named pipe)")
        )
    );
    assert_eq!(
        report.errors[3].to_string(),
        format!(
            "{}/x.yaml: not a regular file but a FIFO (named pipe)",
            root.display()
        )
    );

    // Named explicitly, a FIFO or a directory is an error too, still without blocking.
    let report = discover_within_deadline(Sources::new(
        [root.join("x.yaml"), root.join("dir.yaml")],
        None,
    ));
    let reasons: Vec<&SourceProblem> = report.errors.iter().map(|error| &error.reason).collect();
    assert_eq!(
        reasons,
        [
            &SourceProblem::NotRegularFile("a FIFO (named pipe)"),
            &SourceProblem::NotRegularFile("a directory"),
        ]
    );
}

#[test]
fn an_unlistable_directory_is_one_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("absent");
    check(
        dir.path(),
        &Sources::new([], Some(missing)),
        &[],
        &[],
        &["<root>/absent: the file does not exist"],
    );
}

/// A Kubernetes Secret volume as the kubelet writes it:
/// `..TIMESTAMP/{config,ca.crt}`, `..data -> ..TIMESTAMP`, and `config -> ..data/config`,
/// `ca.crt -> ..data/ca.crt`.
struct SecretVolume {
    dir: tempfile::TempDir,
    current: Option<PathBuf>,
}

impl SecretVolume {
    fn new() -> Self {
        let volume = Self {
            dir: tempfile::tempdir().expect("temporary directory"),
            current: None,
        };
        for key in ["config", "ca.crt"] {
            symlink(Path::new("..data").join(key), volume.path().join(key)).expect("symlink");
        }
        volume
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Publishes a new version atomically, as the kubelet does: write a new timestamped
    /// directory, point `..data_tmp` at it, rename it over `..data`, remove the old one.
    fn publish(&mut self, stamp: &str, server: &str) {
        let version = self.path().join(format!("..{stamp}"));
        fs::create_dir(&version).expect("mkdir");
        fs::write(
            version.join("config"),
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: mounted
  cluster:
    server: {server}
    certificate-authority: ca.crt
contexts:
- name: mounted
  context: {{cluster: mounted}}
current-context: mounted
"
            ),
        )
        .expect("write config");
        fs::copy(corpus().join("token-file/ca.crt"), version.join("ca.crt")).expect("copy ca");
        let staged = self.path().join("..data_tmp");
        symlink(version.file_name().expect("name"), &staged).expect("symlink");
        fs::rename(&staged, self.path().join("..data")).expect("swap ..data");
        if let Some(old) = self.current.replace(version) {
            fs::remove_dir_all(old).expect("remove old version");
        }
    }
}

#[tokio::test]
async fn a_secret_volume_data_swap_is_seen_by_the_watcher_and_rediscovered_without_duplicates() {
    let mut volume = SecretVolume::new();
    volume.publish("2026_01_01_00_00_00.000000001", "https://127.0.0.1:6443");
    let sources = Sources::new([], Some(volume.path().to_path_buf()));
    let expected_reference = format!("{}/config#mounted", volume.path().display());

    // Every file in KUBECONFIG_DIR is read as a kubeconfig, so a CA key in the same
    // Secret is reported; it stays usable as a file that a kubeconfig names.
    let ca_error =
        "<root>/ca.crt: invalid kubeconfig YAML at line 1, column 1: expected mapping start";
    let before = check(
        volume.path(),
        &sources,
        &[("mounted", "https://127.0.0.1:6443", "config")],
        &[],
        &[ca_error],
    );
    assert_eq!(before.clusters[0].reference, expected_reference);

    let (tx, mut rx) = mpsc::channel(1);
    let watcher = watch(&sources, Duration::from_millis(50), tx).expect("watch");
    assert_eq!(watcher.watched(), [volume.path().to_path_buf()]);

    volume.publish("2026_01_02_00_00_00.000000002", "https://127.0.0.9:7443");
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("the watcher fired before the deadline")
        .expect("the watcher is still running");

    // The same reference (through `config`, not `..data`) now shows the new server.
    let after = check(
        volume.path(),
        &sources,
        &[("mounted", "https://127.0.0.9:7443", "config")],
        &[],
        &[ca_error],
    );
    assert_eq!(after.clusters[0].reference, expected_reference);

    // Resolution keeps the visible path too: the CA is `DIR/ca.crt`, never `..data/…`.
    let reference = Reference::parse(&expected_reference).expect("reference parses");
    match resolve(&reference) {
        Resolution::Connection(material) => {
            assert_eq!(material.server, "https://127.0.0.9:7443");
            assert_eq!(
                material.ca,
                Some(Material::File(volume.path().join("ca.crt")))
            );
        }
        other => panic!("expected a connection, got {other:?}"),
    }
    drop(watcher);
}

#[tokio::test]
async fn the_watcher_fires_when_a_listed_file_is_replaced_or_edited() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("config");
    fs::copy(corpus().join("kind/config"), &file).expect("copy");
    let sources = Sources::new([file.clone()], None);
    let (tx, mut rx) = mpsc::channel(1);
    let watcher = watch(&sources, Duration::from_millis(50), tx).expect("watch");
    assert_eq!(watcher.watched(), [dir.path().to_path_buf()]);

    // Reading the file (discovery does) must not count as a change.
    discover(&sources);

    // Atomic replacement, as editors and config tools do it: write beside, rename over.
    let staged = dir.path().join(".config.tmp");
    fs::copy(corpus().join("k3s/k3s.yaml"), &staged).expect("copy");
    fs::rename(&staged, &file).expect("rename");
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("the watcher fired after a rename before the deadline")
        .expect("the watcher is still running");
    assert_eq!(discover(&sources).clusters[0].name, "default");

    // In-place edit of the (new) file.
    fs::write(
        &file,
        fs::read(corpus().join("static-token/config")).expect("read"),
    )
    .expect("write");
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("the watcher fired after an edit before the deadline")
        .expect("the watcher is still running");
    assert_eq!(discover(&sources).clusters[0].name, "static");
    drop(watcher);
}

#[tokio::test]
async fn dropping_the_watcher_stops_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("config");
    fs::copy(corpus().join("kind/config"), &file).expect("copy");
    let (tx, mut rx) = mpsc::channel(1);
    let watcher = watch(&Sources::new([file], None), Duration::from_millis(50), tx).expect("watch");
    drop(watcher);
    // The sender lives in the watcher's thread; once it has stopped, the channel closes.
    let closed = tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("the watcher stopped before the deadline");
    assert_eq!(closed, None);
}

#[test]
fn watching_a_missing_directory_is_not_an_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (tx, _rx) = mpsc::channel(1);
    let sources = Sources::new(
        [dir.path().join("absent/config")],
        Some(dir.path().join("absent-dir")),
    );
    let watcher = watch(&sources, Duration::from_millis(50), tx).expect("watch");
    assert!(watcher.watched().is_empty());
}
