//! Exec credentials end to end: `vigil serve` runs a kubeconfig user's `exec` command itself
//! — the test command `tests/exec-kit`, steered by the kubeconfig's `env` — under the
//! operator's allow-list, and probes the fake Kubernetes API server with what it printed.
//! Every address is on loopback, and no real credential plugin is ever named or run: every
//! command is the kit, copied into the test's own directory.
//!
//! Each test starts one `vigil serve` (the Secret test one per setting) with several
//! clusters, each covering a case, and follows them in the database, in vigil's log and in
//! the fake servers' request logs. The log is at trace level (but Cranelift's) and is
//! scanned, with the API's answers and the database's bytes, for every token and key the
//! command printed.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use vigil_decision::{AppStatus, ClusterStatus, ConditionType};
use vigil_domain::probe::wall_clock;
use vigil_fake_kube::{
    AddressPlan, AuthUsed, ClusterHandle, Fixtures, Fleet, KubeconfigShape, User,
};
use vigil_store::{AuditRecord, ClusterRecord, Store};
use vigil_test_support::wait;

use crate::process;
use vigil_test_support as support;

use process::{TRACE, log_lines, message, read_log, vigil};

const V1: &str = "client.authentication.k8s.io/v1";
const V1BETA1: &str = "client.authentication.k8s.io/v1beta1";
const V1ALPHA1: &str = "client.authentication.k8s.io/v1alpha1";

/// What every token the kit prints starts with (`kit-token-N`); no kubeconfig names it, so
/// it appearing anywhere vigil writes is a leak.
const TOKEN_PREFIX: &str = "kit-token-";

/// The `PATH` vigil gives a credential command.
const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The names of the kit's variables: the `env` entries a kubeconfig may set
/// (`VIGIL_EXEC_KUBECONFIG_ENV`).
pub(crate) const KIT_ENV: (&str, &str) = (
    "VIGIL_EXEC_KUBECONFIG_ENV",
    "EXEC_KIT_MODE,EXEC_KIT_MODE_FILE,EXEC_KIT_COUNTER,EXEC_KIT_TOKEN_PREFIX,EXEC_KIT_LIFETIME,\
     EXEC_KIT_API_VERSION,EXEC_KIT_INFO_OUT,EXEC_KIT_ENV_OUT,EXEC_KIT_ARGS_OUT,EXEC_KIT_STDIN_OUT,\
     EXEC_KIT_DELAY,EXEC_KIT_SPANS,EXEC_KIT_CERT_FILE,EXEC_KIT_KEY_FILE,EXEC_KIT_PID_FILE,\
     EXEC_KIT_TOKEN,EXEC_KIT_ESCAPE_SECONDS,EXEC_KIT_TARGETS,EXEC_KIT_REPORT",
);

/// The kit installed in a test's directory.
pub(crate) struct Kit {
    /// The test's directory with every link resolved: the allow-list holds real paths.
    pub(crate) root: PathBuf,
    /// `ROOT/kit/exec-kit`, the command the tests allow.
    command: PathBuf,
    /// `ROOT/exec-allow`, an allow-list file (`VIGIL_EXEC_ALLOW_FILE`): the kit without
    /// arguments, or as `get-token --cluster-name <name>`.
    allow: PathBuf,
    /// `ROOT/exec`, the commands' directory (`VIGIL_EXEC_DIR`): under Landlock they write
    /// nowhere else, so the kit's files for the test are in its home (`exec/home/out`).
    pub(crate) exec: PathBuf,
}

impl Kit {
    pub(crate) fn install(dir: &Path) -> Self {
        use std::os::unix::fs::DirBuilderExt as _;
        let root = dir.canonicalize().unwrap();
        let command = root.join("kit/exec-kit");
        // This checkout's kit (the path is the one the test was built from).
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/exec-kit/exec-kit");
        copy_executable(&source, &command);
        let exec = root.join("exec");
        // vigil refuses a commands' directory other users may enter.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(exec.join("home/out"))
            .unwrap();
        let allow = root.join("exec-allow");
        let kit = command.display();
        std::fs::write(
            &allow,
            format!("{kit}\n{kit} get-token --cluster-name <name>\n"),
        )
        .unwrap();
        Self {
            root,
            command,
            allow,
            exec,
        }
    }

    /// `VIGIL_EXEC_ALLOW_FILE`, naming [`Kit::allow`].
    pub(crate) fn allowed(&self) -> (&'static str, &str) {
        ("VIGIL_EXEC_ALLOW_FILE", text(&self.allow))
    }

    /// `VIGIL_EXEC_DIR`, naming [`Kit::exec`].
    pub(crate) fn dir(&self) -> (&'static str, &str) {
        ("VIGIL_EXEC_DIR", text(&self.exec))
    }

    /// A copy of the kit at `relative`, which no allow-list names.
    fn copy(&self, relative: &str) -> PathBuf {
        let path = self.root.join(relative);
        copy_executable(&self.command, &path);
        path
    }

    /// A symbolic link at `relative` to `target`.
    fn link(&self, relative: &str, target: &Path) -> PathBuf {
        let path = self.root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, &path).unwrap();
        path
    }

    /// A file the kit writes for the test (`exec/home/out/NAME`).
    pub(crate) fn out(&self, name: &str) -> PathBuf {
        self.exec.join("home/out").join(name)
    }

    /// The path as a string, for kubeconfigs and settings.
    pub(crate) fn program(&self) -> &str {
        text(&self.command)
    }
}

fn copy_executable(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub(crate) fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A kubeconfig user's `exec` section.
#[derive(Clone)]
pub(crate) struct Exec {
    api_version: &'static str,
    command: String,
    interactive_mode: Option<&'static str>,
    provide_cluster_info: bool,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Exec {
    /// `v1beta1`, which may leave `interactiveMode` out.
    pub(crate) fn v1beta1(command: &str) -> Self {
        Self {
            api_version: V1BETA1,
            command: command.to_owned(),
            interactive_mode: None,
            provide_cluster_info: false,
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// `v1`, which must set `interactiveMode` (`Never` here).
    pub(crate) fn v1(command: &str) -> Self {
        Self {
            api_version: V1,
            interactive_mode: Some("Never"),
            ..Self::v1beta1(command)
        }
    }

    pub(crate) fn env(mut self, name: &str, value: impl AsRef<str>) -> Self {
        self.env.push((name.to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Counts its runs in `kit.out(NAME.runs)`.
    /// The command's arguments.
    pub(crate) fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|arg| (*arg).to_owned()).collect();
        self
    }

    pub(crate) fn counted(self, kit: &Kit, name: &str) -> Self {
        self.env("EXEC_KIT_COUNTER", text(&kit.out(&format!("{name}.runs"))))
    }

    fn json(&self) -> Value {
        let mut exec = json!({
            "apiVersion": self.api_version,
            "command": self.command,
            "args": self.args,
            "env": self.env.iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>(),
            "provideClusterInfo": self.provide_cluster_info,
        });
        if let Some(mode) = self.interactive_mode {
            exec["interactiveMode"] = mode.into();
        }
        exec
    }
}

/// A kubeconfig, written as JSON (which is YAML).
#[derive(Default)]
pub(crate) struct Kubeconfig {
    clusters: Vec<Value>,
    users: Vec<Value>,
    contexts: Vec<Value>,
}

impl Kubeconfig {
    /// A cluster entry for the fake cluster, with its CA; `exec_config` becomes its
    /// `client.authentication.k8s.io/exec` extension.
    fn cluster(mut self, name: &str, cluster: &ClusterHandle, exec_config: Option<Value>) -> Self {
        let mut entry = json!({
            "server": cluster.server_url(),
            "certificate-authority-data": STANDARD.encode(cluster.ca_pem()),
        });
        if let Some(config) = exec_config {
            entry["extensions"] =
                json!([{ "name": "client.authentication.k8s.io/exec", "extension": config }]);
        }
        self.clusters
            .push(json!({ "name": name, "cluster": entry }));
        self
    }

    fn user(mut self, name: &str, exec: &Exec) -> Self {
        self.users
            .push(json!({ "name": name, "user": { "exec": exec.json() } }));
        self
    }

    fn context(mut self, name: &str, cluster: &str, user: &str) -> Self {
        self.contexts
            .push(json!({ "name": name, "context": { "cluster": cluster, "user": user } }));
        self
    }

    /// One context named `name`, with a cluster entry and a user of its own.
    pub(crate) fn single(self, name: &str, cluster: &ClusterHandle, exec: &Exec) -> Self {
        self.cluster(name, cluster, None)
            .user(name, exec)
            .context(name, name, name)
    }

    fn render(&self) -> String {
        serde_json::to_string_pretty(&json!({
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": self.contexts[0]["name"],
            "clusters": self.clusters,
            "users": self.users,
            "contexts": self.contexts,
        }))
        .unwrap()
    }

    pub(crate) fn write(&self, path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, self.render()).unwrap();
    }
}

/// A fleet of `count` clusters on loopback, each accepting the kit's tokens
/// `kit-token-1`…`kit-token-{tokens}` as its administrator's.
pub(crate) async fn fleet(count: usize, tokens: usize) -> Fleet {
    let fleet = Fleet::builder()
        .clusters(count)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    for cluster in fleet.clusters() {
        for n in 1..=tokens {
            cluster.add_token(format!("{TOKEN_PREFIX}{n}"), User::admin());
        }
    }
    fleet
}

/// A plugin directory `dir/plugins.d` with the built first-party plugins `names` and their
/// `NAME.toml` grants.
pub(crate) fn plugin_dir(dir: &Path, names: &[&str]) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).unwrap();
    for name in names {
        for file in [format!("{name}.wasm"), format!("{name}.toml")] {
            std::fs::copy(support::first_party_dir().join(&file), plugins.join(&file)).unwrap();
        }
    }
    plugins
}

/// The kit's runs recorded in a counter file: (run, seconds since the epoch).
fn runs(path: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[0].parse().unwrap(), fields[1].parse().unwrap())
        })
        .collect()
}

/// Whether a process runs (a zombie, dead but not yet reaped, does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Waits up to `within` for every process of `started` to be gone (or a zombie), and
/// fails naming those left, which it kills.
async fn assert_all_gone(started: &[u32], within: Duration, what: &str) {
    let _cleanup = KillLeft(started);
    let left = || -> Vec<u32> {
        started
            .iter()
            .copied()
            .filter(|pid| running(*pid))
            .collect()
    };
    wait::until_async(
        &format!("every process of {what} is gone"),
        within,
        || {
            format!(
                "processes of {what} still run past the time limit: {:?} of {started:?}",
                left()
            )
        },
        async || left().is_empty().then_some(()),
    )
    .await;
}

/// Kills, when dropped, the processes of its list that still run: the kit's own
/// processes, cleaned up after a failure as after a success.
struct KillLeft<'a>(&'a [u32]);

impl Drop for KillLeft<'_> {
    fn drop(&mut self) {
        for pid in self.0.iter().filter(|pid| running(**pid)) {
            // It may have ended since: a failed kill is no failure.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// The requests a fake cluster answered, with the credentials they carried.
fn auth_seen(cluster: &ClusterHandle) -> Vec<(AuthUsed, Option<u16>)> {
    cluster
        .log()
        .entries()
        .into_iter()
        .map(|r| (r.auth, r.status))
        .collect()
}

/// A running `vigil serve` with its own database and log files, and the database open.
pub(crate) struct Vigil {
    process: process::Vigil,
    store: Store,
}

impl Vigil {
    /// Starts vigil on the kubeconfigs of `kubeconfigs` with the plugins of `plugins` (1 s
    /// interval, 5 s timeout, threshold 2) and `env`, and waits for its first discovery.
    pub(crate) async fn start(
        dir: &Path,
        kubeconfigs: &Path,
        plugins: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        std::fs::create_dir_all(kubeconfigs).unwrap();
        let process = process::serve(dir)
            .kubeconfigs(kubeconfigs)
            .plugins(plugins)
            // Shared by the tests of this file: each plugin is compiled once per build.
            .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec-credentials-cache"))
            .policy(1, 5, 2)
            .json_log(TRACE)
            .envs(env.iter().copied())
            .stdout_file(dir.join("vigil.out"))
            .until_discovered()
            .start()
            .await;
        let store = Store::open(&format!("sqlite://{}", dir.join("vigil.db").display()))
            .await
            .unwrap();
        Self { process, store }
    }

    /// Where its REST API listens.
    fn api(&self) -> SocketAddr {
        self.process.api()
    }

    async fn cluster(&self, name: &str) -> ClusterRecord {
        self.store.cluster(name).await.unwrap()
    }

    /// Waits up to `within` until `check` holds for cluster `name`; its record then.
    pub(crate) async fn wait_for(
        &self,
        name: &str,
        what: &str,
        within: Duration,
        check: impl Fn(&ClusterRecord) -> bool,
    ) -> ClusterRecord {
        let seen = RefCell::new(String::new());
        wait::until_async(
            &format!("{name} is {what}"),
            within,
            || format!("{name} is now {}\n{}", seen.borrow(), self.process.tail()),
            async || {
                let cluster = self.cluster(name).await;
                *seen.borrow_mut() = format!(
                    "{:?}, last {:?} ({:?}: {:?}), conditions {:?}",
                    cluster.health.status,
                    cluster.last_outcome,
                    cluster.last_reason_class,
                    cluster.last_reason,
                    cluster.health.conditions,
                );
                check(&cluster).then_some(cluster)
            },
        )
        .await
    }

    /// Waits up to `within` until cluster `name` has an audit, or a failed one; that audit.
    pub(crate) async fn wait_audit(&self, name: &str, within: Duration) -> AuditRecord {
        wait::until_async(
            &format!("{name} is audited"),
            within,
            || self.process.tail(),
            async || {
                let audit = self.store.audit(name).await.ok()?;
                (audit.audited_at.is_some() || audit.failure.is_some()).then_some(audit)
            },
        )
        .await
    }

    pub(crate) async fn wait_online(&self, name: &str) {
        self.wait_for(name, "ONLINE", Duration::from_secs(30), |c| {
            c.health.status == ClusterStatus::Online
        })
        .await;
    }

    /// Waits until the last outcome of `name` is `not-probeable` (`exec-credentials`);
    /// checks that its message holds each of `words` and that the cluster's status and
    /// failure count are untouched by it.
    pub(crate) async fn wait_exec_refused(&self, name: &str, words: &[&str]) -> ClusterRecord {
        let record = self
            .wait_for(
                name,
                "not-probeable (exec-credentials)",
                Duration::from_secs(30),
                |c| {
                    c.last_outcome.as_deref() == Some("not-probeable")
                        && c.last_reason_class.as_deref() == Some("exec-credentials")
                },
            )
            .await;
        let reason = record.last_reason.clone().unwrap_or_default();
        for word in words {
            assert!(
                reason.contains(word),
                "{name}: the reason names {word:?}: {reason:?}"
            );
        }
        let condition = record.health.condition(ConditionType::NotProbeable);
        assert!(
            condition.is_some(),
            "{name}: a not-probeable condition: {:?}",
            record.health.conditions
        );
        assert_ne!(record.health.status, ClusterStatus::Offline, "{name}");
        assert_eq!(record.health.consecutive_failures, 0, "{name}");
        record
    }

    /// The outcomes vigil applied so far, per cluster: (outcome, reason class).
    fn applied(&self) -> BTreeMap<String, Vec<(String, String)>> {
        applied(&self.process.log_lines())
    }

    /// The answers of the read routes of the API that show clusters, their history, the
    /// plugins, the metrics and the event stream (read for two seconds).
    async fn api_answers(&self, clusters: &[&str]) -> String {
        let api = self.api();
        let mut paths = vec![
            "/api/v1/clusters".to_owned(),
            "/api/v1/plugins".to_owned(),
            "/metrics".to_owned(),
            "/readyz".to_owned(),
        ];
        for name in clusters {
            paths.push(format!("/api/v1/clusters/{name}"));
            paths.push(format!("/api/v1/clusters/{name}/history"));
        }
        tokio::task::spawn_blocking(move || {
            let mut answers = String::new();
            for path in &paths {
                let answer = read_for(api, path, Duration::from_secs(10));
                // `/readyz` may answer 503 while a cluster has not been probed healthy.
                assert!(
                    answer.starts_with("HTTP/1.1 200") || path == "/readyz",
                    "GET {path}: {answer}"
                );
                answers.push_str(&answer);
            }
            let events = read_for(api, "/api/v1/events?after=0", Duration::from_secs(2));
            assert!(events.contains("status-changed"), "the stream: {events}");
            answers.push_str(&events);
            answers
        })
        .await
        .unwrap()
    }

    /// Stops vigil with SIGTERM; its log lines.
    pub(crate) async fn stop(self) -> Vec<Value> {
        self.store.close().await;
        let log = self.process.log_path().to_owned();
        self.process.stop();
        log_lines(&log)
    }
}

/// The outcomes applied per cluster in a log: (outcome, reason class).
fn applied(log: &[Value]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut outcomes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for line in log.iter().filter(|l| message(l) == "probe applied") {
        let fields = &line["fields"];
        let cluster = fields["cluster"].as_str().unwrap_or_default().to_owned();
        outcomes.entry(cluster).or_default().push((
            fields["outcome"].as_str().unwrap_or_default().to_owned(),
            fields["class"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    outcomes
}

/// Asserts that exec problems never counted against `names`: no outcome of theirs was
/// `unhealthy`.
fn assert_never_counted(log: &[Value], names: &[&str]) {
    let outcomes = applied(log);
    for name in names {
        let seen = outcomes.get(*name).cloned().unwrap_or_default();
        assert!(!seen.is_empty(), "{name} was probed");
        assert!(
            seen.iter().all(|(outcome, _)| outcome != "unhealthy"),
            "{name}: an exec problem counted as a failure: {seen:?}"
        );
    }
}

/// One GET on a fresh connection, read until the server closes it or `within` passes; the
/// whole answer, head and body.
fn read_for(api: SocketAddr, path: &str, within: Duration) -> String {
    let mut stream = std::net::TcpStream::connect(api).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + within;
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    while Instant::now() < deadline {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("GET {path}: {e}"),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `POST path` with a JSON body to vigil's API (loopback, no token configured).
fn post(api: SocketAddr, path: &str, body: &Value) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(api).unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// The secrets of a PEM text as a leak would show them: each long body line.
fn pem_needles(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| l.len() >= 40 && !l.starts_with("-----"))
        .map(str::to_owned)
        .collect()
}

/// Asserts that no needle appears in vigil's log (standard error and output), in
/// `api_answers`, or in the bytes of its database files (run after vigil stopped).
fn assert_never_shown(dir: &Path, api_answers: &str, needles: &[String]) {
    assert!(!needles.is_empty());
    let log = read_log(&dir.join("vigil.log")) + &read_log(&dir.join("vigil.out"));
    assert!(
        log.lines().count() > 1_000,
        "the log is at trace level ({} lines)",
        log.lines().count()
    );
    let mut database = Vec::new();
    for file in ["vigil.db", "vigil.db-wal", "vigil.db-shm"] {
        database.extend(std::fs::read(dir.join(file)).unwrap_or_default());
    }
    assert!(!database.is_empty(), "the database was written");
    let database = String::from_utf8_lossy(&database);
    for needle in needles {
        if let Some(at) = log.find(needle.as_str()) {
            let start = log[..at].rfind('\n').map_or(0, |i| i + 1);
            panic!(
                "a credential the command printed ({}…) appears in vigil's log: {:?}",
                &needle[..needle.len().min(12)],
                &log[start..(start + 240).min(log.len())]
            );
        }
        assert!(
            !api_answers.contains(needle.as_str()),
            "a credential the command printed ({}…) appears in an API answer",
            &needle[..needle.len().min(12)]
        );
        assert!(
            !database.contains(needle.as_str()),
            "a credential the command printed ({}…) appears in the database file",
            &needle[..needle.len().min(12)]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_command_runs_as_kubectl_runs_it_and_a_command_whose_real_path_is_not_allowed_never_runs()
 {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let kubeconfigs = kit.root.join("kubeconfigs");
    let fleet = fleet(8, 3).await;
    let c = fleet.clusters();

    // The allow-list names the kit and a link to a copy of it, not the copy itself.
    let unlisted = kit.copy("elsewhere/exec-kit");
    let listed_link = kit.link("links/listed", &unlisted);
    let link_to_kit = kit.link("links/to-kit", &kit.command);
    let client = c[2].admin_client_certificate().unwrap();
    std::fs::write(kit.out("client.crt"), client.certificate_pem()).unwrap();
    std::fs::write(kit.out("client.key"), client.key_pem()).unwrap();
    let extension = json!({ "audience": "exec-kit-test", "region": "loopback-1" });

    let mut beta = Exec::v1beta1(kit.program())
        .counted(&kit, "beta")
        .env("EXEC_KIT_INFO_OUT", text(&kit.out("beta.info")))
        .env("EXEC_KIT_ENV_OUT", text(&kit.out("beta.env")))
        .env("EXEC_KIT_ARGS_OUT", text(&kit.out("beta.args")))
        .env("EXEC_KIT_STDIN_OUT", text(&kit.out("beta.stdin")));
    beta.args = vec!["get-token".into(), "--cluster-name".into(), "beta".into()];
    Kubeconfig::default()
        .single("beta", &c[0], &beta)
        .write(&kubeconfigs.join("beta.yaml"));
    let mut info = Exec::v1(kit.program())
        .counted(&kit, "v1-info")
        .env("EXEC_KIT_INFO_OUT", text(&kit.out("v1-info.info")));
    info.provide_cluster_info = true;
    Kubeconfig::default()
        .cluster("v1-info", &c[1], Some(extension.clone()))
        .user("v1-info", &info)
        .context("v1-info", "v1-info", "v1-info")
        .write(&kubeconfigs.join("v1-info.yaml"));
    let mut cert = Exec::v1(kit.program())
        .counted(&kit, "cert")
        .env("EXEC_KIT_MODE", "cert")
        .env("EXEC_KIT_CERT_FILE", text(&kit.out("client.crt")))
        .env("EXEC_KIT_KEY_FILE", text(&kit.out("client.key")));
    cert.interactive_mode = Some("IfAvailable");
    let cases = [
        ("cert", &c[2], cert),
        // Relative with a slash: against the kubeconfig's directory.
        (
            "relative",
            &c[3],
            Exec::v1beta1("../kit/exec-kit").counted(&kit, "relative"),
        ),
        // A bare name: in vigil's PATH.
        (
            "bare",
            &c[4],
            Exec::v1beta1("exec-kit").counted(&kit, "bare"),
        ),
        (
            "link-to-kit",
            &c[5],
            Exec::v1beta1(text(&link_to_kit)).counted(&kit, "link-to-kit"),
        ),
        (
            "listed-link",
            &c[6],
            Exec::v1beta1(text(&listed_link)).counted(&kit, "listed-link"),
        ),
        (
            "unlisted",
            &c[7],
            Exec::v1beta1(text(&unlisted)).counted(&kit, "unlisted"),
        ),
    ];
    for (name, cluster, exec) in &cases {
        Kubeconfig::default()
            .single(name, cluster, exec)
            .write(&kubeconfigs.join(format!("{name}.yaml")));
    }

    let allow = kit.root.join("exec-allow-link");
    std::fs::write(
        &allow,
        std::fs::read_to_string(&kit.allow).unwrap() + text(&listed_link) + "\n",
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        text(&kit.root.join("kit")),
        std::env::var("PATH").unwrap_or_default()
    );
    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[
            ("VIGIL_EXEC_ALLOW_FILE", text(&allow)),
            kit.dir(),
            KIT_ENV,
            ("VIGIL_EXEC_ENV", "EXEC_KIT_PASSED"),
            ("EXEC_KIT_PASSED", "passed-through-4711"),
            ("EXEC_KIT_WITHHELD", "withheld-0815"),
            ("PATH", path.as_str()),
        ],
    )
    .await;
    let online = ["beta", "v1-info", "cert", "relative", "bare", "link-to-kit"];
    for name in online {
        vigil.wait_online(name).await;
    }
    for (name, unlisted_path) in [("listed-link", &unlisted), ("unlisted", &unlisted)] {
        vigil
            .wait_exec_refused(name, &["VIGIL_EXEC_ALLOW", text(unlisted_path)])
            .await;
    }
    // Several probes of everyone, then: the allowed ran once each (no expiry: kept), the
    // refused never ran and never reached their clusters.
    let before = c[0].log().count();
    vigil
        .wait_for(
            "beta",
            "probed 3 more times",
            Duration::from_secs(30),
            |_| c[0].log().count() >= before + 3,
        )
        .await;
    for name in online {
        assert_eq!(
            runs(&kit.out(&format!("{name}.runs"))).len(),
            1,
            "{name}: one run, kept while it works"
        );
    }
    for (name, cluster) in [("listed-link", &c[6]), ("unlisted", &c[7])] {
        assert!(
            !kit.out(&format!("{name}.runs")).exists(),
            "{name}: the command never ran"
        );
        assert_eq!(cluster.log().count(), 0, "{name}: never connected");
        vigil.wait_exec_refused(name, &["VIGIL_EXEC_ALLOW"]).await;
    }

    // The credentials came from the command: tokens for the token users, the certificate
    // for the certificate user.
    let admin = || AuthUsed::Token {
        user: "kubernetes-admin".to_owned(),
    };
    for (i, name) in [(0, "beta"), (1, "v1-info"), (3, "relative"), (4, "bare")] {
        let seen = auth_seen(&c[i]);
        assert!(
            !seen.is_empty() && seen.iter().all(|s| *s == (admin(), Some(200))),
            "{name}: {seen:?}"
        );
    }
    let seen = auth_seen(&c[2]);
    assert!(
        !seen.is_empty()
            && seen.iter().all(|s| *s
                == (
                    AuthUsed::ClientCertificate {
                        user: "kubernetes-admin".to_owned()
                    },
                    Some(200)
                )),
        "cert: {seen:?}"
    );

    // The request, as kubectl makes it: no cluster unless asked, never interactive.
    let read_json = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(kit.out(name)).unwrap()).unwrap()
    };
    assert_eq!(
        read_json("beta.info"),
        json!({ "apiVersion": V1BETA1, "kind": "ExecCredential", "spec": { "interactive": false } })
    );
    let request = read_json("v1-info.info");
    assert_eq!(request["apiVersion"], V1, "{request:#}");
    assert_eq!(request["kind"], "ExecCredential", "{request:#}");
    assert_eq!(request["spec"]["interactive"], false, "{request:#}");
    let described = &request["spec"]["cluster"];
    assert_eq!(
        described["server"],
        c[1].server_url().as_str(),
        "{request:#}"
    );
    let ca = STANDARD
        .decode(described["certificate-authority-data"].as_str().unwrap())
        .unwrap();
    assert_eq!(String::from_utf8(ca).unwrap(), c[1].ca_pem(), "{request:#}");
    assert_eq!(described["config"], extension, "{request:#}");

    // Its arguments, no standard input, and an environment of exactly: the minimal PATH,
    // its own HOME and TMPDIR (never vigil's), the variables VIGIL_EXEC_ENV names, the
    // kubeconfig's env, the request.
    assert_eq!(
        std::fs::read_to_string(kit.out("beta.args")).unwrap(),
        "get-token\n--cluster-name\nbeta\n"
    );
    assert_eq!(
        std::fs::read_to_string(kit.out("beta.stdin"))
            .unwrap()
            .trim(),
        "/dev/null"
    );
    let environment: BTreeMap<String, String> = std::fs::read_to_string(kit.out("beta.env"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        // The shell's own.
        .filter(|(k, _)| !matches!(k.as_str(), "PWD" | "OLDPWD" | "SHLVL" | "_"))
        .collect();
    let names: BTreeSet<&str> = environment.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "PATH",
            "HOME",
            "TMPDIR",
            "EXEC_KIT_PASSED",
            "KUBERNETES_EXEC_INFO",
            "EXEC_KIT_COUNTER",
            "EXEC_KIT_INFO_OUT",
            "EXEC_KIT_ENV_OUT",
            "EXEC_KIT_ARGS_OUT",
            "EXEC_KIT_STDIN_OUT",
        ]),
        "{environment:#?}"
    );
    assert_eq!(environment["PATH"], CHILD_PATH);
    assert_eq!(environment["HOME"], text(&kit.exec.join("home")));
    assert_eq!(environment["TMPDIR"], text(&kit.exec.join("tmp")));
    assert_eq!(environment["EXEC_KIT_PASSED"], "passed-through-4711");

    let answers = vigil.api_answers(&online).await;
    let log = vigil.stop().await;
    assert_never_counted(&log, &["listed-link", "unlisted"]);
    let mut needles = vec![TOKEN_PREFIX.to_owned()];
    needles.extend(pem_needles(client.key_pem()));
    needles.extend(pem_needles(client.certificate_pem()));
    assert_never_shown(&kit.root, &answers, &needles);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_serves_every_probe_until_shortly_before_the_credential_expires_or_the_cluster_refuses_it()
 {
    const SHARED: usize = 20;
    const KEPT: usize = 3;
    const LIFETIME: f64 = 10.0;
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let kubeconfigs = kit.root.join("kubeconfigs");
    let fleet = fleet(2, 0).await;
    let [expiring, revoking] = fleet.clusters() else {
        panic!("two clusters");
    };
    for n in 1..=6 {
        expiring.add_token(format!("{TOKEN_PREFIX}{n}"), User::admin());
    }
    revoking.add_token(format!("{TOKEN_PREFIX}1"), User::admin());

    // Twenty contexts of one cluster entry and one exec user (a credential that expires),
    // three of another (one that does not).
    let shared: Vec<String> = (0..SHARED).map(|i| format!("shared-{i:02}")).collect();
    let mut config = Kubeconfig::default()
        .cluster("expiring", expiring, None)
        .user(
            "expiring",
            &Exec::v1(kit.program())
                .counted(&kit, "expiring")
                .env("EXEC_KIT_LIFETIME", format!("{LIFETIME}")),
        );
    for name in &shared {
        config = config.context(name, "expiring", "expiring");
    }
    config.write(&kubeconfigs.join("shared.yaml"));
    let kept: Vec<String> = (0..KEPT).map(|i| format!("kept-{i}")).collect();
    let mut config = Kubeconfig::default()
        .cluster("revoking", revoking, None)
        .user("kept", &Exec::v1beta1(kit.program()).counted(&kit, "kept"));
    for name in &kept {
        config = config.context(name, "revoking", "kept");
    }
    config.write(&kubeconfigs.join("kept.yaml"));

    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[kit.allowed(), kit.dir(), KIT_ENV],
    )
    .await;
    for name in shared.iter().chain(&kept) {
        vigil.wait_online(name).await;
    }
    let expiring_runs = kit.out("expiring.runs");
    let kept_runs = kit.out("kept.runs");
    let first = runs(&expiring_runs)[0].1;

    // Within the lifetime less its margin (a fifth of 10 s), every probe of the twenty is
    // served by the one run: five rounds of probes at 1 s, well before the margin.
    let probes = |log: &BTreeMap<String, Vec<(String, String)>>| -> usize {
        shared
            .iter()
            .map(|name| log.get(name).map_or(0, Vec::len))
            .sum()
    };
    wait::until_async(
        "the shared clusters are probed five times each",
        Duration::from_secs(15),
        || vigil.process.tail(),
        async || (probes(&vigil.applied()) >= 5 * SHARED).then_some(()),
    )
    .await;
    let served = probes(&vigil.applied());
    assert!(
        served >= 2 * SHARED,
        "{served} probes of the shared clusters"
    );
    assert_eq!(
        runs(&expiring_runs).len(),
        1,
        "one run for {served} probes of {SHARED} clusters sharing the exec configuration"
    );
    assert_eq!(runs(&kept_runs).len(), 1);

    // Shortly before it expires, one run again.
    wait::until_async(
        "the expiring credential is renewed",
        Duration::from_secs(15),
        || vigil.process.tail(),
        async || (runs(&expiring_runs).len() >= 2).then_some(()),
    )
    .await;
    let renewed = runs(&expiring_runs)[1].1;

    // The cluster stops accepting the token of the credential that does not expire, and
    // accepts the one the next run prints: the probe that meets the 401 runs the command
    // once more and tries again, so no probe fails.
    let change = revoking.log().count();
    assert!(revoking.revoke_token(&format!("{TOKEN_PREFIX}1")));
    revoking.add_token(format!("{TOKEN_PREFIX}2"), User::admin());
    wait::until_async(
        "a refused credential is obtained again",
        Duration::from_secs(15),
        || vigil.process.tail(),
        async || (runs(&kept_runs).len() >= 2).then_some(()),
    )
    .await;
    let accepted_since = || {
        revoking
            .log()
            .entries()
            .iter()
            .filter(|r| r.seq > change && r.status == Some(200))
            .count()
    };
    vigil
        .wait_for(
            &kept[0],
            "probed with the new token",
            Duration::from_secs(15),
            |_| accepted_since() >= 3 * KEPT,
        )
        .await;
    let refused: Vec<_> = revoking
        .log()
        .entries()
        .into_iter()
        .filter(|r| r.seq > change && r.status == Some(401))
        .collect();
    assert!(
        !refused.is_empty() && refused.iter().all(|r| r.auth == AuthUsed::RejectedToken),
        "the revoked token met a 401: {refused:?}"
    );
    assert_eq!(
        runs(&kept_runs).len(),
        2,
        "one run again after the 401, however many probes met it"
    );

    let answers = vigil.api_answers(&[&shared[0], &kept[0]]).await;
    let log = vigil.stop().await;
    let expiring_all = runs(&expiring_runs);
    for pair in expiring_all.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            // Renewed when a probe asks for it past the margin: no sooner than the
            // lifetime less a fifth of it (less the second the expiry is rounded to), and
            // late only by as much as a busy machine delays the next probe.
            (6.5..=LIFETIME + 5.0).contains(&gap),
            "a credential of {LIFETIME} s is renewed shortly before it expires (margin: a fifth of it), not {gap:.1} s after the previous run: {expiring_all:?}"
        );
    }
    assert!(renewed - first >= 6.5, "{expiring_all:?}");
    // Every probe of every cluster was healthy: neither the renewal nor the 401 showed.
    let outcomes = applied(&log);
    for name in shared.iter().chain(&kept) {
        let seen = &outcomes[name];
        assert!(
            seen.iter().all(|(outcome, _)| outcome == "healthy"),
            "{name}: {seen:?}"
        );
    }
    assert_never_shown(&kit.root, &answers, &[TOKEN_PREFIX.to_owned()]);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_fails_hangs_or_prints_something_unusable_is_exec_credentials_never_an_outage()
 {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let kubeconfigs = kit.root.join("kubeconfigs");
    let fleet = fleet(10, 40).await;
    let c = fleet.clusters();
    let hang_mode = kit.out("hang.mode");
    std::fs::write(&hang_mode, "hang").unwrap();
    let turning_mode = kit.out("turns-bad.mode");
    std::fs::write(&turning_mode, "token").unwrap();
    let pids = kit.out("hang.pids");

    let mode = |name: &str, mode: &str| {
        Exec::v1(kit.program())
            .counted(&kit, name)
            .env("EXEC_KIT_MODE", mode)
    };
    let mut always = Exec::v1(kit.program()).counted(&kit, "always");
    always.interactive_mode = Some("Always");
    let mut alpha = Exec::v1beta1(kit.program()).counted(&kit, "alpha");
    alpha.api_version = V1ALPHA1;
    // (cluster, exec, what its message says); the last two never run the command.
    let cases: [(&str, Exec, &[&str]); 9] = [
        (
            "hang",
            Exec::v1(kit.program())
                .counted(&kit, "hang")
                .env("EXEC_KIT_MODE_FILE", text(&hang_mode))
                .env("EXEC_KIT_PID_FILE", text(&pids)),
            &["did not finish within"],
        ),
        ("huge", mode("huge", "huge"), &["1 MiB"]),
        ("badjson", mode("badjson", "badjson"), &["JSON"]),
        (
            "wrongversion",
            mode("wrongversion", "wrongversion"),
            &["apiVersion"],
        ),
        (
            "fail",
            mode("fail", "fail"),
            &["3", "no credentials for this cluster (simulated failure)"],
        ),
        ("always", always, &["interactiveMode"]),
        (
            "ld-preload",
            Exec::v1(kit.program())
                .counted(&kit, "ld-preload")
                .env("LD_PRELOAD", "/nonexistent/exec-kit.so"),
            &["LD_PRELOAD"],
        ),
        (
            "home",
            Exec::v1(kit.program())
                .counted(&kit, "home")
                .env("HOME", "/nonexistent"),
            &["HOME"],
        ),
        ("alpha", alpha, &["v1alpha1"]),
    ];
    for (i, (name, exec, _)) in cases.iter().enumerate() {
        Kubeconfig::default()
            .single(name, &c[i], exec)
            .write(&kubeconfigs.join(format!("{name}.yaml")));
    }
    // A credential of 3 s whose command starts failing, then works again.
    let turning = &c[9];
    Kubeconfig::default()
        .single(
            "turns-bad",
            turning,
            &Exec::v1(kit.program())
                .counted(&kit, "turns-bad")
                .env("EXEC_KIT_MODE_FILE", text(&turning_mode))
                .env("EXEC_KIT_LIFETIME", "3"),
        )
        .write(&kubeconfigs.join("turns-bad.yaml"));

    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[
            kit.allowed(),
            kit.dir(),
            KIT_ENV,
            ("VIGIL_EXEC_TIMEOUT", "2"),
        ],
    )
    .await;
    vigil.wait_online("turns-bad").await;
    vigil
        .store
        .register_app(
            "on-turns-bad",
            "turns-bad",
            AppStatus::Deployed,
            wall_clock(),
        )
        .await
        .unwrap();

    for (name, _, words) in &cases {
        let record = vigil.wait_exec_refused(name, words).await;
        assert_eq!(record.health.status, ClusterStatus::Unknown, "{name}");
    }
    let fail = vigil.cluster("fail").await.last_reason.unwrap_or_default();
    assert!(
        !fail.contains("second line"),
        "only the first line of standard error: {fail}"
    );
    assert!(
        fail.contains("token=[redacted]") && !fail.contains("exec-kit-stderr-secret"),
        "what looks like a secret in standard error is redacted: {fail}"
    );
    for (name, ran) in [
        ("hang", true),
        ("huge", true),
        ("badjson", true),
        ("wrongversion", true),
        ("fail", true),
        ("always", false),
        ("ld-preload", false),
        ("home", false),
        ("alpha", false),
    ] {
        assert_eq!(
            kit.out(&format!("{name}.runs")).exists(),
            ran,
            "{name}: whether the command ran"
        );
    }
    for (i, (name, _, _)) in cases.iter().enumerate() {
        assert_eq!(c[i].log().count(), 0, "{name}: no credential, no request");
    }

    // The hanging command, and the child it left in its process group, are killed at the
    // time limit: once it stops hanging, none of the processes it started runs.
    vigil
        .wait_for("hang", "timed out twice", Duration::from_secs(30), |_| {
            vigil.applied().get("hang").map_or(0, |seen| {
                seen.iter()
                    .filter(|(_, class)| class == "exec-credentials")
                    .count()
            }) >= 2
        })
        .await;
    std::fs::write(&hang_mode, "fail").unwrap();
    let started: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    // One run at least (the script and its child): the second probe may take the first
    // run's failure, the command backing off before it runs again.
    assert!(started.len() >= 2, "a run, two processes: {started:?}");
    assert_all_gone(&started, Duration::from_secs(8), "the hanging command").await;

    // A cluster whose command starts failing keeps its status and its apps.
    std::fs::write(&turning_mode, "fail").unwrap();
    let record = vigil.wait_exec_refused("turns-bad", &["exit"]).await;
    assert_eq!(record.health.status, ClusterStatus::Online);
    let failing_since = vigil.applied()["turns-bad"].len();
    vigil
        .wait_for(
            "turns-bad",
            "refused 3 more times",
            Duration::from_secs(30),
            |_| vigil.applied()["turns-bad"].len() >= failing_since + 3,
        )
        .await;
    let record = vigil.cluster("turns-bad").await;
    assert_eq!(record.health.status, ClusterStatus::Online);
    assert_eq!(record.health.consecutive_failures, 0);
    assert_eq!(
        vigil.store.apps_on("turns-bad").await.unwrap()[0].status,
        AppStatus::Deployed
    );
    std::fs::write(&turning_mode, "token").unwrap();
    vigil
        .wait_for("turns-bad", "healthy again", Duration::from_secs(30), |c| {
            c.last_outcome.as_deref() == Some("healthy")
                && c.health.condition(ConditionType::NotProbeable).is_none()
        })
        .await;

    let names: Vec<&str> = cases
        .iter()
        .map(|(name, _, _)| *name)
        .chain(["turns-bad"])
        .collect();
    let answers = vigil.api_answers(&names).await;
    let log = vigil.stop().await;
    assert_never_counted(&log, &names);
    // The answer of the wrong version held a token; the oversized one, 10 MB of it.
    assert_never_shown(
        &kit.root,
        &answers,
        &[TOKEN_PREFIX.to_owned(), "x".repeat(64)],
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_slower_than_the_probe_is_exec_credentials_and_killed_at_its_own_limit() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let kubeconfigs = kit.root.join("kubeconfigs");
    let fleet = fleet(1, 3).await;
    let cluster = &fleet.clusters()[0];
    let mode = kit.out("slow.mode");
    std::fs::write(&mode, "hang").unwrap();
    let pids = kit.out("slow.pids");
    Kubeconfig::default()
        .single(
            "slow",
            cluster,
            &Exec::v1(kit.program())
                .counted(&kit, "slow")
                .env("EXEC_KIT_MODE_FILE", text(&mode))
                .env("EXEC_KIT_PID_FILE", text(&pids)),
        )
        .write(&kubeconfigs.join("slow.yaml"));
    // A probe of 2 s, a command limit of 10 s (the default): the probe gives up first.
    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[
            kit.allowed(),
            kit.dir(),
            KIT_ENV,
            ("CLUSTER_HEALTH_TIMEOUT", "2"),
        ],
    )
    .await;
    vigil
        .wait_for("slow", "probed 3 times", Duration::from_secs(30), |_| {
            vigil.applied().get("slow").map_or(0, Vec::len) >= 3
        })
        .await;
    let record = vigil.wait_exec_refused("slow", &[]).await;
    assert_eq!(record.health.status, ClusterStatus::Unknown);
    assert!(
        runs(&kit.out("slow.runs")).len() < 3,
        "a run still going is waited for by the next probe, not started again"
    );

    // Every process it started is gone once the command's own limit has passed.
    std::fs::write(&mode, "fail").unwrap();
    let started: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert!(!started.is_empty());
    assert_all_gone(&started, Duration::from_secs(15), "the slow command").await;
    let log = vigil.stop().await;
    assert_never_counted(&log, &["slow"]);
    assert_eq!(cluster.log().count(), 0, "no credential, no request");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_a_few_commands_run_at_once() {
    const CLUSTERS: usize = 8;
    /// `VIGIL_EXEC_MAX_CONCURRENT`'s default.
    const AT_ONCE: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let kubeconfigs = kit.root.join("kubeconfigs");
    let fleet = fleet(CLUSTERS, 3).await;
    let spans = kit.out("spans");
    // Eight exec configurations (each its own counter), probed together, each command
    // taking a second to answer.
    let names: Vec<String> = (0..CLUSTERS).map(|i| format!("slow-{i}")).collect();
    for (name, cluster) in names.iter().zip(fleet.clusters()) {
        let exec = Exec::v1(kit.program())
            .counted(&kit, name)
            .env("EXEC_KIT_DELAY", "1")
            .env("EXEC_KIT_SPANS", text(&spans));
        Kubeconfig::default()
            .single(name, cluster, &exec)
            .write(&kubeconfigs.join(format!("{name}.yaml")));
    }
    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[kit.allowed(), kit.dir(), KIT_ENV],
    )
    .await;
    for name in &names {
        vigil.wait_online(name).await;
    }
    vigil.stop().await;

    // The most runs between their start and their answer at any moment.
    let mut changes: Vec<(f64, i32)> = std::fs::read_to_string(&spans)
        .unwrap()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let at: f64 = fields[1].parse().unwrap();
            (at, if fields[0] == "start" { 1 } else { -1 })
        })
        .collect();
    assert_eq!(changes.len(), 2 * CLUSTERS, "one run each: {changes:?}");
    // An end before a start at the same instant.
    changes.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut running = 0;
    let mut most = 0;
    for (_, change) in &changes {
        running += change;
        most = most.max(running);
    }
    assert!(
        (2..=AT_ONCE as i32).contains(&most),
        "{most} commands ran at once (at most {AT_ONCE}, and more than one)"
    );
    fleet.shutdown().await;
}

/// Four commands that hang and one good one whose credential lasts a few probes: the
/// hanging ones back off and hold at most half the permits, so the good cluster stays
/// ONLINE and its command keeps running. Then one transient 401 to a token the command
/// hands out again unchanged (a tool that caches it): one more run, then none over many
/// probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_commands_never_starve_the_others_and_one_401_runs_a_command_once_more() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let fleet = fleet(6, 1000).await;
    let kubeconfigs = kit.root.join("kubeconfigs");
    let clusters = fleet.clusters();
    for (index, cluster) in clusters[..4].iter().enumerate() {
        let name = format!("hang-{index}");
        Kubeconfig::default()
            .single(
                &name,
                cluster,
                &Exec::v1(kit.program())
                    .env("EXEC_KIT_MODE", "hang")
                    .env("EXEC_KIT_PID_FILE", text(&kit.out("hang.pids"))),
            )
            .write(&kubeconfigs.join(format!("{name}.yaml")));
    }
    Kubeconfig::default()
        .single(
            "good",
            &clusters[4],
            // Fresh for four seconds (a fifth of five before expiry): a run every few probes.
            &Exec::v1(kit.program())
                .counted(&kit, "good")
                .env("EXEC_KIT_LIFETIME", "5"),
        )
        .write(&kubeconfigs.join("good.yaml"));
    clusters[5].add_token("cached-token-77", User::admin());
    Kubeconfig::default()
        .single(
            "cached",
            &clusters[5],
            &Exec::v1(kit.program())
                .counted(&kit, "cached")
                .env("EXEC_KIT_TOKEN", "cached-token-77"),
        )
        .write(&kubeconfigs.join("cached.yaml"));
    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugin_dir(&kit.root, &["kubeconfig-file"]),
        &[
            kit.allowed(),
            kit.dir(),
            KIT_ENV,
            ("VIGIL_EXEC_TIMEOUT", "3"),
            ("VIGIL_EXEC_MAX_CONCURRENT", "4"),
        ],
    )
    .await;
    vigil.wait_online("good").await;
    vigil.wait_online("cached").await;
    let good_runs = || runs(&kit.out("good.runs")).len();
    let hang_runs = || {
        std::fs::read_to_string(kit.out("hang.pids"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    // While the four hang and are killed at their limit, again and again: the good
    // command runs on (ten more runs: about forty probes), and the cluster stays ONLINE.
    let (good_before, hang_before) = (good_runs(), hang_runs());
    wait::until_async(
        "the good command ran ten more times while four hung",
        Duration::from_secs(90),
        || {
            format!(
                "good ran {} more times, the hanging ones {}",
                good_runs() - good_before,
                hang_runs() - hang_before
            )
        },
        async || {
            let good = vigil.cluster("good").await;
            assert_eq!(
                good.health.status,
                ClusterStatus::Online,
                "good: {:?} {:?}",
                good.last_outcome,
                good.last_reason
            );
            (good_runs() >= good_before + 10).then_some(())
        },
    )
    .await;
    assert!(
        hang_runs() > hang_before,
        "the hanging commands ran meanwhile"
    );

    // One 401 to the cached token: the command runs once more, and its (same) token is
    // served from then on.
    let cached = &clusters[5];
    let before = runs(&kit.out("cached.runs")).len();
    cached.fail_with(401).await.unwrap();
    wait::until(
        "cached answered a 401",
        Duration::from_secs(30),
        String::new,
        || {
            cached
                .log()
                .entries()
                .iter()
                .any(|entry| entry.status == Some(401))
                .then_some(())
        },
    );
    cached
        .set_fault(vigil_fake_kube::Fault::None)
        .await
        .unwrap();
    vigil.wait_online("cached").await;
    let seen = cached.log().count();
    wait::until(
        "five more probes of cached",
        Duration::from_secs(60),
        String::new,
        || (cached.log().count() >= seen + 5).then_some(()),
    );
    assert_eq!(
        runs(&kit.out("cached.runs")).len(),
        before + 1,
        "one run after the 401, then the same token was kept"
    );
    vigil.stop().await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_from_a_secret_runs_its_command_only_with_exec_from_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let fleet = fleet(3, 5).await;
    let [management, target, filed] = fleet.clusters() else {
        panic!("three clusters");
    };
    let in_secret = Kubeconfig::default()
        .single(
            "in-secret",
            target,
            &Exec::v1(kit.program()).counted(&kit, "in-secret"),
        )
        .render();
    let mut fixtures = Fixtures::empty();
    fixtures.insert_secret(
        "vigil",
        "exec",
        BTreeMap::from([("kubeconfig".to_owned(), in_secret.into_bytes())]),
    );
    management.set_fixtures(fixtures);
    let management_file = kit.root.join("management.yaml");
    std::fs::write(
        &management_file,
        management.kubeconfig(KubeconfigShape::Token).unwrap(),
    )
    .unwrap();

    // One vigil per setting, each with its own database: the same Secret cluster, and a
    // kubeconfig file with the same command for comparison.
    let phase = async |phase: &str, env: &[(&str, &str)]| -> Vigil {
        let root = kit.root.join(phase);
        let kubeconfigs = root.join("kubeconfigs");
        Kubeconfig::default()
            .single(
                "in-file",
                filed,
                &Exec::v1(kit.program()).counted(&kit, &format!("in-file-{phase}")),
            )
            .write(&kubeconfigs.join("in-file.yaml"));
        let mut env = env.to_vec();
        env.push(("VIGIL_MANAGEMENT_KUBECONFIG", text(&management_file)));
        let vigil = Vigil::start(
            &root,
            &kubeconfigs,
            &plugin_dir(&root, &["kubeconfig-file", "kube-secret"]),
            &env,
        )
        .await;
        let (status, answer) = post(
            vigil.api(),
            "/api/v1/clusters",
            &json!({
                "name": "in-secret",
                "endpoint": target.server_url(),
                "kubeconfig_secret_ref": "secret://vigil/exec?key=kubeconfig",
            }),
        );
        assert_eq!(status, 201, "{answer}");
        vigil
    };
    let secret_runs = kit.out("in-secret.runs");

    // Nothing allowed.
    let vigil = phase("nothing-allowed", &[KIT_ENV]).await;
    vigil
        .wait_exec_refused("in-file", &["VIGIL_EXEC_ALLOW"])
        .await;
    let refused = vigil.wait_exec_refused("in-secret", &[]).await;
    let reason = refused.last_reason.unwrap_or_default();
    assert!(
        reason.contains("VIGIL_EXEC_FROM_SECRETS") || reason.contains("VIGIL_EXEC_ALLOW"),
        "{reason}"
    );
    vigil.stop().await;
    assert!(!kit.out("in-file-nothing-allowed.runs").exists());

    // The command allowed: from a file it runs, from a Secret it still does not.
    let vigil = phase("allowed", &[kit.allowed(), kit.dir(), KIT_ENV]).await;
    vigil.wait_online("in-file").await;
    vigil
        .wait_exec_refused("in-secret", &["VIGIL_EXEC_FROM_SECRETS"])
        .await;
    let log = vigil.stop().await;
    assert_never_counted(&log, &["in-secret"]);
    assert!(
        !secret_runs.exists(),
        "the command of a Secret's kubeconfig never ran"
    );
    assert_eq!(target.log().count(), 0);

    // And with VIGIL_EXEC_FROM_SECRETS=true it does.
    let vigil = phase(
        "from-secrets",
        &[
            kit.allowed(),
            kit.dir(),
            KIT_ENV,
            ("VIGIL_EXEC_FROM_SECRETS", "true"),
        ],
    )
    .await;
    vigil.wait_online("in-secret").await;
    let seen = auth_seen(target);
    assert!(
        !seen.is_empty()
            && seen.iter().all(|s| *s
                == (
                    AuthUsed::Token {
                        user: "kubernetes-admin".to_owned()
                    },
                    Some(200)
                )),
        "{seen:?}"
    );
    assert_eq!(runs(&secret_runs).len(), 1);
    vigil.stop().await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_without_the_exec_credentials_grant_never_gets_a_command_run() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let kubeconfigs = kit.root.join("kubeconfigs");
    let fleet = fleet(1, 3).await;
    let cluster = &fleet.clusters()[0];
    Kubeconfig::default()
        .single(
            "ungranted",
            cluster,
            &Exec::v1(kit.program()).counted(&kit, "ungranted"),
        )
        .write(&kubeconfigs.join("ungranted.yaml"));
    // The first-party plugin with its grants but `exec-credentials`.
    let plugins = plugin_dir(&kit.root, &["kubeconfig-file"]);
    let grants = std::fs::read_to_string(plugins.join("kubeconfig-file.toml")).unwrap();
    assert!(
        grants.contains("exec-credentials = true"),
        "the first-party plugin is granted exec credentials:\n{grants}"
    );
    let without: String = grants
        .lines()
        .filter(|l| !l.trim_start().starts_with("exec-credentials"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(plugins.join("kubeconfig-file.toml"), without).unwrap();

    let vigil = Vigil::start(
        &kit.root,
        &kubeconfigs,
        &plugins,
        &[kit.allowed(), kit.dir(), KIT_ENV],
    )
    .await;
    vigil
        .wait_exec_refused("ungranted", &["exec-credentials"])
        .await;
    let before = vigil.applied()["ungranted"].len();
    vigil
        .wait_for("ungranted", "probed again", Duration::from_secs(30), |_| {
            vigil.applied()["ungranted"].len() >= before + 2
        })
        .await;
    let log = vigil.stop().await;
    assert_never_counted(&log, &["ungranted"]);
    assert!(!kit.out("ungranted.runs").exists(), "the command never ran");
    assert_eq!(cluster.log().count(), 0);
    fleet.shutdown().await;
}

#[test]
fn exec_settings_that_would_hand_vigils_own_variables_to_a_command_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    for (variable, value, named) in [
        ("VIGIL_EXEC_ENV", "DATABASE_URL", "DATABASE_URL"),
        (
            "VIGIL_EXEC_ENV",
            "AWS_PROFILE,VIGIL_API_TOKEN",
            "VIGIL_API_TOKEN",
        ),
        ("VIGIL_EXEC_ENV", "PATH", "PATH"),
        ("VIGIL_EXEC_ENV", "HOME", "HOME"),
        ("VIGIL_EXEC_ENV", "LD_PRELOAD", "LD_PRELOAD"),
        ("VIGIL_EXEC_ALLOW", "bin/exec-kit", "bin/exec-kit"),
        ("VIGIL_EXEC_ALLOW", "/bin/a,/bin/b", "VIGIL_EXEC_ALLOW_FILE"),
        (
            "VIGIL_EXEC_KUBECONFIG_ENV",
            "BASH_ENV,VIGIL_API_TOKEN",
            "VIGIL_API_TOKEN",
        ),
    ] {
        let mut refused = process::serve(dir.path())
            .kubeconfigs(dir.path())
            .env(variable, value)
            .spawn();
        let status = refused.wait_exit(Duration::from_secs(30));
        let stderr = refused.log();
        assert_eq!(status.code(), Some(2), "{variable}={value}: {stderr}");
        assert!(
            stderr.contains(variable) && stderr.contains(named),
            "{variable}={value}: the refusal names the setting and the entry:\n{stderr}"
        );
    }
}

#[test]
fn discover_dry_run_tells_whether_an_exec_user_may_run_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Kit::install(dir.path());
    let file = kit.root.join("kubeconfigs/exec.yaml");
    // No fleet: discovery connects to nothing.
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "exec-user",
        "clusters": [{ "name": "exec-user", "cluster": { "server": "https://127.0.0.1:1" } }],
        "users": [{ "name": "exec-user", "user": {
            "exec": Exec::v1(kit.program()).counted(&kit, "discover").json()
        } }],
        "contexts": [{ "name": "exec-user", "context": { "cluster": "exec-user", "user": "exec-user" } }],
    });
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, config.to_string()).unwrap();

    let run = |allow: Option<&str>, args: &[&str]| {
        let mut command = vigil(&kit.root);
        command
            .args(["discover", "--dry-run"])
            .args(args)
            .arg(&file)
            .env(KIT_ENV.0, KIT_ENV.1);
        if let Some(allow) = allow {
            command.env("VIGIL_EXEC_ALLOW_FILE", allow);
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let line = |table: &str| {
        table
            .lines()
            .find(|line| line.starts_with("exec-user "))
            .unwrap_or_else(|| panic!("no line for exec-user:\n{table}"))
            .to_owned()
    };
    let refused = run(None, &[]);
    let refused_line = line(&refused);
    assert!(
        refused_line.contains("not probeable (exec-credentials)")
            && refused_line.contains("VIGIL_EXEC_ALLOW_FILE allows no command")
            && refused_line.contains(kit.program()),
        "not allowed, and why:\n{refused}"
    );
    let allowed = run(Some(text(&kit.allow)), &[]);
    let allowed_line = line(&allowed);
    assert!(
        allowed_line.contains("probeable: exec command")
            && allowed_line.contains("allowed by VIGIL_EXEC_ALLOW"),
        "allowed:\n{allowed}"
    );
    assert!(!allowed.contains("not probeable"), "{allowed}");

    let json = |allow: Option<&str>| -> Value {
        let text = run(allow, &["-o", "json"]);
        let plan: Value = serde_json::from_str(&text).unwrap();
        plan["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "exec-user")
            .cloned()
            .unwrap_or_else(|| panic!("exec-user in {plan:#}"))
    };
    assert_eq!(json(None)["probeable"], false);
    assert_eq!(json(Some(text(&kit.allow)))["probeable"], true);
    assert!(
        !kit.out("discover.runs").exists(),
        "a dry run never runs a credential command"
    );
}
