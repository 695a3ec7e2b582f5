//! `vigil plugin check FILE.wasm [--cluster NAME]` — the real binary — on the built
//! plugins: the template of `examples/` and the first-party plugins are accepted with
//! their info and grants; a file that is not a component, a wrong world, a future contract
//! version, a trap in `info()`, a broken `NAME.toml` and a component past the limits of
//! vigil's instance pool are each refused with the engine's reason and exit code 4. With
//! `--cluster` one probe reaches the fake cluster and the database is left byte for byte
//! as it was.

use std::path::{Path, PathBuf};
use std::process::Output;

use vigil_decision::PolicyOverrides;
use vigil_domain::probe::wall_clock;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions};
use vigil_store::Store;

use crate::process;

use process::vigil;

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// Copies `wasm` (and `toml`, when given) into `dir` as `NAME.wasm` and `NAME.toml`.
fn stage(dir: &Path, name: &str, wasm: &Path, toml: Option<&Path>) -> PathBuf {
    let staged = dir.join(format!("{name}.wasm"));
    std::fs::copy(wasm, &staged).expect("copy the plugin");
    if let Some(toml) = toml {
        std::fs::copy(toml, dir.join(format!("{name}.toml"))).expect("copy the grants");
    }
    staged
}

/// The plugin template of `examples/`, built, staged in `dir` with its `NAME.toml`.
fn stage_template(dir: &Path) -> PathBuf {
    stage(
        dir,
        "plugin-template",
        &vigil_test_support::plugin_file("plugin-template"),
        Some(&root().join("examples/plugin-template/plugin-template.toml")),
    )
}

/// A JSON string's text, or "" for anything else.
fn text_of(value: &serde_json::Value) -> &str {
    value.as_str().unwrap_or_default()
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(output: &Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn check(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Run {
    let mut command = vigil(dir);
    command
        .args(["plugin", "check"])
        .args(args)
        .env("RUST_LOG", "error")
        .env("VIGIL_CACHE_DIR", dir.join("cache"));
    for (name, value) in env {
        command.env(name, value);
    }
    Run::of(&command.output().expect("run vigil"))
}

#[test]
fn the_template_and_first_party_plugins_are_accepted_with_their_info_and_grants() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path();
    let template = stage_template(dir);
    let run = check(dir, &[template.to_str().expect("utf-8")], &[]);
    assert_eq!(run.code, Some(0), "{run}");
    for line in [
        format!("plugin:       {} (accepted)", template.display()),
        "name:         plugin-template".to_owned(),
        "contract:     vigil:plugin@0.1.0, world probe".to_owned(),
        "schemes:      http, https".to_owned(),
        "grants:       log, http".to_owned(),
        "parameters:   expected-status = 200".to_owned(),
    ] {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "no line {line:?}:\n{run}"
        );
    }

    // The first-party plugins, as they are built.
    for (name, schemes, grants) in [
        (
            "kubeconfig-file",
            "file",
            "credentials, exec-credentials, http",
        ),
        ("http", "http, https", "log, credentials, http"),
    ] {
        let file = vigil_test_support::plugin_file(name);
        let run = check(dir, &[file.to_str().expect("utf-8")], &[]);
        assert_eq!(run.code, Some(0), "{run}");
        assert!(
            run.stdout.contains(&format!("name:         {name}\n")),
            "{run}"
        );
        assert!(
            run.stdout.contains(&format!("schemes:      {schemes}\n")),
            "{run}"
        );
        assert!(
            run.stdout.contains(&format!("grants:       {grants}\n")),
            "{run}"
        );
    }

    // Without its NAME.toml a plugin loads with every grant denied, and says so.
    let bare_dir = dir.join("bare");
    std::fs::create_dir_all(&bare_dir).expect("mkdir");
    let bare = stage(
        &bare_dir,
        "http",
        &vigil_test_support::plugin_file("http"),
        None,
    );
    let run = check(dir, &[bare.to_str().expect("utf-8")], &[]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout
            .contains("http.toml is missing beside the file: every grant is denied"),
        "{run}"
    );
    assert!(run.stdout.contains("grants:       none\n"), "{run}");
}

#[test]
fn json_output_says_the_same_for_programs() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path();
    let template = stage_template(dir);
    let run = check(dir, &[template.to_str().expect("utf-8"), "-o", "json"], &[]);
    assert_eq!(run.code, Some(0), "{run}");
    let answer: serde_json::Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    assert_eq!(answer["accepted"], true, "{run}");
    assert_eq!(answer["file"], template.display().to_string(), "{run}");
    assert_eq!(answer["name"], "plugin-template", "{run}");
    assert_eq!(answer["contract"], "vigil:plugin@0.1.0", "{run}");
    assert_eq!(answer["world"], "probe", "{run}");
    assert_eq!(
        answer["schemes"],
        serde_json::json!(["http", "https"]),
        "{run}"
    );
    assert_eq!(
        answer["grants"],
        serde_json::json!(["log", "http"]),
        "{run}"
    );
    assert_eq!(answer["parameters"]["expected-status"], "200", "{run}");
    assert_eq!(answer["memory_mib"], 64, "{run}");
    assert!(
        text_of(&answer["manifest"]).ends_with("plugin-template.toml"),
        "{run}"
    );
    assert!(
        answer.get("probe").is_none(),
        "no --cluster, no probe: {run}"
    );

    // A refusal is an object too, with the engine's reason, and still exit code 4.
    let text = dir.join("not-a-component.wasm");
    std::fs::write(&text, "this is text, not wasm").expect("write");
    let run = check(dir, &[text.to_str().expect("utf-8"), "-o", "json"], &[]);
    assert_eq!(run.code, Some(4), "{run}");
    let answer: serde_json::Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    assert_eq!(answer["accepted"], false, "{run}");
    assert_eq!(answer["file"], text.display().to_string(), "{run}");
    assert!(
        text_of(&answer["reason"]).contains("is not a WebAssembly component"),
        "{run}"
    );
    assert!(
        !run.stdout.contains("vigil-plugin-check-"),
        "a private path leaked: {run}"
    );
}

#[test]
fn refused_files_are_named_with_the_engines_reason_and_exit_4() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path();
    let text = dir.join("not-a-component.wasm");
    std::fs::write(&text, "this is text, not wasm").expect("write");
    let bad_manifest_dir = dir.join("bad-manifest");
    std::fs::create_dir_all(&bad_manifest_dir).expect("mkdir");
    let bad_manifest = stage(
        &bad_manifest_dir,
        "http",
        &vigil_test_support::plugin_file("http"),
        None,
    );
    std::fs::write(bad_manifest_dir.join("http.toml"), "shell = true\n").expect("write");
    let cases = [
        (text, "is not a WebAssembly component".to_owned()),
        (
            stage(dir, "wrong-world", &vigil_test_support::plugin_file("wrong-world"), None),
            "does not target the probe or the audit world of vigil:plugin@0.1.0".to_owned(),
        ),
        (
            stage(dir, "future-version", &vigil_test_support::plugin_file("future-version"), None),
            "targets vigil:plugin@0.9.0, which this vigil does not support (it runs vigil:plugin@0.1.0)"
                .to_owned(),
        ),
        (
            stage(dir, "trap-info", &vigil_test_support::plugin_file("trap-info"), None),
            "did not answer info()".to_owned(),
        ),
        (
            bad_manifest,
            format!(
                "has an invalid manifest: {}: ",
                bad_manifest_dir.join("http.toml").display()
            ),
        ),
    ];
    for (file, reason) in cases {
        let run = check(dir, &[file.to_str().expect("utf-8")], &[]);
        assert_eq!(run.code, Some(4), "{}: {run}", file.display());
        let expected = format!("refused: plugin {} {reason}", file.display());
        assert!(
            run.stderr.contains(&expected),
            "expected {expected:?}:\n{run}"
        );
        assert!(run.stdout.is_empty(), "{run}");
        assert!(
            !run.stderr.contains("vigil-plugin-check-"),
            "a private path leaked: {run}"
        );
    }
    // A file that is not there, or not named NAME.wasm, is an error of the command.
    let run = check(
        dir,
        &[dir.join("absent.wasm").to_str().expect("utf-8")],
        &[],
    );
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("absent.wasm: cannot be read"), "{run}");
    let run = check(dir, &[dir.join("plugin.so").to_str().expect("utf-8")], &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("a plugin file is named NAME.wasm"),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_probed_once_through_the_plugin_and_the_database_is_unchanged() {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path();
    let kubeconfigs = dir.join("kubeconfigs");
    let written = fleet
        .write_kubeconfigs(&kubeconfigs, &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let cluster = &fleet.clusters()[0];
    let reference = format!("{}#{}", written[0].path.display(), written[0].context);

    // A database that knows the cluster under another name than its context.
    let database = dir.join("vigil.db");
    let store = Store::open_path(&database).await.expect("store");
    store
        .register_cluster(
            "registered",
            &cluster.server_url(),
            &reference,
            &PolicyOverrides::default(),
            wall_clock(),
        )
        .await
        .expect("register");
    store.close().await;
    let before = std::fs::read(&database).expect("read the database");
    let database_url = format!("sqlite://{}", database.display());
    let sources = [
        ("DATABASE_URL", Path::new(&database_url)),
        ("KUBECONFIG_DIR", kubeconfigs.as_path()),
    ];

    let plugin = vigil_test_support::plugin_file("kubeconfig-file");
    let run = check(
        dir,
        &[plugin.to_str().expect("utf-8"), "--cluster", "registered"],
        &sources,
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("(accepted)"), "{run}");
    assert!(
        run.stdout
            .contains("cluster:  registered (from the database)"),
        "{run}"
    );
    assert!(run.stdout.contains("outcome:  healthy"), "{run}");
    assert!(run.stdout.contains("Nothing was recorded"), "{run}");
    assert_eq!(
        cluster.log().entries_for("/api/v1/namespaces").len(),
        1,
        "one probe reached the cluster"
    );
    assert_eq!(
        std::fs::read(&database).expect("read the database"),
        before,
        "the database is unchanged"
    );
    // The same for programs: one JSON object, the plugin and the probe.
    let run = check(
        dir,
        &[
            plugin.to_str().expect("utf-8"),
            "--cluster",
            "registered",
            "-o",
            "json",
        ],
        &sources,
    );
    assert_eq!(run.code, Some(0), "{run}");
    let answer: serde_json::Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    assert_eq!(answer["accepted"], true, "{run}");
    assert_eq!(answer["name"], "kubeconfig-file", "{run}");
    assert_eq!(answer["probe"]["cluster"], "registered", "{run}");
    assert_eq!(answer["probe"]["found_in"], "the database", "{run}");
    assert_eq!(answer["probe"]["outcome"], "healthy", "{run}");
    assert_eq!(
        answer["probe"]["probed_by"]["plugin"], "kubeconfig-file",
        "{run}"
    );
    assert_eq!(answer["probe"]["applied"], false, "{run}");
    assert_eq!(cluster.log().entries_for("/api/v1/namespaces").len(), 2);
    assert_eq!(
        std::fs::read(&database).expect("read the database"),
        before,
        "the database is still unchanged"
    );
    // The template accepts only http(s) references: the kubeconfig context found by
    // discovery is not routed to it, and the command says so with exit code 3.
    let template = stage_template(dir);
    let run = check(
        dir,
        &[
            template.to_str().expect("utf-8"),
            "--cluster",
            cluster.name(),
        ],
        &sources,
    );
    assert_eq!(run.code, Some(3), "{run}");
    assert!(
        run.stdout
            .contains(&format!("cluster:  {} (from kubeconfig", cluster.name())),
        "{run}"
    );
    assert!(run.stdout.contains("outcome:  not-probeable"), "{run}");
    assert!(run.stdout.contains("reason:   no-plugin"), "{run}");
    assert_eq!(
        cluster.log().entries_for("/api/v1/namespaces").len(),
        2,
        "no third probe"
    );

    // An unknown cluster is an error of the command.
    let run = check(
        dir,
        &[plugin.to_str().expect("utf-8"), "--cluster", "nope"],
        &sources,
    );
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("no cluster named `nope`"), "{run}");
    assert_eq!(
        std::fs::read(&database).expect("read the database"),
        before,
        "the database is unchanged"
    );
    let store = Store::open_path(&database).await.expect("store");
    let record = store.cluster("registered").await.expect("cluster");
    assert!(
        record.last_outcome.is_none(),
        "no outcome recorded: {record:?}"
    );
    store.close().await;
}

/// A component instantiating three times a core module that defines one memory: three
/// memories, one more than a component may have.
const THREE_MEMORIES: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00, // a component
    0x01, 0x0d, // its core module, 13 bytes:
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // a core module
    0x05, 0x03, 0x01, 0x00, 0x01, // one memory of one page
    0x02, 0x0a, 0x03, // three core instances of it
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

#[test]
fn plugin_check_refuses_a_component_past_the_pool_s_limits_naming_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = dir.path().join("three-memories.wasm");
    std::fs::write(&wasm, THREE_MEMORIES).expect("write");
    let output = vigil(dir.path())
        .args(["plugin", "check"])
        .arg(&wasm)
        .env("VIGIL_CACHE_DIR", dir.path().join("cache"))
        .output()
        .expect("run vigil plugin check");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(4), "{printed}");
    assert!(
        printed.contains(
            "it does not fit vigil's instance pool: it needs 3 memories; vigil allows 2 per component"
        ),
        "{printed}"
    );
}
