//! `secret://` references: the real `kube-secret.wasm` plugin loaded by the real runtime,
//! with Secrets read from a fake management cluster (vigil-fake-kube, over TLS) that holds
//! the kubeconfigs of other fake clusters. Every address is on loopback; no test sets
//! `KUBERNETES_SERVICE_HOST` or reaches in-cluster config (the management cluster is
//! always given explicitly).
//!
//! The whole process log is captured at trace level and scanned for every secret the
//! Secrets hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::{self, Reference, Resolution};
use vigil_domain::secrets::{self, ManagementCluster, SecretSource};
use vigil_fake_kube::{
    AddressPlan, AuthUsed, ClusterHandle, Fixtures, Fleet, KubeconfigOptions, KubeconfigShape, User,
};
use vigil_plugin_host::{PluginRuntime, RuntimeSettings};

use vigil_test_support as plugins;

use plugins::{plugin_file, root};

/// Everything at trace, except Cranelift's code generation (it sees compiled plugin code,
/// never credentials, and logs every function it compiles).
const TRACE: &str = "trace,cranelift_codegen=info,cranelift_frontend=info,\
                     cranelift_entity=info,wasmtime_internal_cranelift=info,regalloc2=info";

/// The one request a kubeconfig probe makes.
const NAMESPACES: &str = "/api/v1/namespaces";

/// The grants of the first-party plugin's own `kube-secret.toml`.
fn shipped_grants() -> String {
    std::fs::read_to_string(root().join("plugins/kube-secret/kube-secret.toml"))
        .expect("plugins/kube-secret/kube-secret.toml")
}

/// Everything the process logs, from the first test that asks for it.
fn captured_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&buffer);
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(TRACE))
            .with_ansi(false)
            .with_writer(move || Captured(Arc::clone(&writer)))
            .try_init()
            .expect("the first subscriber of this test binary");
        buffer
    })
}

struct Captured(Arc<Mutex<Vec<u8>>>);

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

fn log_text() -> String {
    String::from_utf8_lossy(
        &captured_log()
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    )
    .into_owned()
}

/// Fails naming the secret (by its position, never its value) when the log holds it.
fn assert_not_logged(secrets: &[String]) {
    let log = log_text();
    assert!(log.lines().count() > 20, "the log was captured: {log}");
    assert!(!secrets.is_empty(), "the scan has secrets to look for");
    for (index, secret) in secrets.iter().enumerate() {
        assert!(
            secret.len() >= 16,
            "secret {index} is too short to scan for"
        );
        assert!(
            !log.contains(secret.as_str()),
            "secret {index} is in the log"
        );
    }
}

/// The secret values of a kubeconfig's YAML: tokens and `*-data` fields, and the base64
/// lines of the PEM they decode to.
fn secrets_of(yaml: &str) -> Vec<String> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).expect("a kubeconfig");
    // Serialising writes the secret fields out in plain.
    let kubeconfig = serde_json::to_value(&kubeconfig).expect("json");
    let mut found = Vec::new();
    for user in kubeconfig["users"].as_array().into_iter().flatten() {
        let user = &user["user"];
        if let Some(token) = user["token"].as_str() {
            found.push(token.to_owned());
        }
        for field in ["client-key-data", "client-certificate-data"] {
            if let Some(data) = user[field].as_str() {
                found.push(data.to_owned());
                if let Ok(pem) = STANDARD.decode(data) {
                    found.extend(
                        String::from_utf8_lossy(&pem)
                            .lines()
                            .filter(|line| !line.starts_with("-----") && line.len() >= 16)
                            .map(str::to_owned),
                    );
                }
            }
        }
    }
    found
}

/// A plugin directory holding `plugins` (name, NAME.toml text).
fn plugin_dir(dir: &Path, plugins: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create the plugin dir");
    for (name, manifest) in plugins {
        std::fs::copy(plugin_file(name), dir.join(format!("{name}.wasm"))).expect("copy");
        std::fs::write(dir.join(format!("{name}.toml")), manifest).expect("write");
    }
    dir.to_path_buf()
}

async fn load(
    dir: &Path,
    secrets: Option<Arc<dyn SecretSource>>,
    credential_dirs: Vec<PathBuf>,
) -> PluginRuntime {
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: dir.to_path_buf(),
        cache_dir: None,
        concurrency: 4,
        credential_dirs,
        kubeconfig_credential_dirs: Vec::new(),
        secrets,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    runtime
}

/// A probe target for `reference`. The recorded endpoint is a loopback port nobody
/// listens on, so a healthy probe proves that egress came from the kubeconfig served.
fn target(reference: &str) -> ProbeTarget {
    let reference = Reference::parse(reference).expect("reference");
    let connection = match reference::resolve(&reference) {
        Resolution::Connection(material) => Some(material),
        Resolution::Delegated => None,
        other => panic!("{other}"),
    };
    ProbeTarget {
        cluster: ClusterId(1),
        name: "c".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference,
        connection,
        plugin: None,
        timeout: Duration::from_secs(3),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    }
}

/// A self-contained kubeconfig for `cluster`: its CA inline and a bearer token.
fn token_kubeconfig(cluster: &ClusterHandle, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}-user\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-user\ncurrent-context: {name}\n",
        name = cluster.name(),
        server = cluster.server_url(),
        ca = STANDARD.encode(cluster.ca_pem()),
    )
}

/// Writes a management kubeconfig and connects to it as `vigil serve` does.
async fn management_source(dir: &Path, yaml: &str) -> Arc<dyn SecretSource> {
    let path = dir.join("management.yaml");
    std::fs::write(&path, yaml).expect("write the management kubeconfig");
    secrets::connect(&ManagementCluster::Kubeconfig(path)).await
}

fn secret(key: &str, value: &str) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([(key.to_owned(), value.as_bytes().to_vec())])
}

fn namespaces_requests(cluster: &ClusterHandle) -> Vec<AuthUsed> {
    cluster
        .log()
        .entries_for(NAMESPACES)
        .into_iter()
        .map(|entry| entry.auth)
        .collect()
}

fn secret_reads(management: &ClusterHandle, namespace: &str, name: &str) -> usize {
    management
        .log()
        .entries_for(&format!("/api/v1/namespaces/{namespace}/secrets/{name}"))
        .len()
}

#[track_caller]
fn assert_not_probeable(outcome: &ProbeOutcome, needle: &str) {
    match outcome {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::ReferenceBroken,
            message,
        } => assert!(message.contains(needle), "{needle:?} not in {message:?}"),
        other => panic!("expected not-probeable(reference-broken), got {other:?}"),
    }
}

#[track_caller]
fn assert_denied(outcome: &ProbeOutcome, needle: &str) {
    match outcome {
        ProbeOutcome::Inconclusive {
            class: ReasonClass::Denied,
            message,
        } => assert!(message.contains(needle), "{needle:?} not in {message:?}"),
        other => panic!("expected inconclusive(denied), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_references_are_probed_through_the_management_cluster() {
    captured_log();
    let fleet = Fleet::builder()
        .clusters(3)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let [management, first, second] = fleet.clusters() else {
        panic!("three clusters");
    };
    let temp = tempfile::tempdir().expect("tempdir");

    // The management cluster's Secrets: an embedded-certificate kubeconfig, a token one
    // under another key, a value that is no kubeconfig, one naming files, and the first
    // kubeconfig again in a namespace the plugin is not granted.
    let embedded = first
        .kubeconfig(KubeconfigShape::Embedded)
        .expect("kubeconfig");
    let token = token_kubeconfig(second, second.admin_token());
    let files = format!(
        "clusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    token: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        first.server_url(),
        first.admin_token()
    );
    let exec = format!(
        "clusters:\n- name: c\n  cluster:\n    server: {}\nusers:\n- name: eks\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n      args: [eks, get-token]\ncontexts:\n- name: x\n  context: {{cluster: c, user: eks}}\ncurrent-context: x\n",
        first.server_url()
    );
    let fixtures = |token: &str| {
        let mut fixtures = Fixtures::empty();
        fixtures.insert_secret("vigil", "first", secret("kubeconfig", &embedded));
        fixtures.insert_secret("vigil", "second", secret("config", token));
        fixtures.insert_secret(
            "vigil",
            "bad",
            secret("kubeconfig", "clusters: {not: a list}\n"),
        );
        fixtures.insert_secret("vigil", "files", secret("kubeconfig", &files));
        fixtures.insert_secret("vigil", "exec", secret("kubeconfig", &exec));
        fixtures.insert_secret("other", "first", secret("kubeconfig", &embedded));
        fixtures
    };
    management.set_fixtures(fixtures(&token));
    let management_yaml = management
        .kubeconfig(KubeconfigShape::Token)
        .expect("kubeconfig");
    let source = management_source(temp.path(), &management_yaml).await;

    let dir = plugin_dir(
        &temp.path().join("plugins.d"),
        &[("kube-secret", &shipped_grants())],
    );
    let runtime = load(&dir, Some(Arc::clone(&source)), Vec::new()).await;

    // Routed by `accepts` to kube-secret, served the Secret, healthy: the first cluster
    // saw the probe, with the client certificate of the kubeconfig in the Secret.
    assert_eq!(
        runtime.probe(&target("secret://vigil/first")).await,
        ProbeOutcome::Healthy
    );
    assert!(
        matches!(
            namespaces_requests(first).as_slice(),
            [AuthUsed::ClientCertificate { .. }]
        ),
        "{:?}",
        namespaces_requests(first)
    );
    assert_eq!(secret_reads(management, "vigil", "first"), 1);

    // Another key, and the context named explicitly.
    let second_ref = format!("secret://vigil/second?key=config&context={}", second.name());
    assert_eq!(
        runtime.probe(&target(&second_ref)).await,
        ProbeOutcome::Healthy
    );
    let admin = AuthUsed::Token {
        user: "kubernetes-admin".to_owned(),
    };
    assert_eq!(namespaces_requests(second), std::slice::from_ref(&admin));

    // The Secret is rotated (a new token for another user, the old one revoked): the very
    // next probe reads it again and uses the new token.
    second.add_token(
        "vigil-rotated-token-0123456789",
        User::new("rotated", &["system:masters"]),
    );
    let rotated = token_kubeconfig(second, "vigil-rotated-token-0123456789");
    management.set_fixtures(fixtures(&rotated));
    assert!(second.revoke_token(second.admin_token()));
    assert_eq!(
        runtime.probe(&target(&second_ref)).await,
        ProbeOutcome::Healthy
    );
    assert_eq!(
        namespaces_requests(second),
        [
            admin,
            AuthUsed::Token {
                user: "rotated".to_owned()
            }
        ]
    );
    assert_eq!(secret_reads(management, "vigil", "second"), 2);

    // What cannot be probed is not-probeable, never a failure, and reaches no cluster.
    let before = (first.log().count(), second.log().count());
    let cases = [
        ("secret://vigil/bad", "is not a kubeconfig"),
        (
            "secret://vigil/missing",
            "the Secret vigil/missing does not exist",
        ),
        ("secret://vigil/first?key=nope", "has no key \"nope\""),
        (
            "secret://vigil/first?context=nope",
            "context \"nope\" not found",
        ),
        ("secret://vigil/files", "must be self-contained"),
    ];
    for (reference, needle) in cases {
        assert_not_probeable(&runtime.probe(&target(reference)).await, needle);
    }
    // A user whose credentials come from an exec command: a Secret's kubeconfig does not
    // run one unless the operator allows it (VIGIL_EXEC_FROM_SECRETS).
    match runtime.probe(&target("secret://vigil/exec")).await {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::ExecCredentials,
            message,
        } => assert!(
            message.contains("VIGIL_EXEC_FROM_SECRETS") && message.contains("secret://vigil/exec"),
            "{message}"
        ),
        other => panic!("expected not-probeable(exec-credentials), got {other:?}"),
    }
    assert_eq!((first.log().count(), second.log().count()), before);

    // A namespace the plugin is not granted is refused by the host without reading it.
    assert_denied(
        &runtime.probe(&target("secret://other/first")).await,
        "namespace other",
    );
    assert_eq!(secret_reads(management, "other", "first"), 0);

    // A plugin whose NAME.toml grants no namespace is refused the same way.
    let ungranted = plugin_dir(
        &temp.path().join("ungranted.d"),
        &[(
            "kube-secret",
            "log = true\ncredentials = true\nhttp = true\n",
        )],
    );
    let ungranted = load(&ungranted, Some(Arc::clone(&source)), Vec::new()).await;
    assert_denied(
        &ungranted.probe(&target("secret://vigil/first")).await,
        "namespace vigil",
    );
    // Read once by the healthy probe, once by each of `key=nope` and `context=nope`, and
    // not by the plugin the namespace is not granted to.
    assert_eq!(secret_reads(management, "vigil", "first"), 3);
    assert_eq!(namespaces_requests(first).len(), 1);

    // Not one secret of the Secrets, nor the management cluster's token, was logged.
    let mut secrets = secrets_of(&embedded);
    secrets.extend(secrets_of(&token));
    secrets.extend(secrets_of(&rotated));
    secrets.extend(secrets_of(&management_yaml));
    secrets.push(first.admin_token().to_owned());
    assert!(secrets.len() >= 8, "{} secrets to scan for", secrets.len());
    assert_not_logged(&secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_usable_management_cluster_secret_clusters_are_not_probeable() {
    captured_log();
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let [management, cluster] = fleet.clusters() else {
        panic!("two clusters");
    };
    let embedded = cluster
        .kubeconfig(KubeconfigShape::Embedded)
        .expect("kubeconfig");
    let mut fixtures = Fixtures::empty();
    fixtures.insert_secret("vigil", "cluster", secret("kubeconfig", &embedded));
    management.set_fixtures(fixtures);
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(
        &temp.path().join("plugins.d"),
        &[("kube-secret", &shipped_grants())],
    );
    let reference = "secret://vigil/cluster";

    // No management cluster at all: the settings to give are named.
    let none = load(&dir, None, Vec::new()).await;
    assert_not_probeable(
        &none.probe(&target(reference)).await,
        "VIGIL_MANAGEMENT_KUBECONFIG",
    );
    let unconfigured = secrets::connect(&ManagementCluster::None).await;
    let none = load(&dir, Some(unconfigured), Vec::new()).await;
    assert_not_probeable(
        &none.probe(&target(reference)).await,
        "VIGIL_MANAGEMENT_KUBECONFIG",
    );

    // A management kubeconfig that does not exist: named, not-probeable.
    let missing = temp.path().join("missing.yaml");
    let source = secrets::connect(&ManagementCluster::Kubeconfig(missing.clone())).await;
    let broken = load(&dir, Some(source), Vec::new()).await;
    assert_not_probeable(
        &broken.probe(&target(reference)).await,
        &missing.display().to_string(),
    );

    // The management cluster refuses vigil's credentials (a user without RBAC): the plugin
    // is told it was denied, and the cluster is not reached.
    let reader = token_kubeconfig(management, management.reader_token());
    let source = management_source(temp.path(), &reader).await;
    let refused = load(&dir, Some(source), Vec::new()).await;
    assert_denied(
        &refused.probe(&target(reference)).await,
        "does not let vigil read the Secret vigil/cluster (403)",
    );
    assert_eq!(secret_reads(management, "vigil", "cluster"), 1);
    assert!(namespaces_requests(cluster).is_empty());

    // The same Secret with usable credentials: healthy.
    let admin = token_kubeconfig(management, management.admin_token());
    let source = management_source(temp.path(), &admin).await;
    let working = load(&dir, Some(source), Vec::new()).await;
    assert_eq!(
        working.probe(&target(reference)).await,
        ProbeOutcome::Healthy
    );
    assert_eq!(namespaces_requests(cluster).len(), 1);

    let mut secrets = secrets_of(&embedded);
    secrets.push(management.admin_token().to_owned());
    secrets.push(management.reader_token().to_owned());
    assert_not_logged(&secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_parameters_are_resolved_under_the_same_namespace_grant() {
    captured_log();
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let [management, cluster] = fleet.clusters() else {
        panic!("two clusters");
    };
    cluster.add_token(
        "vigil-parameter-token-0123456789",
        User::new("from-secret", &["system:masters"]),
    );
    let mut fixtures = Fixtures::empty();
    fixtures.insert_secret(
        "vigil",
        "tokens",
        secret("token", "vigil-parameter-token-0123456789\n"),
    );
    fixtures.insert_secret(
        "other",
        "tokens",
        secret("token", "vigil-parameter-token-0123456789\n"),
    );
    management.set_fixtures(fixtures);
    let temp = tempfile::tempdir().expect("tempdir");
    let management_yaml = management
        .kubeconfig(KubeconfigShape::Token)
        .expect("kubeconfig");
    let source = management_source(temp.path(), &management_yaml).await;

    // The cluster itself is a kubeconfig file; its `token` parameter is a Secret's key,
    // which the wasi-http test plugin sends as a bearer token to `/version`.
    let written = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let file = written
        .iter()
        .find(|w| w.cluster == cluster.name())
        .expect("the cluster's kubeconfig");
    // The Secrets of `vigil` may be sent to the cluster's server only.
    let grants = format!(
        "log = true\ncredentials = true\nhttp = true\nsecret-namespaces = [\"vigil\"]\n\
         [credential-hosts]\n\"secret://vigil\" = [\"{}\"]\n",
        cluster.server_url().trim_start_matches("https://")
    );
    let dir = plugin_dir(
        &temp.path().join("plugins.d"),
        &[("wasi-http", grants.as_str())],
    );
    let runtime = load(&dir, Some(source), Vec::new()).await;
    let probe = |token: &str| {
        let mut target = target(&format!("{}#{}", file.path.display(), file.context));
        target.endpoint = cluster.server_url();
        target.plugin = Some("wasi-http".to_owned());
        target.parameters = BTreeMap::from([
            ("mode".to_owned(), "probe".to_owned()),
            ("token".to_owned(), token.to_owned()),
        ]);
        let runtime = runtime.clone();
        async move { runtime.probe(&target).await }
    };
    let version_users = || {
        cluster
            .log()
            .entries_for("/version")
            .into_iter()
            .map(|entry| entry.auth)
            .collect::<Vec<_>>()
    };

    assert_eq!(
        probe("secret://vigil/tokens?key=token").await,
        ProbeOutcome::Healthy
    );
    assert_eq!(
        version_users(),
        [AuthUsed::Token {
            user: "from-secret".to_owned()
        }]
    );

    // A namespace not granted: denied, the Secret not read, the cluster not reached.
    assert_denied(
        &probe("secret://other/tokens?key=token").await,
        "namespace other",
    );
    assert_eq!(secret_reads(management, "other", "tokens"), 0);
    assert_eq!(version_users().len(), 1);

    // A parameter that is not a valid Secret reference is invalid, never read.
    assert_not_probeable(
        &probe("secret://vigil/tokens?key=token&context=x").await,
        "not a valid secret://",
    );
    assert_eq!(secret_reads(management, "vigil", "tokens"), 1);

    let mut secrets = vec!["vigil-parameter-token-0123456789".to_owned()];
    secrets.extend(secrets_of(&management_yaml));
    assert_not_logged(&secrets);
}
