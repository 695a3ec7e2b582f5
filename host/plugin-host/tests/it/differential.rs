//! The differential test of the kubeconfig reading: the host's reading of a kubeconfig (which server, which
//! files, which credentials, or why it is not probeable) and the guest SDK's must agree, or
//! the host would refuse the files a plugin asks for, or a plugin would probe another server
//! than the one the host allows.
//!
//! For every file of the kubeconfig corpus (`tests/corpus/kubeconfigs`, enumerated, so a new
//! file is covered without touching this test) and for every context either reader finds in
//! it — plus the file's `current-context` and a context no file defines — both readers run:
//!
//! - the host: [`vigil_domain::reference::resolve`], with its real I/O;
//! - the guest: what the kubeconfig-file plugin does, with the SDK's own code —
//!   [`select`] on the kubeconfig's bytes, then [`ApiServer::connect_with`] reading the files
//!   the selection names. The test double is the host call itself (`credentials.kubeconfig`
//!   and `credentials.read-file`): it reads the real file system, resolving a path as written
//!   in the kubeconfig against the kubeconfig's directory, as the host's `read-file` does.
//!
//! Their conclusions are compared field by field, and word for word for the descriptions and
//! reasons. Where they legitimately differ, [`EXPECTED_DIFFERENCES`] says so case by case.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use std::time::Duration;

use sha2::{Digest, Sha256};
use vigil_decision::{ClusterId, ProbeOutcome};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::{Material, Reference, Resolution, resolve};
use vigil_plugin_host::{PluginRuntime, RuntimeSettings};
use vigil_plugin_sdk::apiserver::ApiServer;
use vigil_plugin_sdk::credentials::CredentialsError;
use vigil_plugin_sdk::kubeconfig::{self, Kubeconfig, SelectError, Selection, select};
use vigil_plugin_sdk::{ProbeError, SecretBytes};

use vigil_test_support::corpus as support;

use vigil_test_support as plugins;

use support::{corpus, corpus_files};

/// A case where the readers disagree by design: the file (relative to the corpus), the
/// context (`None`: the current context), and why.
struct ExpectedDifference {
    file: &'static str,
    context: Option<&'static str>,
    why: &'static str,
}

/// Every legitimate disagreement. Keep it minimal: a case listed here is still run, and the
/// test fails if the readers come to agree on it (so a stale entry cannot hide anything).
const EXPECTED_DIFFERENCES: &[ExpectedDifference] = &[
    ExpectedDifference {
        file: "bad/missing-files.yaml",
        context: None,
        why: "the host checks that the files named by the context exist before any plugin \
              runs; `select` does no I/O, so the guest sees it only when read-file answers \
              not-found, and names the path as written in the kubeconfig",
    },
    ExpectedDifference {
        file: "bad/missing-files.yaml",
        context: Some("absent-files"),
        why: "as for the current context, which is this one",
    },
];

/// What a reader concluded about one file and context.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reading {
    /// Probeable with these connection details.
    Probeable(Box<Connection>),
    /// Not probeable: the reason class (as the contract spells it) and the message.
    NotProbeable { class: String, message: String },
    /// Only the guest can end here (a read the host denied); never expected.
    Inconclusive { class: String, message: String },
    /// The user's credentials come from an `exec` command: the host keeps it to run for a
    /// plugin granted `exec-credentials`, the SDK's reader says so. Both name the context
    /// and the command's file name.
    Exec { context: String, command: String },
}

/// The connection details both readers must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Connection {
    context: String,
    server: String,
    tls_server_name: Option<String>,
    insecure_skip_tls_verify: bool,
    ca: Source,
    client_certificate: Source,
    client_key: Source,
    token: Source,
    /// The files the host serves to the plugin (host) / the files the plugin read (guest),
    /// resolved, without the kubeconfig itself.
    files: BTreeSet<PathBuf>,
    /// The one-line description (`Resolution::describe`, `Selection::describe`).
    description: String,
}

/// Where a piece of material comes from. Inline bytes are compared by digest, so that a
/// failing assertion never prints a secret (even the corpus's fake ones).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    None,
    Inline { sha256: String },
    File(PathBuf),
}

fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::new(), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

// ---- The host's reading ----

fn host_source(material: Option<&Material>) -> Source {
    match material {
        None => Source::None,
        Some(Material::Inline(bytes)) => Source::Inline {
            sha256: digest(bytes.expose_secret()),
        },
        Some(Material::File(path)) => Source::File(path.clone()),
    }
}

fn host_reading(file: &Path, context: Option<&str>) -> Reading {
    let resolution = resolve(&Reference::File {
        path: file.to_str().expect("corpus paths are UTF-8").to_owned(),
        context: context.map(str::to_owned),
    });
    let description = resolution.describe();
    match resolution {
        Resolution::Connection(material) if material.exec.is_some() => Reading::Exec {
            command: material
                .exec
                .as_deref()
                .map(|exec| exec.command_name())
                .unwrap_or_default(),
            context: material.context,
        },
        Resolution::Connection(material) => Reading::Probeable(Box::new(Connection {
            files: material
                .files()
                .into_iter()
                .filter(|served| served != file)
                .collect(),
            context: material.context,
            server: material.server,
            tls_server_name: material.tls_server_name,
            insecure_skip_tls_verify: material.insecure_skip_tls_verify,
            ca: host_source(material.ca.as_ref()),
            client_certificate: host_source(material.client_certificate.as_ref()),
            client_key: host_source(material.client_key.as_ref()),
            token: host_source(material.token.as_ref()),
            description,
        })),
        Resolution::NotProbeable { class, message } => Reading::NotProbeable {
            class: class.to_string(),
            message,
        },
        Resolution::Delegated => panic!("a file reference is never delegated"),
    }
}

// ---- The guest's reading, with the host calls doubled by real file reads ----

/// The double of a `credentials` read: the file's bytes, or the error the host answers.
fn read_as_the_host_does(path: &Path) -> Result<SecretBytes, CredentialsError> {
    match fs::read(path) {
        Ok(bytes) => Ok(SecretBytes::new(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Err(CredentialsError::NotFound(
            format!("{} does not exist", path.display()),
        )),
        Err(error) => Err(CredentialsError::Invalid(format!(
            "cannot read {}: {error}",
            path.display()
        ))),
    }
}

fn contract_class(class: vigil_plugin_sdk::ReasonClass) -> String {
    use vigil_plugin_sdk::ReasonClass as R;
    match class {
        R::ReferenceBroken => "reference-broken".to_owned(),
        R::ExecCredentials => "exec-credentials".to_owned(),
        R::Denied => "denied".to_owned(),
        other => format!("{other:?}"),
    }
}

fn guest_failure(error: ProbeError) -> Reading {
    match error {
        ProbeError::NotProbeable(failure) => Reading::NotProbeable {
            class: contract_class(failure.class),
            message: failure.message,
        },
        ProbeError::Inconclusive(failure) => Reading::Inconclusive {
            class: contract_class(failure.class),
            message: failure.message,
        },
    }
}

fn guest_source(
    material: Option<&kubeconfig::Material>,
    kubeconfig_path: &str,
    read: &BTreeSet<PathBuf>,
) -> Source {
    match material {
        None => Source::None,
        Some(kubeconfig::Material::Inline(bytes)) => Source::Inline {
            sha256: digest(bytes.expose_secret()),
        },
        Some(kubeconfig::Material::File(written)) => {
            let resolved = PathBuf::from(kubeconfig::resolve_path(kubeconfig_path, written));
            assert!(
                read.contains(&resolved),
                "the guest names {written} but did not read it"
            );
            Source::File(resolved)
        }
    }
}

/// The kubeconfig-file plugin's steps up to its request: read the kubeconfig, select the
/// context, read the files; failures worded as the plugin words them.
fn guest_reading(file: &Path, context: Option<&str>) -> Reading {
    guest_reading_of(file, read_as_the_host_does(file), context)
}

/// The same steps, with `served` as the answer of `credentials.kubeconfig`.
fn guest_reading_of(
    file: &Path,
    served: Result<SecretBytes, CredentialsError>,
    context: Option<&str>,
) -> Reading {
    let path = file.to_str().expect("corpus paths are UTF-8");
    let bytes = match served {
        Ok(bytes) => bytes,
        Err(error) => return guest_failure(error.probe_error(&format!("the kubeconfig {path}"))),
    };
    let selection: Selection = match select(bytes.expose_secret(), context) {
        Ok(selection) => selection,
        Err(SelectError::ExecPlugin {
            context, command, ..
        }) => return Reading::Exec { context, command },
        Err(error) => {
            return Reading::NotProbeable {
                class: contract_class(error.class()),
                message: format!("kubeconfig {path}: {error}"),
            };
        }
    };
    let mut read = BTreeSet::new();
    let connected = ApiServer::connect_with(&selection, |written| {
        let resolved = PathBuf::from(kubeconfig::resolve_path(path, written));
        read.insert(resolved.clone());
        read_as_the_host_does(&resolved)
    });
    if let Err(error) = connected {
        return guest_failure(match error {
            ProbeError::NotProbeable(mut failure) => {
                failure.message = format!("kubeconfig {path}: {}", failure.message);
                ProbeError::NotProbeable(failure)
            }
            other => other,
        });
    }
    Reading::Probeable(Box::new(Connection {
        context: selection.context.clone(),
        server: selection.server.clone(),
        tls_server_name: selection.tls_server_name.clone(),
        insecure_skip_tls_verify: selection.insecure_skip_tls_verify,
        ca: guest_source(selection.ca.as_ref(), path, &read),
        client_certificate: guest_source(selection.client_certificate.as_ref(), path, &read),
        client_key: guest_source(selection.client_key.as_ref(), path, &read),
        token: guest_source(selection.token.as_ref(), path, &read),
        description: selection.describe(path),
        files: read,
    }))
}

// ---- The corpus ----

/// A context that no corpus file defines.
const ABSENT_CONTEXT: &str = "vigil-no-such-context";

/// The contexts to try in `file`: its current context (`None`), every context either reader
/// finds (the `kube` crate's parser, which the host uses, and the SDK's), and one that is in
/// no file. Names a `PATH#CONTEXT` reference cannot carry (with `#`) are left out.
fn contexts_of(file: &Path) -> Vec<Option<String>> {
    let bytes = fs::read(file).expect("read corpus file");
    let mut names = BTreeSet::new();
    if let Ok(config) = Kubeconfig::parse(&bytes) {
        names.extend(config.contexts.into_iter().map(|named| named.name));
    }
    if let Ok(config) = std::str::from_utf8(&bytes)
        .map_err(|_| ())
        .and_then(|text| kube::config::Kubeconfig::from_yaml(text).map_err(|_| ()))
    {
        names.extend(config.contexts.into_iter().map(|named| named.name));
    }
    names.insert(ABSENT_CONTEXT.to_owned());
    std::iter::once(None)
        .chain(
            names
                .into_iter()
                .filter(|name| !name.is_empty() && !name.contains('#'))
                .map(Some),
        )
        .collect()
}

#[test]
fn the_host_and_the_guest_sdk_read_every_corpus_kubeconfig_alike() {
    let root = corpus();
    let files = corpus_files(&root);
    assert!(
        files.len() >= 20,
        "the corpus at {} has only {} files",
        root.display(),
        files.len()
    );

    let mut disagreements = Vec::new();
    let mut expected_seen = vec![false; EXPECTED_DIFFERENCES.len()];
    let (mut cases, mut probeable) = (0, 0);
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .expect("under the corpus")
            .to_str()
            .expect("UTF-8 name");
        for context in contexts_of(file) {
            let context = context.as_deref();
            cases += 1;
            let case = format!("{relative} #{}", context.unwrap_or("(current context)"));
            let host = host_reading(file, context);
            let guest = guest_reading(file, context);
            if matches!(host, Reading::Probeable(_)) {
                probeable += 1;
            }
            let expected = EXPECTED_DIFFERENCES.iter().position(|difference| {
                difference.file == relative && difference.context == context
            });
            match (expected, host == guest) {
                (None, true) => println!("agree      {case}"),
                (Some(index), false) => {
                    expected_seen[index] = true;
                    println!(
                        "differ     {case} (expected: {})\n  host:  {host:?}\n  guest: {guest:?}",
                        EXPECTED_DIFFERENCES[index].why
                    );
                }
                (None, false) => disagreements.push(format!(
                    "{case}: the readers disagree\n  host:  {host:?}\n  guest: {guest:?}"
                )),
                (Some(_), true) => disagreements.push(format!(
                    "{case}: listed as an expected difference, but the readers agree: drop it from EXPECTED_DIFFERENCES"
                )),
            }
        }
    }
    for (difference, seen) in EXPECTED_DIFFERENCES.iter().zip(&expected_seen) {
        let case = format!("{} #{:?}", difference.file, difference.context);
        if !seen && !disagreements.iter().any(|d| d.starts_with(&case)) {
            disagreements.push(format!(
                "{case}: listed as an expected difference, but no such case was run"
            ));
        }
    }
    println!(
        "{cases} cases over {} files, {probeable} probeable",
        files.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} of {cases} cases disagree:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // The corpus must exercise both outcomes, or agreement would prove little.
    assert!(
        probeable >= 10 && cases - probeable >= 20,
        "{probeable} of {cases} probeable"
    );
}

/// The expected differences are real ones: on `bad/missing-files.yaml` both readers say
/// `reference-broken`, each naming the missing certificate-authority file.
#[test]
fn the_missing_files_difference_is_only_in_when_and_how_the_file_is_named() {
    let file = corpus().join("bad/missing-files.yaml");
    let host = host_reading(&file, None);
    let guest = guest_reading(&file, None);
    for reading in [&host, &guest] {
        match reading {
            Reading::NotProbeable { class, message } => {
                assert_eq!(class, "reference-broken", "{reading:?}");
                assert!(
                    message.contains("certificate-authority file") && message.contains("ca.crt"),
                    "{message}"
                );
            }
            other => panic!("expected not-probeable, got {other:?}"),
        }
    }
}

/// What `credentials.kubeconfig` serves a plugin — the host's JSON rendering of the selected
/// context alone — reads, through the SDK, exactly as the file itself does: same server,
/// TLS settings, credentials, files and description, whether the plugin names the context
/// or relies on the rendering's `current-context`. The rendering holds that one context, its
/// cluster and user and nothing else, and the SDK reads it with its JSON parser.
#[test]
fn the_served_rendering_reads_as_the_file_does() {
    let root = corpus();
    let mut probeable = 0;
    let mut disagreements = Vec::new();
    for file in corpus_files(&root) {
        let relative = file
            .strip_prefix(&root)
            .expect("under the corpus")
            .display();
        for context in contexts_of(&file) {
            let context = context.as_deref();
            let Resolution::Connection(material) = resolve(&Reference::File {
                path: file.to_str().expect("corpus paths are UTF-8").to_owned(),
                context: context.map(str::to_owned),
            }) else {
                continue;
            };
            probeable += 1;
            let case = format!("{relative} #{}", context.unwrap_or("(current context)"));
            let served = material.served_kubeconfig.expose_secret();
            let rendered: Kubeconfig = serde_json::from_slice(served)
                .unwrap_or_else(|error| panic!("{case}: the rendering is not JSON: {error}"));
            assert_eq!(
                (
                    rendered.contexts.len(),
                    rendered.clusters.len(),
                    rendered.current_context.as_deref()
                ),
                (1, 1, Some(material.context.as_str())),
                "{case}: the rendering holds more than the selected context"
            );
            assert!(rendered.users.len() <= 1, "{case}: more than one user");
            let from_file = guest_reading(&file, context);
            for named in [context, None] {
                let from_rendering =
                    guest_reading_of(&file, Ok(SecretBytes::new(served.to_vec())), named);
                if from_rendering != from_file {
                    disagreements.push(format!(
                        "{case} (the plugin names {named:?})\n  file:      {from_file:?}\n  rendering: {from_rendering:?}"
                    ));
                }
            }
        }
    }
    assert_every_case_agrees(probeable, &disagreements);
}

/// What `credentials.context` serves a plugin — the host's own reading of the selected
/// context, already decoded — is what the plugin reads in the served kubeconfig itself:
/// for every probeable case of the corpus, the `context-agrees` test plugin, run by the real
/// runtime on the host's resolution of the case, asks for both and compares them field by
/// field (names, server, TLS settings, the bytes of inline material, the resolved path of a
/// file). With `the_served_rendering_reads_as_the_file_does` above, both ways of reading a
/// context agree with the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_context_reads_as_the_served_kubeconfig_does() {
    let temp = tempfile::tempdir().expect("tempdir");
    let plugins = temp.path().join("plugins.d");
    fs::create_dir_all(&plugins).expect("create the plugin dir");
    fs::copy(
        plugins::plugin_file("context-agrees"),
        plugins.join("context-agrees.wasm"),
    )
    .expect("copy the plugin");
    fs::write(plugins.join("context-agrees.toml"), "credentials = true\n").expect("grants");
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugins,
        cache_dir: None,
        concurrency: 4,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{:?}", report.refused);

    let root = corpus();
    let (mut probeable, mut disagreements) = (0, Vec::new());
    for file in corpus_files(&root) {
        let relative = file
            .strip_prefix(&root)
            .expect("under the corpus")
            .display()
            .to_string();
        for context in contexts_of(&file) {
            let reference = Reference::File {
                path: file.to_str().expect("corpus paths are UTF-8").to_owned(),
                context: context.clone(),
            };
            // An exec user is refused before the call for a plugin without the
            // `exec-credentials` grant (as this one is): nothing is served to compare.
            let Resolution::Connection(material) = resolve(&reference) else {
                continue;
            };
            if material.exec.is_some() {
                continue;
            }
            probeable += 1;
            let case = format!(
                "{relative} #{}",
                context.as_deref().unwrap_or("(current context)")
            );
            let target = ProbeTarget {
                cluster: ClusterId(1),
                name: "corpus".to_owned(),
                endpoint: material.server.clone(),
                reference,
                connection: Some(material),
                plugin: Some("context-agrees".to_owned()),
                timeout: Duration::from_secs(5),
                labels: BTreeMap::new(),
                parameters: BTreeMap::new(),
            };
            match runtime.probe(&target).await {
                ProbeOutcome::Healthy => println!("agree      {case}"),
                other => disagreements.push(format!("{case}: {other:?}")),
            }
        }
    }
    assert_every_case_agrees(probeable, &disagreements);
}

/// The end of a comparison over the corpus: no case read differently, and enough cases were
/// probeable for the agreement to prove something.
#[track_caller]
fn assert_every_case_agrees(probeable: usize, disagreements: &[String]) {
    assert!(
        disagreements.is_empty(),
        "{} cases read differently:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    assert!(probeable >= 10, "only {probeable} probeable cases");
}
