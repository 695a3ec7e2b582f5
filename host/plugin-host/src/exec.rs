//! Runs kubeconfig users' `exec` commands for `credentials.exec-credential`, and keeps what
//! they give.
//!
//! What may run is decided by [`ExecPolicy`] (the operator's allow-list file, checked on
//! the command's real path and its arguments, and the names a kubeconfig's `env` may set);
//! this module runs an admitted command as kubectl does — its arguments, an explicit
//! environment, `KUBERNETES_EXEC_INFO`, no standard input — through the launcher of
//! [`confine`] (its own home and temporary directory, Landlock, every process it starts
//! killed and reaped at its end), with a time limit and a cap on its output. Credentials are kept in memory only, per
//! plugin, exec configuration and cluster, until shortly before they expire: one run at a
//! time per key (concurrent probes wait for it and share its result, failure included), at
//! most [`ExecSettings::max_concurrent`] processes at once, of which keys whose last run
//! failed hold at most half; a failing command is run again only after a back-off that
//! doubles with each failure in a row; and the run whose credential the cluster answered
//! 401 to is forgotten, so that the next call runs the command again — once: its new
//! credential is served even when it is the same token.

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Semaphore;
use tracing::{debug, info};

use vigil_domain::exec::{
    self, Admitted, ClusterInfo, ExecPolicy, ExecSpec, IssuedCredential, MAX_OUTPUT_BYTES, OwnDirs,
};

pub mod confine;

use confine::Confinement;

/// How much of a command's standard error is read (its first line is quoted on failure).
const MAX_STDERR_BYTES: usize = 64 * 1024;

/// The longest a credential is kept before its expiry, at most: it is refreshed this long
/// before (or a fifth of its lifetime, for short-lived ones).
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// Keys kept beyond which expired and failed entries are forgotten.
const PRUNE_ABOVE: usize = 4096;

/// How exec commands run.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// What may run, with which environment.
    pub policy: ExecPolicy,
    /// The longest a command may run before its process group is killed.
    pub timeout: Duration,
    /// How many commands may run at once.
    pub max_concurrent: usize,
    /// How a command is started, and what it may touch.
    pub confinement: Confinement,
}

impl Default for ExecSettings {
    fn default() -> Self {
        Self {
            policy: ExecPolicy::default(),
            timeout: Duration::from_secs(10),
            max_concurrent: 4,
            confinement: Confinement::default(),
        }
    }
}

/// How long a launcher told to stop may take to kill what the command started and exit,
/// before its process group is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The key of a kept credential: a digest of the plugin, the exec configuration and the
/// cluster.
pub(crate) type ExecKey = [u8; 32];

/// The runner shared by every call of the runtime.
#[derive(Debug)]
pub(crate) struct ExecRunner {
    settings: ExecSettings,
    /// vigil's own `PATH`, where bare command names are looked up (as kubectl does).
    path_var: Option<OsString>,
    slots: Mutex<HashMap<ExecKey, Arc<Slot>>>,
    permits: Arc<Semaphore>,
    /// What keys whose last run failed must also hold to run: half the permits (at least
    /// one), so that commands that hang or fail never take every permit from the others.
    suspect_permits: Arc<Semaphore>,
    runs: AtomicU64,
}

/// The first wait before a failed command runs again; it doubles with each failure in a
/// row, up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_secs(5);
/// The longest wait before a failed command runs again.
const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Slot {
    state: tokio::sync::Mutex<SlotState>,
    /// The run whose credential the cluster refused: never served again. Kept beside the
    /// state, whose lock a run may hold for seconds, so that reporting a refusal never
    /// waits. By run, not by value: a tool that hands out its cached token again after a
    /// transient 401 is served that token from the new run.
    refused: Mutex<Option<u64>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

impl Slot {
    /// Whether the credential of `run` is the one the cluster refused.
    fn is_refused(&self, run: u64) -> bool {
        *self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            == Some(run)
    }
}

#[derive(Default)]
struct SlotState {
    credential: Option<Held>,
    /// The last run's failure: callers that were waiting for that run take it, and so do
    /// those that come before its back-off ends.
    failure: Option<Failure>,
}

#[derive(Debug)]
struct Failure {
    /// When the run ended.
    ended: Instant,
    message: String,
    /// Failed runs in a row.
    streak: u32,
}

impl Failure {
    /// When the command may run again.
    fn retry_at(&self) -> Instant {
        let wait = BACKOFF_FIRST
            .saturating_mul(1 << self.streak.saturating_sub(1).min(16))
            .min(BACKOFF_MAX);
        self.ended + wait
    }
}

impl std::fmt::Debug for SlotState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotState")
            .field("credential", &self.credential.is_some())
            .field("failure", &self.failure)
            .finish()
    }
}

struct Held {
    credential: IssuedCredential,
    /// The run that gave it.
    run: u64,
    /// Served until then; `None`: until the cluster refuses it.
    fresh_until: Option<Instant>,
}

impl Held {
    fn new(credential: IssuedCredential, run: u64, now: Instant) -> Self {
        let fresh_until = credential.expires_at.map(|expires| {
            let left = u64::try_from(expires)
                .ok()
                .map(|at| UNIX_EPOCH + Duration::from_secs(at))
                .and_then(|at| at.duration_since(SystemTime::now()).ok())
                .unwrap_or_default();
            let margin = EXPIRY_MARGIN.min(left / 5);
            now + left.saturating_sub(margin)
        });
        Self {
            credential,
            run,
            fresh_until,
        }
    }

    fn is_fresh(&self, now: Instant) -> bool {
        self.fresh_until.is_none_or(|until| now < until)
    }
}

/// What a call that was served a credential remembers, to report a 401 for it.
#[derive(Clone)]
pub(crate) struct Served {
    pub(crate) key: ExecKey,
    pub(crate) credential: IssuedCredential,
    /// The run that gave it.
    pub(crate) run: u64,
}

impl ExecRunner {
    pub(crate) fn new(settings: ExecSettings) -> Self {
        let permits = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        let suspect_permits = Arc::new(Semaphore::new((settings.max_concurrent / 2).max(1)));
        Self {
            settings,
            path_var: std::env::var_os("PATH"),
            slots: Mutex::new(HashMap::new()),
            permits,
            suspect_permits,
            runs: AtomicU64::new(0),
        }
    }

    /// Whether `spec` may run (see [`ExecPolicy::admit`]).
    pub(crate) fn admit(&self, spec: &ExecSpec) -> Result<Admitted, String> {
        self.settings.policy.admit(spec, self.path_var.as_deref())
    }

    /// How many commands have run.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// The key of `plugin`'s credential for `spec` on `cluster`.
    pub(crate) fn key(plugin: &str, spec: &ExecSpec, cluster: &ClusterInfo) -> ExecKey {
        let mut digest = Sha256::new();
        let mut field = |bytes: &[u8]| {
            digest.update((bytes.len() as u64).to_le_bytes());
            digest.update(bytes);
        };
        field(plugin.as_bytes());
        field(spec.api_version.as_deref().unwrap_or_default().as_bytes());
        field(spec.command.as_bytes());
        field(&(spec.args.len() as u64).to_le_bytes());
        for arg in &spec.args {
            field(arg.as_bytes());
        }
        field(&(spec.env.len() as u64).to_le_bytes());
        for (name, value) in &spec.env {
            field(name.as_bytes());
            field(value.as_bytes());
        }
        field(
            spec.interactive_mode
                .as_deref()
                .unwrap_or_default()
                .as_bytes(),
        );
        field(&[u8::from(spec.provide_cluster_info)]);
        field(
            spec.cluster_config
                .as_deref()
                .unwrap_or_default()
                .as_bytes(),
        );
        field(
            spec.kubeconfig_dir
                .as_deref()
                .map(|dir| dir.as_os_str().as_encoded_bytes())
                .unwrap_or_default(),
        );
        field(cluster.server.as_bytes());
        field(
            cluster
                .tls_server_name
                .as_deref()
                .unwrap_or_default()
                .as_bytes(),
        );
        field(&[u8::from(cluster.insecure_skip_tls_verify)]);
        field(
            cluster
                .certificate_authority_data
                .as_deref()
                .unwrap_or_default(),
        );
        digest.finalize().into()
    }

    fn slot(&self, key: ExecKey) -> Arc<Slot> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() > PRUNE_ABOVE {
            let now = Instant::now();
            slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot.state.try_lock().map_or(true, |state| {
                        state
                            .credential
                            .as_ref()
                            .is_some_and(|held| held.is_fresh(now))
                    })
            });
        }
        Arc::clone(slots.entry(key).or_default())
    }

    /// The credential for `key`: the kept one while fresh, else the command's new one. The
    /// run goes on in a task of its own when the caller stops waiting (its budget ran out),
    /// so that the next call finds its result.
    pub(crate) async fn credential(
        self: &Arc<Self>,
        key: ExecKey,
        spec: &ExecSpec,
        admitted: Admitted,
        cluster: Option<ClusterInfo>,
        wait: Duration,
    ) -> Result<(IssuedCredential, u64), String> {
        let asked = Instant::now();
        let slot = self.slot(key);
        let runner = Arc::clone(self);
        let spec = spec.clone();
        let task = tokio::spawn(async move {
            let mut state = slot.state.lock().await;
            let now = Instant::now();
            if let Some(held) = &state.credential
                && held.is_fresh(now)
                && !slot.is_refused(held.run)
            {
                return Ok((held.credential.clone(), held.run));
            }
            if let Some(failure) = &state.failure
                && (failure.ended >= asked || now < failure.retry_at())
            {
                return Err(failure.message.clone());
            }
            state.credential = None;
            let suspect = state.failure.is_some();
            let run = runner.runs.fetch_add(1, Ordering::Relaxed) + 1;
            let result = runner
                .run(&spec, &admitted, cluster.as_ref(), suspect)
                .await;
            match result {
                Ok(credential) => {
                    state.credential = Some(Held::new(credential.clone(), run, Instant::now()));
                    state.failure = None;
                    Ok((credential, run))
                }
                Err(message) => {
                    let streak = state.failure.as_ref().map_or(0, |f| f.streak) + 1;
                    state.failure = Some(Failure {
                        ended: Instant::now(),
                        message: message.clone(),
                        streak,
                    });
                    Err(message)
                }
            }
        });
        match tokio::time::timeout(wait, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => Err(format!("running its exec command failed: {error}")),
            Err(_) => Err(format!(
                "its exec command gave no credential within what was left of the probe's budget ({} ms); the result is kept for the next probe",
                wait.as_millis()
            )),
        }
    }

    /// Forgets `served`'s credential, if it is still the one kept: the cluster refused it.
    /// Only that run's: a later run's credential is served even if it is the same.
    pub(crate) fn refused(&self, served: &Served) {
        let slot = {
            let slots = self
                .slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slots.get(&served.key).cloned()
        };
        let Some(slot) = slot else { return };
        *slot
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(served.run);
        debug!("the cluster refused an exec credential: its command runs again at the next call");
    }

    /// Runs the admitted command once; `suspect` when its last run failed (it then holds
    /// one of the fewer suspect permits too).
    async fn run(
        &self,
        spec: &ExecSpec,
        admitted: &Admitted,
        cluster: Option<&ClusterInfo>,
        suspect: bool,
    ) -> Result<IssuedCredential, String> {
        let _suspect = if suspect {
            Some(
                Arc::clone(&self.suspect_permits)
                    .acquire_owned()
                    .await
                    .map_err(|_| "no exec command may run now".to_owned())?,
            )
        } else {
            None
        };
        let _permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| "no exec command may run now".to_owned())?;
        let program = admitted.program.display().to_string();
        let request = exec::exec_info(spec, admitted.version, cluster);
        let confinement = &self.settings.confinement;
        let (home, temp) = (confinement.home(), confinement.temp());
        let own = OwnDirs {
            home: &home,
            temp: &temp,
        };
        let environment = self
            .settings
            .policy
            .environment(spec, &request, own, |name| std::env::var_os(name));
        confinement
            .prepare()
            .map_err(|error| format!("its exec command {program} could not start: {error}"))?;
        let launched = confinement.launcher.is_some();
        let started = Instant::now();
        let mut child = confinement
            .command(&admitted.program, &spec.args)
            .env_clear()
            .envs(environment)
            // The launcher's standard input is its lifeline; the command's is /dev/null.
            .stdin(if launched {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("its exec command {program} could not start: {error}"))?;
        let stopper = Stopper {
            lifeline: Mutex::new(child.stdin.take()),
            group: child.id().and_then(|id| i32::try_from(id).ok()),
        };
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let work = async {
            let (out, err) = tokio::join!(
                read_capped(stdout, MAX_OUTPUT_BYTES, Some(&stopper)),
                read_capped(stderr, MAX_STDERR_BYTES, None),
            );
            let status = child.wait().await;
            (out, err, status)
        };
        let finished = tokio::time::timeout(self.settings.timeout, work).await;
        // Whatever happened, nothing the command started outlives it.
        stopper.stop();
        let Ok((out, err, status)) = finished else {
            if !launched
                || tokio::time::timeout(STOP_GRACE, child.wait())
                    .await
                    .is_err()
            {
                stopper.kill();
                let _ = child.wait().await;
            }
            info!(command = %program, "exec command killed at its time limit");
            return Err(format!(
                "its exec command {program} did not finish within {} s and was killed",
                self.settings.timeout.as_secs_f32()
            ));
        };
        let stdout = out.map_err(|Overflow| {
            format!(
                "its exec command {program} printed more than {} MiB and was killed",
                MAX_OUTPUT_BYTES >> 20
            )
        })?;
        let stderr = err.unwrap_or_default();
        let status = status.map_err(|error| {
            format!("its exec command {program} could not be waited for: {error}")
        })?;
        if !status.success() {
            let said = exec::first_line(&stderr);
            let said = if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            };
            return Err(format!(
                "its exec command {program} failed ({status}){said}"
            ));
        }
        let credential = exec::parse_output(&stdout, admitted.version)?;
        debug!(
            command = %program,
            elapsed_ms = started.elapsed().as_millis(),
            expires_at = credential.expires_at,
            "exec command gave a credential"
        );
        Ok(credential)
    }
}

/// A stream that said more than it may.
struct Overflow;

/// Ends a running command: through its launcher's lifeline, or by killing its process group
/// when it was started directly or its launcher does not exit.
struct Stopper {
    /// The launcher's standard input: closing it tells the launcher to kill everything the
    /// command started, and exit.
    lifeline: Mutex<Option<tokio::process::ChildStdin>>,
    /// The process group of the launcher (or of the command, started directly).
    group: Option<i32>,
}

impl Stopper {
    /// Asks the command to end: closes the lifeline, or, without a launcher, kills the group.
    fn stop(&self) {
        let lifeline = self
            .lifeline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match lifeline {
            Some(lifeline) => drop(lifeline),
            None => self.kill(),
        }
    }

    /// Kills the process group (the launcher has not exited: the group is still its own).
    fn kill(&self) {
        kill_group(self.group);
    }
}

/// Reads `stream` to its end, at most `cap` bytes: past it, the command is stopped (if
/// `stop` is given) and the read fails; without one, the rest is discarded.
async fn read_capped(
    stream: Option<impl AsyncRead + Unpin>,
    cap: usize,
    stop: Option<&Stopper>,
) -> Result<Vec<u8>, Overflow> {
    let Some(mut stream) = stream else {
        return Ok(Vec::new());
    };
    let mut bytes = Vec::new();
    let mut chunk = vec![0_u8; 16 * 1024];
    loop {
        let read = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(bytes),
            Ok(read) => read,
        };
        if bytes.len() + read > cap {
            if let Some(stop) = stop {
                stop.stop();
                return Err(Overflow);
            }
            let room = cap - bytes.len();
            bytes.extend_from_slice(&chunk[..room]);
            // Keep draining, so that the command is not blocked on a full pipe.
            continue;
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
}

/// Kills the process group `group` (the command and everything it started).
fn kill_group(group: Option<i32>) {
    if let Some(pid) = group.and_then(rustix::process::Pid::from_raw) {
        // Already gone is fine.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use vigil_domain::exec::allow_list::AllowList;
    use vigil_domain::exec::{API_V1, ExecVersion};

    /// A command that counts its runs in `dir/runs` and prints a token, after `sleep`
    /// seconds; `mode` `huge` prints more than the cap, `hang` leaves a child behind.
    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("get-token");
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho run >> {}/runs\n{body}\n", dir.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn spec_of(program: &Path) -> ExecSpec {
        ExecSpec {
            api_version: Some(API_V1.to_owned()),
            command: program.display().to_string(),
            args: Vec::new(),
            env: Vec::new(),
            interactive_mode: Some("Never".to_owned()),
            provide_cluster_info: false,
            install_hint: None,
            cluster_config: None,
            kubeconfig_dir: Some(PathBuf::from("/")),
        }
    }

    fn new_runner(program: &Path, timeout: Duration) -> Arc<ExecRunner> {
        Arc::new(ExecRunner::new(ExecSettings {
            policy: ExecPolicy::new(
                AllowList::parse(&program.display().to_string()).unwrap(),
                Vec::new(),
                Vec::new(),
                false,
            )
            .unwrap(),
            timeout,
            max_concurrent: 2,
            confinement: Confinement {
                dir: program.parent().unwrap().join("exec"),
                ..Confinement::default()
            },
        }))
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs")).map_or(0, |text| text.lines().count())
    }

    const TOKEN: &str = r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"kit-token"}}'"#;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_share_one_run_and_a_refusal_runs_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let program = script(&dir, &format!("sleep 0.3\n{TOKEN}"));
        let runner = new_runner(&program, Duration::from_secs(10));
        let spec = spec_of(&program);
        let key = ExecRunner::key("p", &spec, &ClusterInfo::default());
        let calls = (0..20).map(|_| {
            let runner = Arc::clone(&runner);
            let spec = spec.clone();
            tokio::spawn(async move {
                let admitted = runner.admit(&spec).unwrap();
                runner
                    .credential(key, &spec, admitted, None, Duration::from_secs(10))
                    .await
            })
        });
        for call in futures_util::future::join_all(calls).await {
            assert_eq!(call.unwrap().unwrap().0.token.as_deref(), Some("kit-token"));
        }
        assert_eq!((runs(&dir), runner.runs()), (1, 1));

        // Another plugin never gets this one's credential: its own run.
        let other = ExecRunner::key("q", &spec, &ClusterInfo::default());
        assert_ne!(other, key);

        let admitted = runner.admit(&spec).unwrap();
        let call = async || {
            runner
                .credential(key, &spec, admitted.clone(), None, Duration::from_secs(10))
                .await
                .unwrap()
        };
        let (credential, run) = call().await;
        assert_eq!(runs(&dir), 1, "kept");
        runner.refused(&Served {
            key,
            credential,
            run,
        });
        let (again, second) = call().await;
        assert_eq!(runs(&dir), 2, "run again after the refusal");
        // The same token from the new run (a tool handing out its cached token after a
        // transient 401) is served, not refused again: no third run.
        assert_eq!(again.token.as_deref(), Some("kit-token"));
        assert_ne!(run, second);
        for _ in 0..5 {
            call().await;
        }
        assert_eq!(runs(&dir), 2, "the new run's credential is kept");
    }

    #[tokio::test]
    async fn a_hanging_command_is_killed_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let program = script(
            &dir,
            &format!("sleep 600 &\necho $! > {}/child\nwait", dir.display()),
        );
        let runner = new_runner(&program, Duration::from_millis(500));
        let spec = spec_of(&program);
        let admitted = runner.admit(&spec).unwrap();
        let key = ExecRunner::key("p", &spec, &ClusterInfo::default());
        let error = runner
            .credential(key, &spec, admitted, None, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(error.contains("did not finish within 0.5 s"), "{error}");
        let child: i32 = std::fs::read_to_string(dir.join("child"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed (SIGKILL is delivered asynchronously, so it is waited for) and reaped by
        // init or by us: gone, or a zombie at most.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .is_ok_and(|stat| !stat.contains(") Z "))
        };
        vigil_test_support::wait::until_async_true(
            &format!("the command's child {child} is gone"),
            Duration::from_secs(5),
            async || !alive(),
        )
        .await;
        assert!(!alive(), "the command's child {child} outlived it");
    }

    #[tokio::test]
    async fn oversized_output_and_failures_are_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let program = script(&dir, "head -c 3000000 /dev/zero");
        let runner = new_runner(&program, Duration::from_secs(10));
        let spec = spec_of(&program);
        let admitted = runner.admit(&spec).unwrap();
        let key = ExecRunner::key("p", &spec, &ClusterInfo::default());
        let error = runner
            .credential(key, &spec, admitted, None, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(error.contains("more than 1 MiB"), "{error}");

        let failing = script(
            &dir,
            "echo 'error: no credentials for profile x' >&2\nexit 3",
        );
        let failing_runner = new_runner(&failing, Duration::from_secs(10));
        let failing_spec = spec_of(&failing);
        let admitted = failing_runner.admit(&failing_spec).unwrap();
        assert_eq!(admitted.version, ExecVersion::V1);
        let error = failing_runner
            .credential(key, &failing_spec, admitted, None, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(
            error.contains("exit status: 3")
                && error.contains("error: no credentials for profile x"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_failing_command_backs_off_before_it_runs_again() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let program = script(&dir, "echo 'error: expired' >&2\nexit 1");
        let runner = new_runner(&program, Duration::from_secs(10));
        let spec = spec_of(&program);
        let key = ExecRunner::key("p", &spec, &ClusterInfo::default());
        for _ in 0..5 {
            let admitted = runner.admit(&spec).unwrap();
            let error = runner
                .credential(key, &spec, admitted, None, Duration::from_secs(10))
                .await
                .unwrap_err();
            assert!(error.contains("error: expired"), "{error}");
        }
        assert_eq!(
            runs(&dir),
            1,
            "the calls within the back-off take the last failure"
        );
    }
}
