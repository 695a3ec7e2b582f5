//! The SDK's kubeconfig selection over the shared corpus (`tests/corpus/kubeconfigs`), run
//! natively.
//!
//! The expected descriptions of probeable references are, word for word, those the host's
//! resolver gives (`host/domain/tests/it/reference.rs`): both sides must read a kubeconfig alike. The
//! one difference by design: [`select`] does no I/O, so a kubeconfig naming missing files
//! (`bad/missing-files.yaml`) is probeable here and `reference-broken` on the host, which
//! checks the files; a plugin learns it when the host answers `not-found`.

use std::fs;
use std::path::{Path, PathBuf};

use vigil_plugin_sdk::kubeconfig::{CredentialKind, Kubeconfig, Material, select};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("plugins/sdk has a grandparent")
        .join("tests/corpus/kubeconfigs")
}

/// Selects `reference` (`<root>/FILE[#CONTEXT]`, split at the last `#`) and describes the
/// result: the host's text for a selection, `not probeable (CLASS): MESSAGE` for an error.
fn describe(root: &Path, reference: &str) -> String {
    let reference = reference.replace("<root>", &root.display().to_string());
    let (path, context) = match reference.rsplit_once('#') {
        Some((path, context)) => (path, Some(context)),
        None => (reference.as_str(), None),
    };
    let bytes = fs::read(path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let described = match select(&bytes, context) {
        Ok(selection) => selection.describe(path),
        Err(error) => format!("not probeable ({}): {error}", error.class()),
    };
    described.replace(&root.display().to_string(), "<root>")
}

/// One case: a reference, and its expected description.
fn check(reference: &str, expected: &str) {
    assert_eq!(describe(&corpus(), reference), expected, "{reference}");
}

#[test]
fn good_kubeconfigs_select_as_the_host_resolves_them() {
    check(
        "<root>/kind/config#kind-kind",
        "probeable: client certificate inline, CA inline, server https://127.0.0.1:41357",
    );
    check(
        "<root>/kind/config",
        "probeable: client certificate inline, CA inline, server https://127.0.0.1:41357",
    );
    check(
        "<root>/k3s/k3s.yaml#default",
        "probeable: client certificate inline, CA inline, server https://127.0.0.1:6443",
    );
    check(
        "<root>/k3s-edge/k3s.yaml#default",
        "probeable: client certificate inline, CA inline, server https://127.0.0.2:6443",
    );
    check(
        "<root>/minikube/config#minikube",
        "probeable: client certificate file <root>/minikube/profiles/minikube/client.crt, CA file <root>/minikube/ca.crt, server https://127.0.0.1:32771",
    );
    check(
        "<root>/eks/config#arn:aws:eks:eu-west-1:111122223333:cluster/vigil-demo",
        "not probeable (exec-credentials): user \"arn:aws:eks:eu-west-1:111122223333:cluster/vigil-demo\" of context \"arn:aws:eks:eu-west-1:111122223333:cluster/vigil-demo\" gets its credentials from the exec command \"aws\", which vigil runs only for plugins granted exec-credentials (credentials.exec-credential)",
    );
    check(
        "<root>/gke/config",
        "not probeable (exec-credentials): user \"gke_vigil-fake-project_europe-west1-b_demo\" of context \"gke_vigil-fake-project_europe-west1-b_demo\" gets its credentials from the auth-provider \"gcp\"; vigil does not run credential plugins",
    );
    check(
        "<root>/static-token/config#static",
        "probeable: bearer token inline, CA inline, server https://127.0.0.1:8443",
    );
    check(
        "<root>/token-file/config#projected",
        "probeable: bearer token file <root>/token-file/token, CA file <root>/token-file/ca.crt, server https://127.0.0.1:10443",
    );
    check(
        "<root>/insecure/config#lab",
        "probeable: bearer token inline, TLS verification disabled (insecure-skip-tls-verify), server https://127.0.0.1:9443",
    );
    check(
        "<root>/shared-cluster/config#prod-admin",
        "probeable: client certificate inline, CA inline, TLS server name kubernetes.default.svc, server https://127.0.0.1:16443",
    );
    check(
        "<root>/shared-cluster/config",
        "probeable: bearer token inline, CA inline, TLS server name kubernetes.default.svc, server https://127.0.0.1:16443",
    );
    check(
        "<root>/shared-cluster/config#prod-monitoring",
        "probeable: bearer token inline, CA inline, TLS server name kubernetes.default.svc, server https://127.0.0.1:16443",
    );
    check(
        "<root>/wrapped-data/config",
        "probeable: bearer token inline, CA inline, server https://127.0.0.1:23443",
    );
    check(
        "<root>/bad/broken-contexts.yaml#works",
        "probeable: client certificate inline, CA inline, server https://127.0.0.1:20443",
    );
}

#[test]
fn bad_kubeconfigs_are_not_probeable_for_the_hosts_reasons() {
    check(
        "<root>/shared-cluster/config#nope",
        "not probeable (reference-broken): context \"nope\" not found in the kubeconfig",
    );
    check(
        "<root>/bad/broken-contexts.yaml#no-such-cluster",
        "not probeable (reference-broken): context \"no-such-cluster\" names cluster \"ghost\", which this file does not define",
    );
    check(
        "<root>/bad/broken-contexts.yaml#no-such-user",
        "not probeable (reference-broken): context \"no-such-user\" names user \"ghost\", which this file does not define",
    );
    check(
        "<root>/bad/broken-contexts.yaml#no-server",
        "not probeable (reference-broken): context \"no-server\": cluster \"serverless\" has no server",
    );
    check(
        "<root>/bad/missing-sections.yaml",
        "not probeable (reference-broken): context \"orphan\" names cluster \"orphan\", which this file does not define",
    );
    check(
        "<root>/bad/syntax-error.yaml#broken",
        "not probeable (reference-broken): invalid kubeconfig YAML at line 6, column 6: while parsing a flow mapping, did not find expected ',' or '}'",
    );
    check(
        "<root>/bad/unclosed-quote.yaml#quoted",
        "not probeable (reference-broken): invalid kubeconfig YAML at line 10, column 12: unclosed quote",
    );
    check(
        "<root>/bad/duplicate-key.yaml#dup",
        "not probeable (reference-broken): invalid kubeconfig YAML at line 11, column 5: duplicate mapping key",
    );
    check(
        "<root>/bad/context-without-cluster.yaml#lonely",
        "not probeable (reference-broken): invalid kubeconfig YAML at line 10, column 5: missing field `cluster` at `contexts[0].context`",
    );
    check(
        "<root>/bad/empty.yaml",
        "not probeable (reference-broken): the file is empty",
    );
    check(
        "<root>/bad/deployment.yaml",
        "not probeable (reference-broken): not a kubeconfig: its kind is not Config",
    );
    check(
        "<root>/bad/garbage.bin",
        "not probeable (reference-broken): not text (binary content, or not UTF-8/UTF-16)",
    );
    check(
        "<root>/bad/notes.txt",
        "not probeable (reference-broken): invalid kubeconfig YAML at line 1, column 1: expected mapping start",
    );
    // Selection does no I/O: the missing files are the host's to find (it says
    // reference-broken before the plugin runs) or `credentials.read-file`'s (`not-found`).
    check(
        "<root>/bad/unpadded-data.yaml",
        "not probeable (reference-broken): the certificate-authority-data of cluster \"unpadded\" of context \"unpadded\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
    );
    check(
        "<root>/bad/missing-files.yaml",
        "probeable: client certificate file <root>/bad/pki/client.crt, CA file <root>/bad/pki/ca.crt, server https://127.0.0.1:21443",
    );
}

#[test]
fn files_are_named_as_written_for_the_host_to_resolve() {
    let selection = select(
        &fs::read(corpus().join("minikube/config")).expect("read"),
        None,
    )
    .expect("selects");
    assert_eq!(
        selection.files(),
        [
            "ca.crt",
            "profiles/minikube/client.crt",
            "./profiles/minikube/client.key"
        ]
    );
    assert_eq!(
        selection.credential_kind(),
        CredentialKind::ClientCertificate
    );
    assert_eq!(selection.context, "minikube");
    assert_eq!(selection.user.as_deref(), Some("minikube"));

    let kind =
        select(&fs::read(corpus().join("kind/config")).expect("read"), None).expect("selects");
    assert!(kind.files().is_empty());
    let Some(Material::Inline(key)) = &kind.client_key else {
        panic!("expected an inline key, got {:?}", kind.client_key);
    };
    assert!(
        key.expose_secret()
            .starts_with(b"-----BEGIN EC PRIVATE KEY-----\n")
    );
}

/// A kubeconfig with one cluster `c` (given as YAML flow-mapping fields), one user `u`
/// (fields) and one context `x` on them.
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:6443', {cluster}}}\nusers:\n- name: u\n  user: {{{user}}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    )
}

/// Selects the current context of `yaml` written as `<root>/config` and describes it.
fn check_yaml(yaml: &str, context: Option<&str>, expected: &str) {
    let dir = tempdir();
    let path = dir.join("config");
    fs::write(&path, yaml).expect("write kubeconfig");
    let reference = match context {
        Some(context) => format!("<root>/config#{context}"),
        None => "<root>/config".to_owned(),
    };
    assert_eq!(describe(&dir, &reference), expected, "{yaml}");
    fs::remove_dir_all(&dir).expect("clean up");
}

/// A fresh directory under the target directory (no extra dependency for one helper).
fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vigil-sdk-corpus-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).expect("create temporary directory");
    dir
}

#[test]
fn rarer_shapes_select_as_the_host_resolves_them() {
    // Cluster fields, user fields, expected description (the host's cases, without the
    // ones that need the files to exist).
    let cases: &[(&str, &str, &str)] = &[
        (
            "insecure-skip-tls-verify: false",
            "",
            "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "tls-server-name: ''",
            "token: ''",
            "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "certificate-authority: ca.crt, insecure-skip-tls-verify: true",
            "",
            "not probeable (reference-broken): cluster \"c\" of context \"x\" sets insecure-skip-tls-verify together with a certificate authority, which kubectl refuses",
        ),
        (
            "certificate-authority-data: 'vigil-fake-not-base64-secret-66!'",
            "",
            "not probeable (reference-broken): the certificate-authority-data of cluster \"c\" of context \"x\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
        ),
        (
            "certificate-authority-data: 'Y2E'",
            "",
            "not probeable (reference-broken): the certificate-authority-data of cluster \"c\" of context \"x\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
        ),
        (
            "certificate-authority-data: 'Y2 E='",
            "",
            "not probeable (reference-broken): the certificate-authority-data of cluster \"c\" of context \"x\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
        ),
        (
            "certificate-authority-data: \"Y2\\r\\nE=\\n\"",
            "",
            "probeable: no credentials (anonymous), CA inline, server https://127.0.0.1:6443",
        ),
        (
            "certificate-authority-data: 'Y2E=', certificate-authority: absent.crt",
            "",
            "probeable: no credentials (anonymous), CA inline, server https://127.0.0.1:6443",
        ),
        (
            "",
            "client-certificate: client.crt",
            "not probeable (reference-broken): user \"u\" of context \"x\" has a client certificate but no client key",
        ),
        (
            "",
            "client-key-data: 'a2V5'",
            "not probeable (reference-broken): user \"u\" of context \"x\" has a client key but no client certificate",
        ),
        (
            "",
            "client-certificate: absent/../config, client-key: ./k.pem",
            "probeable: client certificate file <root>/config, system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "",
            "token: vigil-fake-inline-wins-77, tokenFile: absent-token",
            "probeable: bearer token inline, system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "",
            "tokenFile: absent-token",
            "probeable: bearer token file <root>/absent-token, system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "",
            "username: admin, password: vigil-fake-password-88",
            "not probeable (reference-broken): user \"u\" of context \"x\" uses basic authentication (username and password), which Kubernetes removed and vigil does not support",
        ),
        (
            "",
            "exec: {apiVersion: client.authentication.k8s.io/v1, command: /opt/bin/kubelogin, args: [get-token, --secret, vigil-fake-arg-99]}",
            "not probeable (exec-credentials): user \"u\" of context \"x\" gets its credentials from the exec command \"kubelogin\", which vigil runs only for plugins granted exec-credentials (credentials.exec-credential)",
        ),
        (
            "",
            "auth-provider: {name: oidc, config: {id-token: vigil-fake-id-token-10}}",
            "not probeable (exec-credentials): user \"u\" of context \"x\" gets its credentials from the auth-provider \"oidc\"; vigil does not run credential plugins",
        ),
        (
            // Credential plugins are decided before the user's other problems, as on the host.
            "",
            "client-key-data: '!!', exec: {command: aws}",
            "not probeable (exec-credentials): user \"u\" of context \"x\" gets its credentials from the exec command \"aws\", which vigil runs only for plugins granted exec-credentials (credentials.exec-credential)",
        ),
    ];
    for (cluster, user, expected) in cases {
        check_yaml(&kubeconfig(cluster, user), None, expected);
    }

    // A context without a user, and a user entry without a body, are anonymous.
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        Some("x"),
        "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
    );
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: u}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n",
        Some("x"),
        "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
    );
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        None,
        "not probeable (reference-broken): the kubeconfig has no current-context and the reference names no context",
    );
    check_yaml(
        "clusters: [{name: c, cluster: {server: '127.0.0.1:6443'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        Some("x"),
        "not probeable (reference-broken): context \"x\": the server of cluster \"c\" is not an http:// or https:// URL",
    );
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://admin:pw@127.0.0.1'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        Some("x"),
        "not probeable (reference-broken): context \"x\": the server of cluster \"c\" embeds credentials (user@host), which vigil refuses",
    );
    // The first context, cluster and user of a name win.
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://one'}}, {name: c, cluster: {server: 'https://two'}}]\ncontexts: [{name: x, context: {cluster: c}}, {name: x, context: {cluster: d}}]\n",
        Some("x"),
        "probeable: no credentials (anonymous), system CA roots, server https://one",
    );
}

// --- No secret leaves through messages or Debug output --------------------------------------

/// Every file under `dir`, recursively.
fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("read corpus") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(corpus_files(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The secret values of the corpus: values of secret YAML keys, every `vigil-fake-…` token
/// or secret, and the bodies of the token and key files.
fn corpus_secrets() -> Vec<String> {
    const SECRET_KEYS: [&str; 6] = [
        "token:",
        "client-key-data:",
        "client-certificate-data:",
        "certificate-authority-data:",
        "access-token:",
        "password:",
    ];
    let mut secrets: Vec<String> = Vec::new();
    for file in corpus_files(&corpus()) {
        let text = String::from_utf8_lossy(&fs::read(&file).expect("read")).into_owned();
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".key") || name == "token" {
            secrets.extend(
                text.lines()
                    .filter(|line| !line.starts_with("-----") && line.len() >= 16)
                    .map(str::to_owned),
            );
        }
        for line in text.lines() {
            let line = line.trim().trim_start_matches("- ").trim_start_matches('{');
            for key in SECRET_KEYS {
                if let Some(value) = line.strip_prefix(key) {
                    let value = value.trim().trim_matches(['"', '\'', '}']);
                    if value.len() >= 8 {
                        secrets.push(value.to_owned());
                    }
                }
            }
        }
        for word in
            text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
        {
            if word.contains("vigil-fake-") && (word.contains("token") || word.contains("secret")) {
                secrets.push(word.to_owned());
            }
        }
    }
    secrets.sort();
    secrets.dedup();
    secrets
}

#[test]
fn no_corpus_secret_appears_in_any_message_or_debug_output() {
    let secrets = corpus_secrets();
    assert!(secrets.len() > 30, "only {} secrets found", secrets.len());
    for expected in [
        "ya29.vigil-fake-gke-access-token-6e0b1d",
        "vigil-fake-exec-env-secret-7c21",
        "vigil-fake-unclosed-quote-token-c0ffee51",
        "vigil-fake-duplicate-token-two-92bb",
        "vigil-fake-notes-token-aa01",
    ] {
        assert!(
            secrets.iter().any(|s| s == expected),
            "{expected} not harvested"
        );
    }

    let mut outputs = Vec::new();
    for file in corpus_files(&corpus()) {
        let bytes = fs::read(&file).expect("read");
        if let Ok(config) = Kubeconfig::parse(&bytes) {
            outputs.push(format!("{config:?}"));
            outputs.push(format!("{config:#?}"));
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let contexts = text
            .lines()
            .filter_map(|line| {
                line.trim()
                    .strip_prefix("- name: ")
                    .or_else(|| line.trim().strip_prefix("name: "))
            })
            .map(|name| Some(name.trim()))
            .chain([None]);
        for context in contexts {
            let result = select(&bytes, context);
            if let Err(error) = &result {
                outputs.push(error.to_string());
            }
            outputs.push(format!("{result:?}"));
            outputs.push(format!("{result:#?}"));
        }
    }
    assert!(outputs.len() > 80, "only {} outputs", outputs.len());
    for output in &outputs {
        for secret in &secrets {
            assert!(
                !output.contains(secret.as_str()),
                "secret {secret:?} leaked in:\n{output}"
            );
        }
    }
}
