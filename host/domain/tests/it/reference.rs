//! References: parsing, and host-side resolution over the kubeconfig corpus
//! (`tests/corpus/kubeconfigs`) and over temporary kubeconfigs for the rarer shapes.
//!
//! Also the guarantee that no secret from the corpus reaches any message, `Display` or
//! `Debug` output of discovery or resolution. No test reads the real `~/.kube` or opens a
//! network connection.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use proptest::prelude::*;
use vigil_decision::ReasonClass;
use vigil_domain::discovery::{Sources, discover};
use vigil_domain::reference::{
    ConnectionMaterial, DEFAULT_SECRET_KEY, FileBounds, Material, Reference, ReferenceError,
    Resolution, SecretBytes, resolve, resolve_bounded,
};

use vigil_test_support::corpus as support;

use support::{corpus, corpus_files};

fn file_ref(path: &str, context: Option<&str>) -> Reference {
    Reference::File {
        path: path.to_owned(),
        context: context.map(str::to_owned),
    }
}

fn secret_ref(namespace: &str, name: &str, key: &str, context: Option<&str>) -> Reference {
    Reference::Secret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key: key.to_owned(),
        context: context.map(str::to_owned),
    }
}

/// Parses `text`; when it parses, checks that `Display` gives `canonical` back (the text
/// itself unless given) and that the canonical text parses to the same reference.
fn check_parse(text: &str, expected: Result<Reference, ReferenceError>, canonical: Option<&str>) {
    assert_eq!(Reference::parse(text), expected, "{text:?}");
    if let Ok(reference) = expected {
        let shown = reference.to_string();
        assert_eq!(shown, canonical.unwrap_or(text), "Display of {text:?}");
        assert_eq!(
            Reference::parse(&shown),
            Ok(reference),
            "re-parse of {shown:?}"
        );
    }
}

#[test]
fn references_parse_and_display_canonically() {
    use ReferenceError as E;
    let eks = "arn:aws:eks:eu-west-1:111122223333:cluster/demo";
    check_parse(
        "/etc/kube/config#prod",
        Ok(file_ref("/etc/kube/config", Some("prod"))),
        None,
    );
    check_parse(
        "/etc/kube/config",
        Ok(file_ref("/etc/kube/config", None)),
        None,
    );
    check_parse(
        "/odd#dir/config#ctx",
        Ok(file_ref("/odd#dir/config", Some("ctx"))),
        None,
    );
    check_parse(
        &format!("/etc/kube/config#{eks}"),
        Ok(file_ref("/etc/kube/config", Some(eks))),
        None,
    );
    check_parse(
        "/run/secrets/kube/config#a b",
        Ok(file_ref("/run/secrets/kube/config", Some("a b"))),
        None,
    );
    check_parse(
        "relative/config#x",
        Err(E::RelativePath("relative/config".into())),
        None,
    );
    check_parse("config", Err(E::RelativePath("config".into())), None);
    check_parse("#ctx", Err(E::RelativePath(String::new())), None);
    check_parse("/etc/kube/config#", Err(E::EmptyContext), None);
    check_parse("", Err(E::Empty), None);

    check_parse(
        "secret://monitoring/prod-kubeconfig",
        Ok(secret_ref(
            "monitoring",
            "prod-kubeconfig",
            DEFAULT_SECRET_KEY,
            None,
        )),
        None,
    );
    check_parse(
        "secret://monitoring/prod.kube?key=config&context=prod",
        Ok(secret_ref(
            "monitoring",
            "prod.kube",
            "config",
            Some("prod"),
        )),
        None,
    );
    check_parse(
        "secret://ns/s?context=prod&key=config",
        Ok(secret_ref("ns", "s", "config", Some("prod"))),
        Some("secret://ns/s?key=config&context=prod"),
    );
    check_parse(
        "secret://ns/s?key=kubeconfig",
        Ok(secret_ref("ns", "s", "kubeconfig", None)),
        Some("secret://ns/s"),
    );
    check_parse(
        &format!("secret://ns/s?context={eks}"),
        Ok(secret_ref("ns", "s", DEFAULT_SECRET_KEY, Some(eks))),
        None,
    );
    check_parse(
        "secret://ns/s?context=a%23b%26c%3Dd%20e",
        Ok(secret_ref("ns", "s", DEFAULT_SECRET_KEY, Some("a#b&c=d e"))),
        None,
    );
    check_parse(
        "secret://ns/s?context=%c3%a9t%C3%A9",
        Ok(secret_ref("ns", "s", DEFAULT_SECRET_KEY, Some("été"))),
        Some("secret://ns/s?context=%C3%A9t%C3%A9"),
    );
    check_parse("secret://ns", Err(E::SecretShape), None);
    check_parse("secret://ns/", Err(E::SecretShape), None);
    check_parse("secret:///name", Err(E::SecretShape), None);
    check_parse("secret://ns/a/b", Err(E::SecretShape), None);
    check_parse(
        "secret://NS/name",
        Err(E::InvalidName {
            what: "namespace",
            value: "NS".into(),
        }),
        None,
    );
    check_parse(
        "secret://ns/Name_1",
        Err(E::InvalidName {
            what: "Secret name",
            value: "Name_1".into(),
        }),
        None,
    );
    check_parse(
        "secret://ns/s?key=bad%20key",
        Err(E::InvalidName {
            what: "Secret key",
            value: "bad key".into(),
        }),
        None,
    );
    check_parse(
        "secret://ns/s?namespace=x",
        Err(E::UnknownParameter("namespace".into())),
        None,
    );
    check_parse(
        "secret://ns/s?key=a&key=b",
        Err(E::BadParameter("key".into())),
        None,
    );
    check_parse(
        "secret://ns/s?context=",
        Err(E::BadParameter("context".into())),
        None,
    );
    check_parse(
        "secret://ns/s?context",
        Err(E::BadParameter("context".into())),
        None,
    );
    check_parse(
        "secret://ns/s?context=%zz",
        Err(E::BadPercentEncoding),
        None,
    );
    check_parse(
        "secret://ns/s?context=%ff",
        Err(E::BadPercentEncoding),
        None,
    );
    check_parse("secret://ns/s#prod", Err(E::FragmentInSecret), None);

    check_parse(
        "https://127.0.0.1:8443/healthz",
        Ok(Reference::Http {
            url: "https://127.0.0.1:8443/healthz".into(),
        }),
        None,
    );
    check_parse(
        "http://localhost/readyz?verbose#x",
        Ok(Reference::Http {
            url: "http://localhost/readyz?verbose#x".into(),
        }),
        None,
    );
    check_parse("https://", Err(E::MalformedUrl("no host")), None);
    check_parse("https:///path", Err(E::MalformedUrl("no host")), None);
    check_parse(
        "https://127.0.0.1/a b",
        Err(E::MalformedUrl("it contains white space")),
        None,
    );
    check_parse(
        "https://monitor:vigil-fake-url-secret-55@127.0.0.1/",
        Err(E::CredentialsInUrl),
        None,
    );
    check_parse(
        "ftp://127.0.0.1/x",
        Err(E::UnsupportedScheme("ftp".into())),
        None,
    );
    check_parse(
        "file:///etc/kube/config",
        Err(E::UnsupportedScheme("file".into())),
        None,
    );
}

#[test]
fn reference_errors_never_quote_a_url() {
    let error = Reference::parse("https://monitor:vigil-fake-url-secret-55@127.0.0.1/")
        .expect_err("refused");
    assert!(!error.to_string().contains("vigil-fake-url-secret-55"));
    assert!(!format!("{error:?}").contains("vigil-fake-url-secret-55"));
}

proptest! {
    #[test]
    fn file_references_round_trip(
        segments in prop::collection::vec("[a-zA-Z0-9._ #-]{1,8}", 1..5),
        context in prop::option::of("[a-zA-Z0-9:/@._ -]{1,24}"),
    ) {
        let path = format!("/{}", segments.join("/"));
        // Without a context, a '#' in the path would be read as one: the documented ambiguity.
        prop_assume!(context.is_some() || !path.contains('#'));
        let reference = Reference::File { path, context };
        prop_assert_eq!(Reference::parse(&reference.to_string()), Ok(reference));
    }

    #[test]
    fn secret_references_round_trip(
        namespace in "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?",
        name in "[a-z0-9]{1,8}(\\.[a-z0-9]{1,8}){0,2}",
        key in "[-._a-zA-Z0-9]{1,12}",
        context in prop::option::of("\\PC{1,16}"),
    ) {
        let reference = Reference::Secret { namespace, name, key, context };
        prop_assert_eq!(Reference::parse(&reference.to_string()), Ok(reference));
    }
}

/// Resolves `reference` and compares `describe()` with `expected`, where `<root>` stands for
/// `root` (so that expectations do not depend on where the repository is checked out).
fn check_resolution(root: &Path, reference: &str, expected: &str) -> Resolution {
    let reference = reference.replace("<root>", &root.display().to_string());
    let parsed =
        Reference::parse(&reference).unwrap_or_else(|error| panic!("{reference}: {error}"));
    let resolution = resolve(&parsed);
    let described = resolution
        .describe()
        .replace(&root.display().to_string(), "<root>");
    assert_eq!(described, expected, "{reference}");
    assert_eq!(resolution.to_string(), resolution.describe());
    resolution
}

#[test]
fn corpus_references_resolve_as_kubectl_would() {
    let root = corpus();
    let check = |reference: &str, expected: &str| {
        check_resolution(&root, reference, expected);
    };
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
        "probeable: exec command \"aws\", CA inline, server https://localhost:7443",
    );
    check(
        "<root>/gke/config",
        "not probeable (exec-credentials): kubeconfig <root>/gke/config: user \"gke_vigil-fake-project_europe-west1-b_demo\" of context \"gke_vigil-fake-project_europe-west1-b_demo\" gets its credentials from the auth-provider \"gcp\"; vigil does not run credential plugins",
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
fn broken_references_name_the_file_or_context() {
    let root = corpus();
    let check = |reference: &str, expected: &str| {
        let resolution = check_resolution(&root, reference, expected);
        assert!(
            matches!(
                resolution,
                Resolution::NotProbeable {
                    class: ReasonClass::ReferenceBroken,
                    ..
                }
            ),
            "{resolution:?}"
        );
    };
    check(
        "<root>/absent/config#x",
        "not probeable (reference-broken): kubeconfig <root>/absent/config: the file does not exist",
    );
    check(
        "<root>/shared-cluster/config#nope",
        "not probeable (reference-broken): kubeconfig <root>/shared-cluster/config: context \"nope\" not found in the kubeconfig",
    );
    check(
        "<root>/bad/broken-contexts.yaml#no-such-cluster",
        "not probeable (reference-broken): kubeconfig <root>/bad/broken-contexts.yaml: context \"no-such-cluster\" names cluster \"ghost\", which this file does not define",
    );
    check(
        "<root>/bad/broken-contexts.yaml#no-such-user",
        "not probeable (reference-broken): kubeconfig <root>/bad/broken-contexts.yaml: context \"no-such-user\" names user \"ghost\", which this file does not define",
    );
    check(
        "<root>/bad/broken-contexts.yaml#no-server",
        "not probeable (reference-broken): kubeconfig <root>/bad/broken-contexts.yaml: context \"no-server\": cluster \"serverless\" has no server",
    );
    check(
        "<root>/bad/missing-sections.yaml",
        "not probeable (reference-broken): kubeconfig <root>/bad/missing-sections.yaml: context \"orphan\" names cluster \"orphan\", which this file does not define",
    );
    check(
        "<root>/bad/missing-files.yaml",
        "not probeable (reference-broken): kubeconfig <root>/bad/missing-files.yaml: the certificate-authority file <root>/bad/pki/ca.crt of cluster \"absent-files\" of context \"absent-files\" does not exist",
    );
    check(
        "<root>/bad/unpadded-data.yaml",
        "not probeable (reference-broken): kubeconfig <root>/bad/unpadded-data.yaml: the certificate-authority-data of cluster \"unpadded\" of context \"unpadded\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
    );
    check(
        "<root>/bad/syntax-error.yaml#broken",
        "not probeable (reference-broken): kubeconfig <root>/bad/syntax-error.yaml: invalid kubeconfig YAML at line 6, column 6: while parsing a flow mapping, did not find expected ',' or '}'",
    );
    check(
        "<root>/bad/unclosed-quote.yaml#quoted",
        "not probeable (reference-broken): kubeconfig <root>/bad/unclosed-quote.yaml: invalid kubeconfig YAML at line 10, column 12: unclosed quote",
    );
    check(
        "<root>/bad/empty.yaml",
        "not probeable (reference-broken): kubeconfig <root>/bad/empty.yaml: the file is empty",
    );
    check(
        "<root>/bad/deployment.yaml",
        "not probeable (reference-broken): kubeconfig <root>/bad/deployment.yaml: not a kubeconfig: its kind is not Config",
    );
    check(
        "<root>/bad/garbage.bin",
        "not probeable (reference-broken): kubeconfig <root>/bad/garbage.bin: not text (binary content, or not UTF-8/UTF-16)",
    );
    check(
        "<root>/bad",
        "not probeable (reference-broken): kubeconfig <root>/bad: not a regular file but a directory",
    );
}

#[test]
fn secret_and_http_references_are_delegated_to_plugins() {
    for text in [
        "secret://monitoring/prod",
        "https://127.0.0.1:8443/healthz",
        "http://localhost/readyz",
    ] {
        let resolution = resolve(&Reference::parse(text).expect("parses"));
        assert_eq!(resolution, Resolution::Delegated, "{text}");
        assert_eq!(
            resolution.describe(),
            "delegated: a plugin resolves this reference"
        );
    }
}

fn connection(resolution: Resolution) -> ConnectionMaterial {
    match resolution {
        Resolution::Connection(material) => *material,
        other => panic!("expected a connection, got {other:?}"),
    }
}

fn resolve_corpus(file: &str, context: Option<&str>) -> ConnectionMaterial {
    connection(resolve(&Reference::File {
        path: corpus().join(file).display().to_string(),
        context: context.map(str::to_owned),
    }))
}

fn inline(material: Option<&Material>) -> &[u8] {
    match material {
        Some(Material::Inline(bytes)) => bytes.expose_secret(),
        other => panic!("expected inline material, got {other:?}"),
    }
}

#[test]
fn inline_data_is_decoded_and_files_are_listed() {
    let kind = resolve_corpus("kind/config", None);
    assert_eq!(kind.kubeconfig, corpus().join("kind/config"));
    assert_eq!(kind.context, "kind-kind");
    assert!(!kind.insecure_skip_tls_verify);
    assert_eq!(kind.tls_server_name, None);
    assert!(inline(kind.ca.as_ref()).starts_with(b"-----BEGIN CERTIFICATE-----\n"));
    assert!(inline(kind.client_certificate.as_ref()).starts_with(b"-----BEGIN CERTIFICATE-----\n"));
    assert!(inline(kind.client_key.as_ref()).starts_with(b"-----BEGIN EC PRIVATE KEY-----\n"));
    assert_eq!(kind.token, None);
    assert_eq!(kind.files(), [corpus().join("kind/config")]);

    let token = resolve_corpus("static-token/config", Some("static"));
    assert!(
        inline(token.token.as_ref())
            .starts_with(b"eyJhbGciOiJSUzI1NiIsImtpZCI6InZpZ2lsLWZha2UifQ.")
    );
    assert_eq!(token.client_certificate, None);
    assert_eq!(token.client_key, None);

    let shared = resolve_corpus("shared-cluster/config", Some("prod-admin"));
    assert_eq!(
        shared.tls_server_name.as_deref(),
        Some("kubernetes.default.svc")
    );

    let insecure = resolve_corpus("insecure/config", None);
    assert!(insecure.insecure_skip_tls_verify);
    assert_eq!(insecure.ca, None);

    // Data wrapped over lines decodes to the very bytes of the same data on one line.
    let wrapped = resolve_corpus("wrapped-data/config", None);
    assert_eq!(wrapped.ca, token.ca);
    assert!(inline(wrapped.ca.as_ref()).ends_with(b"-----END CERTIFICATE-----\n"));
}

#[test]
fn relative_file_references_resolve_against_the_kubeconfigs_directory() {
    let minikube = resolve_corpus("minikube/config", None);
    let dir = corpus().join("minikube");
    assert_eq!(minikube.ca, Some(Material::File(dir.join("ca.crt"))));
    assert_eq!(
        minikube.client_certificate,
        Some(Material::File(dir.join("profiles/minikube/client.crt")))
    );
    // `./profiles/…` is cleaned lexically, as Go's filepath.Join does.
    assert_eq!(
        minikube.client_key,
        Some(Material::File(dir.join("profiles/minikube/client.key")))
    );
    assert_eq!(
        minikube.files(),
        [
            dir.join("config"),
            dir.join("ca.crt"),
            dir.join("profiles/minikube/client.crt"),
            dir.join("profiles/minikube/client.key"),
        ]
    );

    let projected = resolve_corpus("token-file/config", None);
    let dir = corpus().join("token-file");
    assert_eq!(projected.token, Some(Material::File(dir.join("token"))));
    assert_eq!(
        projected.files(),
        [dir.join("config"), dir.join("ca.crt"), dir.join("token")]
    );
}

#[test]
fn the_kubeconfigs_directory_is_taken_as_referenced_not_canonicalised() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let link = dir.path().join("mounted");
    std::os::unix::fs::symlink(corpus().join("minikube"), &link).expect("symlink");
    let material = connection(resolve(&Reference::File {
        path: link.join("config").display().to_string(),
        context: None,
    }));
    assert_eq!(material.ca, Some(Material::File(link.join("ca.crt"))));
    assert_eq!(material.kubeconfig, link.join("config"));
}

#[test]
fn exec_users_are_described_by_their_command_never_its_arguments_or_environment() {
    let resolution = resolve(&Reference::File {
        path: corpus().join("eks/config").display().to_string(),
        context: None,
    });
    let described = resolution.describe();
    let debugged = format!("{resolution:?}");
    assert!(described.contains("exec command \"aws\""), "{described}");
    for hidden in [
        "get-token",
        "--role-arn",
        "vigil-fake-exec-arg-secret-3f9d",
        "vigil-fake-exec-env-secret-7c21",
    ] {
        assert!(!described.contains(hidden), "{hidden} in {described}");
        assert!(!debugged.contains(hidden), "{hidden} in {debugged}");
    }
    assert!(!described.contains("AWS_PROFILE"), "{described}");
    // What the command runs with is kept, for the plugin runtime to run it.
    let material = connection(resolution);
    let exec = material.exec.expect("the exec section");
    assert_eq!(exec.command, "aws");
    assert!(exec.args.iter().any(|arg| arg == "get-token"));
    assert_eq!(
        exec.api_version.as_deref(),
        Some("client.authentication.k8s.io/v1beta1")
    );
    assert_eq!(
        exec.kubeconfig_dir.as_deref(),
        Some(corpus().join("eks").as_path())
    );
}

/// Writes `yaml` as a kubeconfig in a fresh directory (with `files` beside it), resolves
/// `#context` in it, and compares `describe()` with `expected` (`<root>` = the directory).
fn check_yaml(yaml: &str, files: &[(&str, &str)], context: Option<&str>, expected: &str) {
    let dir = tempfile::tempdir().expect("temporary directory");
    fs::write(dir.path().join("config"), yaml).expect("write kubeconfig");
    for (name, content) in files {
        fs::write(dir.path().join(name), content).expect("write file");
    }
    let reference = match context {
        Some(context) => format!("<root>/config#{context}"),
        None => "<root>/config".to_owned(),
    };
    check_resolution(dir.path(), &reference, expected);
}

/// A kubeconfig with one cluster `c` (given as YAML flow-mapping fields), one user `u` (fields)
/// and one context `x` on them.
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:6443', {cluster}}}\nusers:\n- name: u\n  user: {{{user}}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    )
}

/// Cluster fields, user fields, files beside the kubeconfig (name, content), expected description.
type ShapeCase = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn rarer_kubeconfig_shapes_resolve_as_kubectl_would() {
    // One line of data per case: cluster fields, user fields, files beside, expected description.
    let cases: &[ShapeCase] = &[
        (
            "insecure-skip-tls-verify: false",
            "",
            &[],
            "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "tls-server-name: ''",
            "token: ''",
            &[],
            "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "certificate-authority: /etc/vigil-absent/ca.crt",
            "",
            &[],
            // Outside its directory: refused by name, without looking whether it exists.
            "not probeable (reference-broken): kubeconfig <root>/config: the certificate-authority file /etc/vigil-absent/ca.crt of cluster \"c\" of context \"x\" lies outside the kubeconfig's directory <root> and VIGIL_KUBECONFIG_CREDENTIAL_DIRS (unset), where vigil reads the files a kubeconfig names; add /etc/vigil-absent to VIGIL_KUBECONFIG_CREDENTIAL_DIRS (absolute directories, `:`-separated) to allow it",
        ),
        (
            "certificate-authority: ca.crt, insecure-skip-tls-verify: true",
            "",
            &[("ca.crt", "x")],
            "not probeable (reference-broken): kubeconfig <root>/config: cluster \"c\" of context \"x\" sets insecure-skip-tls-verify together with a certificate authority, which kubectl refuses",
        ),
        (
            "certificate-authority-data: 'vigil-fake-not-base64-secret-66!'",
            "",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: the certificate-authority-data of cluster \"c\" of context \"x\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
        ),
        (
            "certificate-authority-data: 'Y2E'",
            "",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: the certificate-authority-data of cluster \"c\" of context \"x\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
        ),
        (
            "certificate-authority-data: 'Y2 E='",
            "",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: the certificate-authority-data of cluster \"c\" of context \"x\" is not valid base64 (kubectl requires the standard alphabet, padded with '=')",
        ),
        (
            "certificate-authority-data: \"Y2\\r\\nE=\\n\"",
            "",
            &[],
            "probeable: no credentials (anonymous), CA inline, server https://127.0.0.1:6443",
        ),
        (
            "certificate-authority-data: 'Y2E=', certificate-authority: absent.crt",
            "",
            &[],
            "probeable: no credentials (anonymous), CA inline, server https://127.0.0.1:6443",
        ),
        (
            "",
            "client-certificate: client.crt",
            &[("client.crt", "x")],
            "not probeable (reference-broken): kubeconfig <root>/config: user \"u\" of context \"x\" has a client certificate but no client key",
        ),
        (
            "",
            "client-key-data: 'a2V5'",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: user \"u\" of context \"x\" has a client key but no client certificate",
        ),
        (
            "",
            "client-certificate: absent/../config, client-key: ./k.pem",
            &[("k.pem", "k")],
            "probeable: client certificate file <root>/config, system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "",
            "token: vigil-fake-inline-wins-77, tokenFile: absent-token",
            &[],
            "probeable: bearer token inline, system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "",
            "tokenFile: absent-token",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: the tokenFile file <root>/absent-token of user \"u\" of context \"x\" does not exist",
        ),
        (
            "",
            "tokenFile: sub",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: the tokenFile file <root>/sub of user \"u\" of context \"x\" does not exist",
        ),
        (
            "",
            "username: admin, password: vigil-fake-password-88",
            &[],
            "not probeable (reference-broken): kubeconfig <root>/config: user \"u\" of context \"x\" uses basic authentication (username and password), which Kubernetes removed and vigil does not support",
        ),
        (
            "",
            "exec: {apiVersion: client.authentication.k8s.io/v1, command: /opt/bin/kubelogin, args: [get-token, --secret, vigil-fake-arg-99]}",
            &[],
            "probeable: exec command \"/opt/bin/kubelogin\", system CA roots, server https://127.0.0.1:6443",
        ),
        (
            "",
            "auth-provider: {name: oidc, config: {id-token: vigil-fake-id-token-10}}",
            &[],
            "not probeable (exec-credentials): kubeconfig <root>/config: user \"u\" of context \"x\" gets its credentials from the auth-provider \"oidc\"; vigil does not run credential plugins",
        ),
    ];
    for (cluster, user, files, expected) in cases {
        check_yaml(&kubeconfig(cluster, user), files, None, expected);
    }

    // A context without a user, and a user entry without a body, are anonymous.
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        &[],
        Some("x"),
        "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
    );
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: u}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n",
        &[],
        Some("x"),
        "probeable: no credentials (anonymous), system CA roots, server https://127.0.0.1:6443",
    );
    check_yaml(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        &[],
        None,
        "not probeable (reference-broken): kubeconfig <root>/config: the kubeconfig has no current-context and the reference names no context",
    );
}

#[test]
fn files_a_kubeconfig_names_lie_under_its_directory_or_the_operators() {
    // <home>/.kube/config names files; <home>/.minikube, <home>/secrets and <home>/roots
    // lie beside, <home>/roots/linked is a link to <home>/roots/real.
    let home = tempfile::tempdir().expect("temporary directory");
    let home = fs::canonicalize(home.path()).expect("real path");
    for dir in [
        ".kube/sub",
        ".minikube/profiles/minikube",
        "secrets",
        "roots/real",
    ] {
        fs::create_dir_all(home.join(dir)).expect("mkdir");
    }
    for file in [
        ".kube/token",
        ".kube/sub/token",
        ".minikube/ca.crt",
        ".minikube/profiles/minikube/client.crt",
        ".minikube/profiles/minikube/client.key",
        "secrets/token",
        "roots/real/token",
    ] {
        fs::write(home.join(file), "one-line-secret-42\n").expect("write");
    }
    let link = |at: &str, to: &str| {
        std::os::unix::fs::symlink(home.join(to), home.join(at)).expect("symlink");
    };
    link(".kube/escape", "secrets/token");
    link(".kube/inside", ".kube/sub/token");
    link("roots/linked", "roots/real");
    link(".minikube/escape", "secrets/token");

    let none: &[&str] = &[];
    let minikube = &[".minikube"][..];
    let cases: &[(&str, &[&str], &str)] = &[
        // Under its own directory, by name and by real path.
        (
            "tokenFile: token",
            none,
            "probeable: bearer token file <home>/.kube/token",
        ),
        (
            "tokenFile: sub/token",
            none,
            "probeable: bearer token file <home>/.kube/sub/token",
        ),
        (
            "tokenFile: inside",
            none,
            "probeable: bearer token file <home>/.kube/inside",
        ),
        // Anywhere else: a one-line secret in another directory.
        (
            "tokenFile: <home>/secrets/token",
            none,
            "the tokenFile file <home>/secrets/token of user \"u\" of context \"x\" lies outside the kubeconfig's directory <home>/.kube and VIGIL_KUBECONFIG_CREDENTIAL_DIRS (unset), where vigil reads the files a kubeconfig names; add <home>/secrets to VIGIL_KUBECONFIG_CREDENTIAL_DIRS (absolute directories, `:`-separated) to allow it",
        ),
        (
            "tokenFile: ../secrets/token",
            none,
            "the tokenFile file <home>/secrets/token of user \"u\" of context \"x\" lies outside",
        ),
        (
            "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            none,
            "the tokenFile file /var/run/secrets/kubernetes.io/serviceaccount/token of user \"u\" of context \"x\" lies outside",
        ),
        // A link inside pointing outside is outside.
        (
            "tokenFile: escape",
            none,
            "the tokenFile file <home>/.kube/escape (really <home>/secrets/token) of user \"u\" of context \"x\" lies outside the kubeconfig's directory <home>/.kube and VIGIL_KUBECONFIG_CREDENTIAL_DIRS (unset), where vigil reads the files a kubeconfig names; add <home>/secrets to",
        ),
        // Minikube's files, and how to allow them.
        (
            "client-certificate: <home>/.minikube/profiles/minikube/client.crt, client-key: <home>/.minikube/profiles/minikube/client.key",
            none,
            "add <home>/.minikube/profiles/minikube to VIGIL_KUBECONFIG_CREDENTIAL_DIRS",
        ),
        (
            "client-certificate: <home>/.minikube/profiles/minikube/client.crt, client-key: <home>/.minikube/profiles/minikube/client.key",
            minikube,
            "probeable: client certificate file <home>/.minikube/profiles/minikube/client.crt",
        ),
        // The operator's directories: by the name written and by real path, through links.
        (
            "tokenFile: <home>/roots/linked/token",
            &["roots/linked"],
            "probeable: bearer token file <home>/roots/linked/token",
        ),
        (
            "tokenFile: <home>/roots/linked/token",
            &["roots/real"],
            "<home>/roots/linked/token of user \"u\" of context \"x\" lies outside the kubeconfig's directory <home>/.kube and VIGIL_KUBECONFIG_CREDENTIAL_DIRS, where vigil reads the files a kubeconfig names; add <home>/roots/linked to",
        ),
        (
            "tokenFile: <home>/roots/real/token",
            &["roots/linked"],
            "probeable: bearer token file <home>/roots/real/token",
        ),
        (
            "tokenFile: <home>/.minikube/escape",
            minikube,
            "the tokenFile file <home>/.minikube/escape (really <home>/secrets/token) of user \"u\" of context \"x\" lies outside the kubeconfig's directory <home>/.kube and VIGIL_KUBECONFIG_CREDENTIAL_DIRS, where",
        ),
        // Outside by name: refused before it is looked at, so whether it exists is not told.
        (
            "tokenFile: <home>/secrets/absent",
            none,
            "the tokenFile file <home>/secrets/absent of user \"u\" of context \"x\" lies outside",
        ),
        (
            "tokenFile: absent",
            none,
            "the tokenFile file <home>/.kube/absent of user \"u\" of context \"x\" does not exist",
        ),
    ];
    let shown = home.display().to_string();
    fs::write(home.join(".kube/ca.crt"), "ca").expect("write");
    for (user, named, expected) in cases {
        let user = user.replace("<home>", &shown);
        fs::write(
            home.join(".kube/config"),
            kubeconfig("certificate-authority: ca.crt", &user),
        )
        .expect("write kubeconfig");
        let bounds = FileBounds {
            named_files: named.iter().map(|dir| home.join(dir)).collect(),
            ..FileBounds::default()
        };
        let resolution = resolve_bounded(
            &Reference::File {
                path: home.join(".kube/config").display().to_string(),
                context: None,
            },
            &bounds,
        );
        let described = resolution.describe().replace(&shown, "<home>");
        assert!(described.contains(expected), "{user}: {described}");
        if !expected.starts_with("probeable") {
            assert!(
                described.starts_with(
                    "not probeable (reference-broken): kubeconfig <home>/.kube/config: "
                ),
                "{described}"
            );
            assert!(!described.contains("one-line-secret"), "{described}");
        }
        if let Resolution::Connection(material) = &resolution {
            let mut roots = vec![home.join(".kube")];
            roots.extend(named.iter().map(|dir| home.join(dir)));
            assert_eq!(material.file_roots, roots, "{user}");
        }
    }

    // A kubeconfig reached through `LINK/..` names its files as kubectl resolves them, by
    // name: its directory is the one they are resolved against.
    link(".kube/to-secrets", "secrets");
    fs::write(home.join("config"), kubeconfig("", "tokenFile: token")).expect("write");
    let resolution = resolve(&Reference::File {
        path: home
            .join(".kube/to-secrets/../config")
            .display()
            .to_string(),
        context: None,
    });
    assert!(
        resolution
            .describe()
            .replace(&shown, "<home>")
            .starts_with("probeable: bearer token file <home>/.kube/token"),
        "{resolution}"
    );
}

#[test]
fn a_fifo_named_as_a_certificate_does_not_block_resolution() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let status = Command::new("mkfifo")
        .arg(dir.path().join("ca.crt"))
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    fs::write(
        dir.path().join("config"),
        kubeconfig("certificate-authority: ca.crt", ""),
    )
    .expect("write");
    let reference = Reference::File {
        path: dir.path().join("config").display().to_string(),
        context: None,
    };
    let (done, result) = std_mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(resolve(&reference));
    });
    let resolution = result
        .recv_timeout(Duration::from_secs(10))
        .expect("resolution finished before the deadline (did it open the FIFO?)");
    assert_eq!(
        resolution.describe(),
        format!(
            "not probeable (reference-broken): kubeconfig {root}/config: the certificate-authority file {root}/ca.crt of cluster \"c\" of context \"x\" is not a regular file",
            root = dir.path().display()
        )
    );
}

#[test]
fn secret_bytes_redact_themselves() {
    let bytes = SecretBytes::new(b"vigil-fake-debug-secret".to_vec());
    assert_eq!(format!("{bytes:?}"), "SecretBytes(<redacted 23 bytes>)");
    let kind = resolve_corpus("kind/config", None);
    let debug = format!("{kind:?}");
    assert!(
        debug.contains("ca: Some(Inline(SecretBytes(<redacted "),
        "{debug}"
    );
}

// --- No secret leaves through messages, Display or Debug -------------------------------------

/// Standard base64 with padding, to look for encoded forms of plain secrets.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut encoded = String::new();
    for chunk in bytes.chunks(3) {
        let group = chunk
            .iter()
            .fold(0u32, |group, byte| (group << 8) | u32::from(*byte))
            << (8 * (3 - chunk.len()));
        for index in 0..4 {
            if index <= chunk.len() {
                encoded.push(char::from(
                    ALPHABET[((group >> (18 - 6 * index)) & 63) as usize],
                ));
            } else {
                encoded.push('=');
            }
        }
    }
    encoded
}

/// Decodes standard padded base64, or `None` (this test's own decoder, independent of the
/// one under test).
fn unbase64(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let symbols = text.trim_end_matches('=').as_bytes();
    let mut bits: Vec<bool> = Vec::new();
    for symbol in symbols {
        let value = ALPHABET.iter().position(|candidate| candidate == symbol)?;
        bits.extend((0..6).rev().map(|shift| (value >> shift) & 1 == 1));
    }
    Some(
        bits.chunks_exact(8)
            .map(|byte| {
                byte.iter()
                    .fold(0u8, |acc, bit| (acc << 1) | u8::from(*bit))
            })
            .collect(),
    )
}

/// Adds the lines of a PEM or token text (not the `-----BEGIN …` lines) as secrets.
fn add_text(plain: &mut Vec<String>, text: &str) {
    for line in text.lines() {
        let line = line.trim().trim_start_matches("- ");
        if !line.starts_with("-----") && line.len() >= 16 {
            plain.push(line.to_owned());
        }
    }
}

/// The secret values of the corpus: values of the secret YAML keys, the `vigil-fake-…`
/// tokens, the bodies of PEM and token files, the decoded inline material, and each of those
/// in base64.
fn corpus_secrets() -> Vec<String> {
    const SECRET_KEYS: [&str; 6] = [
        "token:",
        "client-key-data:",
        "client-certificate-data:",
        "certificate-authority-data:",
        "access-token:",
        "password:",
    ];
    let mut plain: Vec<String> = Vec::new();
    for file in corpus_files(&corpus()) {
        let bytes = fs::read(&file).expect("read corpus file");
        let text = String::from_utf8_lossy(&bytes);
        let name = file
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        if name.ends_with(".crt") || name.ends_with(".key") || name == "token" {
            add_text(&mut plain, &text);
        }
        for line in text.lines() {
            let line = line.trim().trim_start_matches("- ").trim_start_matches('{');
            for key in SECRET_KEYS {
                if let Some(value) = line.strip_prefix(key) {
                    let value = value.trim().trim_matches(['"', '\'', '}']);
                    if value.len() >= 8 {
                        plain.push(value.to_owned());
                    }
                }
            }
        }
        for word in
            text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
        {
            if word.contains("vigil-fake-") && (word.contains("token") || word.contains("secret")) {
                plain.push(word.to_owned());
            }
        }
    }
    // The decoded inline material: certificate and key bodies behind the *-data fields.
    let encoded: Vec<String> = plain
        .iter()
        .filter(|value| value.len() > 40)
        .cloned()
        .collect();
    for value in encoded {
        if let Some(decoded) = unbase64(&value) {
            add_text(&mut plain, &String::from_utf8_lossy(&decoded));
        }
    }
    let mut secrets: Vec<String> = plain
        .iter()
        .map(|secret| base64(secret.as_bytes()))
        .collect();
    secrets.extend(plain);
    secrets.sort();
    secrets.dedup();
    secrets
}

/// Every (file, context) of the corpus worth resolving, good and bad.
fn corpus_references() -> Vec<(PathBuf, Option<String>)> {
    let mut references = Vec::new();
    for file in corpus_files(&corpus()) {
        references.push((file.clone(), None));
        if let Ok(text) = fs::read_to_string(&file) {
            for line in text.lines() {
                if let Some(name) = line
                    .trim()
                    .strip_prefix("- name: ")
                    .or_else(|| line.trim().strip_prefix("name: "))
                {
                    references.push((file.clone(), Some(name.trim().to_owned())));
                }
            }
        }
    }
    references
}

#[test]
fn no_corpus_secret_appears_in_any_message_display_or_debug_output() {
    let secrets = corpus_secrets();
    // The harvest must really have found the secrets, or this test would prove nothing.
    assert!(secrets.len() > 50, "only {} secrets found", secrets.len());
    for expected in [
        "ya29.vigil-fake-gke-access-token-6e0b1d",
        "vigil-fake-exec-env-secret-7c21",
        "vigil-fake-unclosed-quote-token-c0ffee51",
        "vigil-fake-duplicate-token-two-92bb",
        "vigil-fake-notes-token-aa01",
        "vigil-fake-eks-ca-not-a-real-certificate",
    ] {
        assert!(
            secrets.iter().any(|secret| secret == expected),
            "{expected} not harvested"
        );
    }

    let mut outputs: Vec<String> = Vec::new();
    let all_files: Vec<PathBuf> = corpus_files(&corpus())
        .into_iter()
        .filter(|file| {
            file.starts_with(corpus().join("bad"))
                || file
                    .file_name()
                    .is_some_and(|name| name == "config" || name == "k3s.yaml")
        })
        .collect();
    let report = discover(&Sources::new(all_files, Some(corpus().join("bad"))));
    assert!(!report.errors.is_empty() && !report.clusters.is_empty() && !report.clashes.is_empty());
    outputs.push(report.to_string());
    outputs.push(format!("{report:?}"));
    outputs.push(format!("{report:#?}"));
    for error in &report.errors {
        outputs.push(error.to_string());
        outputs.push(error.reason.to_string());
    }

    let mut resolutions = 0;
    for (file, context) in corpus_references() {
        let resolution = resolve(&Reference::File {
            path: file.display().to_string(),
            context,
        });
        resolutions += 1;
        outputs.push(resolution.describe());
        outputs.push(resolution.to_string());
        outputs.push(format!("{resolution:?}"));
        outputs.push(format!("{resolution:#?}"));
    }
    assert!(resolutions > 40, "only {resolutions} resolutions");

    for output in &outputs {
        for secret in &secrets {
            assert!(
                !output.contains(secret.as_str()),
                "secret {secret:?} leaked in:\n{output}"
            );
        }
    }
}

/// A plugin is served the selected context alone: of `shared-cluster` (three users on one
/// cluster), the `prod-readonly` rendering carries its own token and neither of the other
/// users' credentials, and says which context it is.
#[test]
fn the_served_kubeconfig_holds_only_the_selected_context() {
    let material = resolve_corpus("shared-cluster/config", Some("prod-readonly"));
    let served = std::str::from_utf8(material.served_kubeconfig.expose_secret())
        .expect("the rendering is text");
    let rendered: serde_json::Value = serde_json::from_str(served).expect("JSON");
    assert_eq!(rendered["current-context"], "prod-readonly");
    assert_eq!(rendered["contexts"][0]["context"]["namespace"], "default");
    assert_eq!(rendered["clusters"][0]["name"], "prod");
    assert_eq!(
        rendered["clusters"][0]["cluster"]["tls-server-name"],
        "kubernetes.default.svc"
    );
    assert_eq!(
        rendered["users"][0]["user"]["token"],
        "vigil-fake-readonly-token-58c3f0e2a9"
    );
    for other in [
        "prod-admin",
        "prod-monitoring",
        "monitoring-token",
        "client-key-data",
    ] {
        assert!(!served.contains(other), "the rendering names {other}");
    }
    // The Debug output of the material never shows it.
    assert!(!format!("{material:?}").contains("readonly-token"));
}
