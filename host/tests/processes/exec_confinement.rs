//! What a kubeconfig can make vigil do through an exec command, end to end: nothing it does
//! not allow. A kubeconfig's `env` and arguments cannot steer an allowed program into
//! running code of the kubeconfig's author; an allowed program that turns hostile reads and
//! writes nothing of vigil's (Landlock); what a command leaves behind, even in a session of
//! its own, is killed and reaped, also when vigil is PID 1; files a kubeconfig names are
//! read only where the operator allows; the drain audit reaches exec clusters too.
//!
//! The commands are the test kit (`tests/exec-kit`) and a bash wrapper written here, in the
//! test's own directory; every address is on loopback.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use vigil_decision::ClusterStatus;
use vigil_test_support::wait;

use crate::exec_credentials::{Exec, KIT_ENV, Kit, Kubeconfig, Vigil, fleet, plugin_dir, text};
use crate::process;

/// A token the fake clusters accept, as the bash wrapper below prints it.
const WRAPPER_TOKEN: &str = "kit-token-1";

/// The processes whose command line is exactly `words` (zombies have none, and are not
/// found: see [`children`]).
fn processes_running(words: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

/// The children of `parent` (zombies included), with their state letter.
fn children(parent: u32) -> Vec<(u32, char)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let after = &stat[stat.rfind(')')? + 2..];
            let mut fields = after.split_whitespace();
            let state = fields.next()?.chars().next()?;
            let ppid: u32 = fields.next()?.parse().ok()?;
            (ppid == parent).then_some((pid, state))
        })
        .collect()
}

/// A number of seconds no other test sleeps for: the `sleep` a command leaves behind is
/// found by its command line.
fn unique_seconds(salt: u32) -> String {
    (80_000 + (std::process::id() % 5_000) * 2 + salt).to_string()
}

/// The BASH_ENV attack, and its variants: an allowed bash wrapper that only prints a credential,
/// and kubeconfigs whose `env` sets `BASH_ENV` (expanded by bash at start), `NODE_OPTIONS`
/// or `PYTHONPATH` to run the author's code, or whose arguments go beyond the allowed entry
/// (a flag that redirects where the tool talks). None runs; each cluster is not probeable,
/// naming the setting that would allow it, and nothing is written or read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_cannot_steer_an_allowed_program_into_running_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let fleet = fleet(5, 1).await;
    let wrapper = kit.root.join("bin/w");
    std::fs::create_dir_all(wrapper.parent().unwrap()).unwrap();
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/bash\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{WRAPPER_TOKEN}\"}}}}'\n"
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let allow = kit.root.join("exec-allow-wrapper");
    std::fs::write(
        &allow,
        format!(
            "{}\n{} get-token --cluster-name <name>\n",
            text(&wrapper),
            kit.program()
        ),
    )
    .unwrap();
    let stolen = kit.root.join("stolen");
    let id = kit.root.join("id");
    let kubeconfigs = kit.root.join("kubeconfigs");
    let [bash_env, node, python, endpoint, words] = fleet.clusters() else {
        panic!("five clusters");
    };
    let steered = [
        (
            "bash-env",
            bash_env,
            Exec::v1beta1(text(&wrapper)).env(
                "BASH_ENV",
                format!(
                    "$(cp /proc/$PPID/environ {}; id > {})",
                    text(&stolen),
                    text(&id)
                ),
            ),
            "VIGIL_EXEC_KUBECONFIG_ENV",
        ),
        (
            "node-options",
            node,
            Exec::v1beta1(text(&wrapper)).env(
                "NODE_OPTIONS",
                format!("--require={}", text(&kit.root.join("evil.js"))),
            ),
            "VIGIL_EXEC_KUBECONFIG_ENV",
        ),
        (
            "pythonpath",
            python,
            Exec::v1beta1(text(&wrapper)).env("PYTHONPATH", text(&kit.root)),
            "VIGIL_EXEC_KUBECONFIG_ENV",
        ),
        (
            "endpoint",
            endpoint,
            Exec::v1beta1(kit.program())
                .args(&[
                    "get-token",
                    "--cluster-name",
                    "endpoint",
                    "--endpoint-url",
                    "http://127.0.0.1:9",
                ])
                .counted(&kit, "endpoint"),
            "VIGIL_EXEC_ALLOW_FILE",
        ),
        (
            "other-words",
            words,
            Exec::v1beta1(kit.program())
                .args(&["s3", "cp", "/var/run/secrets/token", "s3://b/k"])
                .counted(&kit, "other-words"),
            "VIGIL_EXEC_ALLOW_FILE",
        ),
    ];
    for (name, cluster, exec, _) in &steered {
        Kubeconfig::default()
            .single(name, cluster, exec)
            .write(&kubeconfigs.join(format!("{name}.yaml")));
    }
    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[
            ("VIGIL_EXEC_ALLOW_FILE", text(&allow)),
            kit.dir(),
            KIT_ENV,
            ("VIGIL_API_TOKEN", "secret-secret-1234"),
        ],
    )
    .await;
    for (name, _, _, setting) in &steered {
        vigil.wait_exec_refused(name, &[setting]).await;
    }
    assert!(
        !stolen.exists(),
        "BASH_ENV ran: vigil's environment was copied"
    );
    assert!(!id.exists(), "BASH_ENV ran the author's command");
    for name in ["endpoint", "other-words"] {
        assert!(
            !kit.out(&format!("{name}.runs")).exists(),
            "{name}: an argument outside its entry, and the command ran"
        );
    }
    for (name, cluster, ..) in &steered {
        assert_eq!(
            cluster.log().counts().connections,
            0,
            "{name}: nothing was run, and nothing was dialled"
        );
    }
    vigil.stop().await;
    fleet.shutdown().await;
}

/// What the hostile kit tries, from inside an allowed command: vigil's environment, its
/// token file, its database (read, and opened for writing), its compiled-plugin cache and
/// plugin directory (a file planted in each), another kubeconfig.
fn hostile_targets(vigil_pid: u32, kit: &Kit, cache: &Path, plugins: &Path) -> Vec<String> {
    vec![
        format!("read /proc/{vigil_pid}/environ"),
        format!("read {}", text(&kit.root.join("tokens"))),
        format!("read {}", text(&kit.root.join("vigil.db"))),
        format!("append {}", text(&kit.root.join("vigil.db"))),
        format!("create {}", text(cache)),
        format!("create {}", text(plugins)),
        format!(
            "read {}",
            text(&kit.root.join("kubeconfigs/bystander.yaml"))
        ),
    ]
}

/// Starts vigil with an allowed hostile command (the kit, told what to try once vigil's pid
/// is known) and waits for its report: one line per target.
async fn hostile_run(landlock: bool) -> (Vec<String>, Kit, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let fleet = fleet(2, 1000).await;
    let [hostile, bystander] = fleet.clusters() else {
        panic!("two clusters");
    };
    let kubeconfigs = kit.root.join("kubeconfigs");
    let mode = kit.out("hostile.mode");
    let targets = kit.out("hostile.targets");
    let report = kit.out("hostile.report");
    Kubeconfig::default()
        .single(
            "hostile",
            hostile,
            &Exec::v1(kit.program())
                .counted(&kit, "hostile")
                .env("EXEC_KIT_MODE_FILE", text(&mode))
                .env("EXEC_KIT_TARGETS", text(&targets))
                .env("EXEC_KIT_REPORT", text(&report))
                // Run again every two seconds or so: the mode changes once vigil runs.
                .env("EXEC_KIT_LIFETIME", "3"),
        )
        .write(&kubeconfigs.join("hostile.yaml"));
    std::fs::write(
        kubeconfigs.join("bystander.yaml"),
        bystander
            .kubeconfig(vigil_fake_kube::KubeconfigShape::Token)
            .unwrap(),
    )
    .unwrap();
    let tokens = kit.root.join("tokens");
    std::fs::write(&tokens, "reader:reader-token-0123456789abcdef\n").unwrap();
    let plugins = plugin_dir(&kit.root, &["kubeconfig-file"]);
    let cache = kit.root.join("cache");
    let process = process::serve(&kit.root)
        .kubeconfigs(&kubeconfigs)
        .plugins(&plugins)
        .cache(&cache)
        .policy(1, 5, 2)
        .envs([
            kit.allowed(),
            kit.dir(),
            KIT_ENV,
            ("VIGIL_API_TOKENS_FILE", text(&tokens)),
            ("VIGIL_EXEC_LANDLOCK", if landlock { "on" } else { "off" }),
        ])
        .until_discovered()
        .start()
        .await;
    std::fs::write(
        &targets,
        hostile_targets(process.pid(), &kit, &cache, &plugins).join("\n") + "\n",
    )
    .unwrap();
    std::fs::write(&mode, "hostile").unwrap();
    let expected = hostile_targets(process.pid(), &kit, &cache, &plugins).len();
    let lines = wait::until(
        "the hostile command reported every attempt",
        Duration::from_secs(60),
        || process.tail(),
        || {
            let lines: Vec<String> = std::fs::read_to_string(&report)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            (lines.len() >= expected).then_some(lines)
        },
    );
    process.stop();
    fleet.shutdown().await;
    (lines, kit, dir)
}

/// An allowed program that turns hostile (the kit's `hostile` mode) fails at every attempt
/// on what is vigil's: its environment under /proc, its token file, its database, its
/// compiled-plugin cache and plugin directory, another cluster's kubeconfig. Without
/// Landlock (`VIGIL_EXEC_LANDLOCK=off`) the same attempts succeed where vigil's user may:
/// what the first half shows is Landlock's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_command_that_turns_hostile_reads_and_writes_nothing_of_vigils() {
    assert!(
        vigil_plugin_host::confine::landlock_abi().is_some(),
        "this kernel offers no Landlock, which this test shows at work"
    );
    let (lines, kit, _dir) = hostile_run(true).await;
    let allowed: Vec<&String> = lines
        .iter()
        .filter(|line| !line.ends_with(" denied"))
        .collect();
    assert!(allowed.is_empty(), "allowed under Landlock: {allowed:#?}");
    assert!(!kit.root.join("cache/exec-kit-planted").exists());
    assert!(!kit.root.join("plugins.d/exec-kit-planted").exists());

    let (lines, kit, _dir) = hostile_run(false).await;
    for target in ["tokens", "vigil.db", "kubeconfigs/bystander.yaml"] {
        let read = format!("read {} ok", text(&kit.root.join(target)));
        assert!(
            lines.contains(&read),
            "without Landlock: {read}: {lines:#?}"
        );
    }
    assert!(
        kit.root.join("cache/exec-kit-planted").exists(),
        "without Landlock the command can plant a file in the cache: {lines:#?}"
    );
}

/// A command whose child leaves its process group and session (`setsid sleep`): the child
/// is killed and reaped once the command answered, and vigil is left with no child of its
/// own (no launcher, no zombie).
async fn escape_is_ended(wrap_as_pid_one: bool) {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let fleet = fleet(1, 5).await;
    let seconds = unique_seconds(u32::from(wrap_as_pid_one));
    let kubeconfigs = kit.root.join("kubeconfigs");
    Kubeconfig::default()
        .single(
            "escape",
            &fleet.clusters()[0],
            &Exec::v1(kit.program())
                .counted(&kit, "escape")
                .env("EXEC_KIT_MODE", "escape")
                .env("EXEC_KIT_ESCAPE_SECONDS", &seconds),
        )
        .write(&kubeconfigs.join("escape.yaml"));
    let mut serve = process::serve(&kit.root)
        .kubeconfigs(&kubeconfigs)
        .plugins(plugin_dir(&kit.root, &["kubeconfig-file"]))
        .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec-credentials-cache"))
        .policy(1, 5, 2)
        .envs([kit.allowed(), kit.dir(), KIT_ENV]);
    if wrap_as_pid_one {
        // vigil as PID 1 of a PID namespace of its own, as in the container image: every
        // orphan of the namespace would be its child.
        // If unshare dies, vigil gets SIGTERM (--kill-child).
        serve = serve.wrapped(
            "unshare",
            ["--fork", "--pid", "--mount-proc", "--kill-child=TERM", "--"],
        );
    }
    let process = serve.until_discovered().start().await;
    let vigil_pid = if wrap_as_pid_one {
        // `unshare --fork` waits for vigil, its only child.
        wait::until(
            "vigil runs under unshare",
            Duration::from_secs(10),
            String::new,
            || match children(process.pid()).as_slice() {
                [(pid, _)] => Some(*pid),
                _ => None,
            },
        )
    } else {
        process.pid()
    };
    let store =
        vigil_store::Store::open(&format!("sqlite://{}", kit.root.join("vigil.db").display()))
            .await
            .unwrap();
    wait::until_async(
        "escape is ONLINE",
        Duration::from_secs(60),
        || process.tail(),
        async || {
            let cluster = store.cluster("escape").await.ok()?;
            (cluster.health.status == ClusterStatus::Online).then_some(())
        },
    )
    .await;
    let runs = std::fs::read_to_string(kit.out("escape.runs")).unwrap_or_default();
    assert_eq!(runs.lines().count(), 1, "the credential is kept: one run");
    wait::until(
        "the setsid child is gone and vigil has no child left",
        Duration::from_secs(20),
        || {
            format!(
                "sleep {seconds}: {:?}; vigil's children: {:?}",
                processes_running(&["sleep", &seconds]),
                children(vigil_pid)
            )
        },
        || {
            (processes_running(&["sleep", &seconds]).is_empty() && children(vigil_pid).is_empty())
                .then_some(())
        },
    );
    store.close().await;
    if wrap_as_pid_one {
        // `unshare --fork` ignores SIGTERM while it waits: vigil is told, unshare follows.
        let status = std::process::Command::new("kill")
            .args(["-TERM", &vigil_pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    process.stop();
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_leaves_behind_is_killed_and_reaped() {
    escape_is_ended(false).await;
}

/// The same with vigil as PID 1 (a PID namespace: root).
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_leaves_behind_is_killed_and_reaped_with_vigil_as_pid_one() {
    assert!(
        rustix::process::geteuid().is_root(),
        "a PID namespace of vigil's own (unshare --pid) needs root: run the system tests as root"
    );
    escape_is_ended(true).await;
}

/// vigil refuses to start when one of its files lies in a tree an exec command may read:
/// here its database, inside a directory granted by VIGIL_EXEC_READ. Without Landlock the
/// same settings start (nothing is granted then: the README says what holds).
#[test]
fn vigil_refuses_to_start_when_a_command_could_read_one_of_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let granted = kit.root.join("granted");
    std::fs::create_dir_all(&granted).unwrap();
    let mut refused = process::serve(&kit.root)
        .kubeconfigs(kit.root.join("kubeconfigs"))
        .database(format!("sqlite://{}", text(&granted.join("vigil.db"))))
        .envs([
            kit.allowed(),
            kit.dir(),
            ("VIGIL_EXEC_READ", text(&granted)),
        ])
        .spawn();
    let status = refused.wait_exit(Duration::from_secs(30));
    let log = refused.log();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("DATABASE_URL") && log.contains(text(&granted)) && log.contains("Landlock"),
        "the refusal names the setting, the tree and why: {log}"
    );
}

/// The token-file attack: a kubeconfig whose `tokenFile` names a one-line secret outside its own
/// directory and `server` a listener of the author's: nothing is dialled, and the cluster is
/// not probeable naming the setting that would allow the file. With the directory allowed
/// (VIGIL_KUBECONFIG_CREDENTIAL_DIRS) the same kubeconfig probes ONLINE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_a_kubeconfig_names_outside_its_directory_is_never_read_nor_sent() {
    let fleet = fleet(1, 1).await;
    let cluster = &fleet.clusters()[0];
    cluster.add_token("one-line-secret-42", vigil_fake_kube::User::admin());
    for allowed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let secrets = root.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(secrets.join("s"), "one-line-secret-42\n").unwrap();
        let kubeconfigs = root.join("kubeconfigs");
        std::fs::create_dir_all(&kubeconfigs).unwrap();
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "m1",
            "clusters": [{ "name": "m1", "cluster": {
                "server": cluster.server_url(),
                "certificate-authority-data": STANDARD.encode(cluster.ca_pem()),
            } }],
            "users": [{ "name": "m1", "user": { "tokenFile": text(&secrets.join("s")) } }],
            "contexts": [{ "name": "m1", "context": { "cluster": "m1", "user": "m1" } }],
        });
        std::fs::write(kubeconfigs.join("m1.yaml"), config.to_string()).unwrap();
        cluster.log().clear();
        let mut env: Vec<(&str, &str)> = Vec::new();
        if allowed {
            env.push(("VIGIL_KUBECONFIG_CREDENTIAL_DIRS", text(&secrets)));
        }
        let vigil = Vigil::start(
            &root,
            &kubeconfigs,
            &plugin_dir(&root, &["kubeconfig-file", "pdb-audit"]),
            &env,
        )
        .await;
        if allowed {
            vigil.wait_online("m1").await;
        } else {
            let record = vigil
                .wait_for(
                    "m1",
                    "not-probeable (reference-broken)",
                    Duration::from_secs(30),
                    |c| {
                        c.last_outcome.as_deref() == Some("not-probeable")
                            && c.last_reason_class.as_deref() == Some("reference-broken")
                    },
                )
                .await;
            let reason = record.last_reason.unwrap_or_default();
            assert!(
                reason.contains("VIGIL_KUBECONFIG_CREDENTIAL_DIRS") && reason.contains("tokenFile"),
                "{reason}"
            );
            assert!(!reason.contains("one-line-secret-42"), "{reason}");
            assert_eq!(
                cluster.log().counts().connections,
                0,
                "the author's server was dialled"
            );
        }
        vigil.stop().await;
    }
    fleet.shutdown().await;
}

/// The drain audit reaches a cluster whose user gets its credential from an exec command:
/// the embedded pdb-audit is granted `exec-credentials` like kubeconfig-file, and lists the
/// cluster's budgets with the kit's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_audit_runs_for_an_exec_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let fleet = fleet(1, 5).await;
    let kubeconfigs = kit.root.join("kubeconfigs");
    Kubeconfig::default()
        .single(
            "audited",
            &fleet.clusters()[0],
            &Exec::v1(kit.program()).counted(&kit, "audited"),
        )
        .write(&kubeconfigs.join("audited.yaml"));
    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file", "pdb-audit"]),
        &[kit.allowed(), kit.dir(), KIT_ENV],
    )
    .await;
    vigil.wait_online("audited").await;
    let audit = vigil.wait_audit("audited", Duration::from_secs(60)).await;
    assert!(
        audit.failure.is_none(),
        "the audit failed: {:?}",
        audit.failure
    );
    assert!(
        audit
            .kinds_read
            .iter()
            .any(|kind| kind == "poddisruptionbudgets"),
        "{:?}",
        audit.kinds_read
    );
    let budgets = fleet.clusters()[0]
        .log()
        .entries_for("/apis/policy/v1/poddisruptionbudgets");
    assert!(!budgets.is_empty(), "the audit listed the budgets");
    vigil.stop().await;
    fleet.shutdown().await;
}
