//! A real `vigil serve` for a test: its environment, database, plugin directory,
//! kubeconfigs and log file, the wait until it listens (and, if asked, until its first
//! discovery), its signals and its shutdown.
//!
//! The binary's path comes from the caller: only the `vigil` package knows
//! `CARGO_BIN_EXE_vigil`, and a path searched in `target/` may be a stale binary.

use std::ffi::OsStr;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::wait;

/// How long `vigil serve` may take to listen, or to finish its first discovery (it may
/// compile plugins first, which debug builds do slowly).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `vigil serve` may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Log filter for tests that scan every line (for secrets, say): everything at trace,
/// except Cranelift's code generator, which sees compiled plugin code, never
/// credentials, and at trace level logs every function it compiles.
pub const TRACE: &str = "trace,cranelift_codegen=info,cranelift_frontend=info,\
                         cranelift_entity=info,wasmtime_internal_cranelift=info,regalloc2=info";

/// `binary` with an empty environment (only `HOME` = `dir`, `PATH`, `RUST_LOG=info`,
/// an API on a port of its own, no colours, no built-in plugins), run in `dir`: the tests
/// name the plugins they run. For any of vigil's commands; [`Serve`] builds on it.
pub fn command(binary: &Path, dir: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        // Tests run side by side: each API on a port of its own (logged at start-up).
        .env("VIGIL_LISTEN", "127.0.0.1:0")
        .env("NO_COLOR", "1")
        .env("VIGIL_PLUGINS_EMBEDDED", "false")
        .stdin(Stdio::null());
    command
}

/// What [`Serve::start`] waits for before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// The API listens (its address is logged).
    Listening,
    /// The API listens and the first discovery is done.
    Discovered,
}

/// How to start `vigil serve`: [`command`] plus `serve`, its log written to a file
/// (`vigil.log` in `dir` unless [`Serve::log_file`] says otherwise).
#[derive(Debug)]
pub struct Serve {
    command: Command,
    log: PathBuf,
    stdout: Option<PathBuf>,
    ready: Ready,
}

impl Serve {
    /// `vigil serve` from `binary`, run in `dir` (its SQLite file `dir/vigil.db` unless
    /// [`Serve::database`] says otherwise).
    pub fn new(binary: &Path, dir: &Path) -> Self {
        let mut command = command(binary, dir);
        command.arg("serve");
        Self {
            command,
            log: dir.join("vigil.log"),
            stdout: None,
            ready: Ready::Listening,
        }
    }

    /// Discovers the kubeconfigs of `dir` (`KUBECONFIG_DIR`).
    pub fn kubeconfigs(self, dir: impl AsRef<OsStr>) -> Self {
        self.env("KUBECONFIG_DIR", dir)
    }

    /// Loads the plugins of `dir` (`VIGIL_PLUGIN_DIR`).
    pub fn plugins(self, dir: impl AsRef<OsStr>) -> Self {
        self.env("VIGIL_PLUGIN_DIR", dir)
    }

    /// Keeps compiled plugins in `dir` (`VIGIL_CACHE_DIR`). Tests of one binary may share
    /// one: each plugin is then compiled once per build of it, not once per test.
    pub fn cache(self, dir: impl AsRef<OsStr>) -> Self {
        self.env("VIGIL_CACHE_DIR", dir)
    }

    /// Keeps its state at `url` (`DATABASE_URL`).
    pub fn database(self, url: impl AsRef<OsStr>) -> Self {
        self.env("DATABASE_URL", url)
    }

    /// Probes every `seconds` with a timeout of `timeout` seconds, OFFLINE after
    /// `threshold` failures.
    pub fn policy(self, seconds: u32, timeout: u32, threshold: u32) -> Self {
        self.env("CLUSTER_HEALTH_INTERVAL", seconds.to_string())
            .env("CLUSTER_HEALTH_TIMEOUT", timeout.to_string())
            .env("CLUSTER_HEALTH_FAILURE_THRESHOLD", threshold.to_string())
    }

    /// Logs as JSON lines, filtered by `filter` (`RUST_LOG`; [`TRACE`] for everything).
    pub fn json_log(self, filter: &str) -> Self {
        self.env("VIGIL_LOG_FORMAT", "json").env("RUST_LOG", filter)
    }

    /// Writes its log (standard error) to `path` instead of `dir/vigil.log`.
    pub fn log_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = path.into();
        self
    }

    /// Writes its standard output to `path` (discarded otherwise).
    pub fn stdout_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdout = Some(path.into());
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Sets environment variables.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.command.envs(vars);
        self
    }

    /// Removes one environment variable that [`command`] sets.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.command.env_remove(key);
        self
    }

    /// Adds arguments after `serve`.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.command.args(args);
        self
    }

    /// [`Serve::start`] also waits for the first discovery to be done.
    pub fn until_discovered(mut self) -> Self {
        self.ready = Ready::Discovered;
        self
    }

    /// The command as it stands, for what this builder does not offer.
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.command
    }

    /// Starts it without waiting for anything.
    pub fn spawn(mut self) -> Vigil {
        let log = File::create(&self.log)
            .unwrap_or_else(|e| panic!("create the log file {}: {e}", self.log.display()));
        let stdout = match &self.stdout {
            Some(path) => Stdio::from(File::create(path).expect("create the stdout file")),
            None => Stdio::null(),
        };
        let child = self
            .command
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("start {:?}: {e}", self.command.get_program());
            });
        Vigil {
            child,
            log: self.log,
            api: None,
        }
    }

    /// Starts it and waits until its API listens (and, with
    /// [`Serve::until_discovered`], its first discovery is done). Panics with the log's
    /// tail if it exits first or takes longer than [`START_TIMEOUT`].
    pub async fn start(self) -> Vigil {
        let ready = self.ready;
        let mut vigil = self.spawn();
        vigil.api = Some(
            vigil
                .wait_log("its API listens", START_TIMEOUT, listen_address)
                .await,
        );
        if ready == Ready::Discovered {
            vigil
                .wait_log("its first discovery is done", START_TIMEOUT, |log| {
                    log.lines()
                        .any(|line| line.contains("discovery done"))
                        .then_some(())
                })
                .await;
        }
        vigil
    }

    /// [`Serve::start`] from a test without an async runtime.
    pub fn start_blocking(self) -> Vigil {
        let ready = self.ready;
        let mut vigil = self.spawn();
        vigil.api = Some(vigil.wait_log_blocking("its API listens", START_TIMEOUT, listen_address));
        if ready == Ready::Discovered {
            vigil.wait_log_blocking("its first discovery is done", START_TIMEOUT, |log| {
                log.lines()
                    .any(|line| line.contains("discovery done"))
                    .then_some(())
            });
        }
        vigil
    }
}

/// The address of the API in a log, plain or JSON, once it is logged.
fn listen_address(log: &str) -> Option<SocketAddr> {
    let line = log.lines().find(|l| l.contains("REST API listening"))?;
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
        return json["fields"]["listen"].as_str()?.parse().ok();
    }
    let (_, rest) = line.split_once("listen=")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// A running `vigil serve`, killed (SIGKILL) if the test ends before stopping it.
#[derive(Debug)]
pub struct Vigil {
    child: Child,
    log: PathBuf,
    api: Option<SocketAddr>,
}

impl Vigil {
    /// Where its REST API listens. Panics when it was only [`Serve::spawn`]ed.
    pub fn api(&self) -> SocketAddr {
        self.api
            .expect("the API's address is known once vigil was started")
    }

    /// `http://ADDRESS` of its REST API.
    pub fn url(&self) -> String {
        format!("http://{}", self.api())
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its log as written so far (a read may end inside a line).
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// Its complete JSON log lines so far (with [`Serve::json_log`]).
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        log_lines(&self.log)
    }

    /// The last 40 lines of its log below trace level, for a failure's message.
    pub fn tail(&self) -> String {
        tail(&self.log)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its process, for what this type does not offer.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its exit status if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait for vigil")
    }

    /// Waits until `found` finds something in its log, and returns it. Panics with the
    /// log's tail when vigil exits first or `timeout` passes.
    pub async fn wait_log<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut found: impl FnMut(&str) -> Option<T>,
    ) -> T {
        let log = self.log.clone();
        wait::until_async(what, timeout, || tail(&log), async || self.look(&mut found)).await
    }

    /// [`Vigil::wait_log`] from a test without an async runtime.
    pub fn wait_log_blocking<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut found: impl FnMut(&str) -> Option<T>,
    ) -> T {
        let log = self.log.clone();
        wait::until(what, timeout, || tail(&log), || self.look(&mut found))
    }

    fn look<T>(&mut self, found: &mut impl FnMut(&str) -> Option<T>) -> Option<T> {
        let text = self.log();
        if let Some(it) = found(&text) {
            return Some(it);
        }
        if let Some(status) = self.try_wait() {
            panic!("vigil serve exited with {status}:\n{}", self.tail());
        }
        None
    }

    /// Sends it `signal` (`TERM`, `HUP`, `KILL`…).
    pub fn signal(&self, signal: &str) {
        self::signal(self.pid(), signal);
    }

    /// Waits for it to exit, killing it past `timeout` (and then failing).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_exit(&mut self.child, timeout)
        }));
        waited.unwrap_or_else(|panic| {
            eprintln!("vigil's log:\n{}", self.tail());
            std::panic::resume_unwind(panic)
        })
    }

    /// Stops it with SIGTERM, asserts that it exited cleanly within [`STOP_TIMEOUT`],
    /// and returns its log.
    pub fn stop(mut self) -> String {
        self.signal("TERM");
        let status = self.wait_exit(STOP_TIMEOUT);
        assert!(
            status.success(),
            "vigil exited with {status}:\n{}",
            self.tail()
        );
        self.log()
    }

    /// Kills it with SIGKILL, as a crash would, and waits for it.
    pub fn kill(mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Vigil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log file as it is being written (a read can end inside a character).
pub fn read_log(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// The complete JSON lines of a log file (a line still being written is skipped).
pub fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    read_log(path)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// A JSON log line's message.
pub fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

/// The last 40 lines of a log below trace level, for a failure's message.
pub fn tail(path: &Path) -> String {
    let text = read_log(path);
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("\"TRACE\"")).collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Any child process of a test (a script, a second command), killed if the test ends
/// before it exits.
#[derive(Debug)]
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` to exit, killing it past `timeout` (and then failing).
pub fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait::until(
            &format!("the process exits (within {timeout:?})"),
            timeout,
            String::new,
            || child.try_wait().expect("wait for the process"),
        )
    }));
    match waited {
        Ok(status) => status,
        Err(panic) => {
            let _ = child.kill();
            let _ = child.wait();
            std::panic::resume_unwind(panic)
        }
    }
}

/// Sends `signal` (`TERM`, `HUP`, `KILL`…) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// A plain HTTP/1.1 GET on loopback; the body.
pub fn http_get(address: SocketAddr, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).expect("connect to vigil");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("set a read timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

impl Serve {
    /// Runs it through `program` with `args` (`unshare` and a shell, say), then vigil's
    /// path and arguments, with the same environment, working directory and log. The
    /// wrapper must end by exec'ing what follows its own arguments (`exec "$@"`): the
    /// child's pid is then vigil's, and so are its signals, its `/proc` entry and its exit.
    /// Settings made after this call still reach vigil, through the wrapper.
    pub fn wrapped<S: AsRef<OsStr>>(
        mut self,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        let inner = &self.command;
        let mut command = Command::new(program);
        command
            .args(args)
            .arg(inner.get_program())
            .args(inner.get_args());
        if let Some(dir) = inner.get_current_dir() {
            command.current_dir(dir);
        }
        // [`command`] cleared the environment: what it set, and what was set since, is
        // all there is to pass on.
        command.env_clear();
        for (key, value) in inner.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command.stdin(Stdio::null());
        self.command = command;
        self
    }
}
