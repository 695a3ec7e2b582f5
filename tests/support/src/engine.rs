//! A scripted prober (with slow and hanging behaviours), an engine running on a
//! temporary SQLite file, kubeconfigs on loopback, and polling with a deadline.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use vigil_decision::{BrakeConfig, HealthPolicy, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_engine::worker::{Worker, WorkerSettings, WorkerStats};
use vigil_store::Store;

/// What the scripted prober does for one cluster.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Answer at once.
    Answer(ProbeOutcome),
    /// Answer after a delay.
    Slow(Duration, ProbeOutcome),
    /// Never answer.
    Hang,
}

impl Behaviour {
    pub fn healthy() -> Self {
        Self::Answer(ProbeOutcome::Healthy)
    }

    pub fn refused() -> Self {
        Self::Answer(refused())
    }
}

pub fn refused() -> ProbeOutcome {
    ProbeOutcome::Unhealthy {
        class: ReasonClass::Refused,
        message: "connection refused".to_owned(),
    }
}

/// A prober whose answers are set per cluster name, and which records every call.
#[derive(Debug, Clone, Default)]
pub struct ScriptedProber {
    behaviours: Arc<Mutex<HashMap<String, Behaviour>>>,
    default: Arc<Mutex<Option<Behaviour>>>,
    calls: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl ScriptedProber {
    pub fn new(default: Behaviour) -> Self {
        let prober = Self::default();
        *prober.default.lock().unwrap() = Some(default);
        prober
    }

    pub fn set(&self, cluster: &str, behaviour: Behaviour) {
        self.behaviours
            .lock()
            .unwrap()
            .insert(cluster.to_owned(), behaviour);
    }

    pub fn set_all(&self, behaviour: Behaviour) {
        self.behaviours.lock().unwrap().clear();
        *self.default.lock().unwrap() = Some(behaviour);
    }

    /// Times at which `cluster` was probed.
    pub fn calls(&self, cluster: &str) -> Vec<Instant> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _)| name == cluster)
            .map(|(_, at)| *at)
            .collect()
    }

    pub fn call_count(&self, cluster: &str) -> usize {
        self.calls(cluster).len()
    }

    pub fn total_calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

impl Prober for ScriptedProber {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        self.calls
            .lock()
            .unwrap()
            .push((target.name.clone(), Instant::now()));
        let behaviour = self
            .behaviours
            .lock()
            .unwrap()
            .get(&target.name)
            .cloned()
            .or_else(|| self.default.lock().unwrap().clone())
            .unwrap_or_else(Behaviour::healthy);
        match behaviour {
            Behaviour::Answer(outcome) => outcome,
            Behaviour::Slow(delay, outcome) => {
                tokio::time::sleep(delay).await;
                outcome
            }
            Behaviour::Hang => std::future::pending().await,
        }
    }
}

/// Worker settings for tests: short interval, threshold 2, brake on with an
/// explicit window.
pub fn settings(interval_seconds: u32, failure_threshold: u32) -> WorkerSettings {
    let defaults = HealthPolicy {
        interval_seconds,
        timeout_seconds: 1,
        failure_threshold,
        success_threshold: 1,
        start_period_seconds: 0,
        count_auth_failures: false,
        disabled: false,
    };
    let brake = BrakeConfig {
        enabled: true,
        ratio: 1.0,
        min_failed: 3,
        window_millis: 30_000,
    };
    let mut settings = WorkerSettings::new(defaults, brake, 64);
    settings.grace = Duration::from_millis(500);
    settings.max_idle = Duration::from_millis(100);
    settings.brake_window_explicit = true;
    settings
}

/// A temporary directory holding a SQLite file and kubeconfigs.
#[derive(Debug)]
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("vigil.db")
    }

    pub fn kubeconfigs(&self) -> PathBuf {
        let dir = self.dir.path().join("kubeconfigs");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub async fn store(&self) -> Store {
        Store::open_path(&self.db()).await.unwrap()
    }

    /// Writes a token kubeconfig for `context` on a loopback server and
    /// returns its reference `PATH#CONTEXT`.
    pub fn kubeconfig(&self, context: &str, port: u16) -> String {
        let path = self.kubeconfigs().join(format!("{context}.yaml"));
        write_kubeconfig(&path, context, port);
        format!("{}#{context}", path.display())
    }
}

pub fn write_kubeconfig(path: &Path, context: &str, port: u16) {
    let text = format!(
        "apiVersion: v1
kind: Config
current-context: {context}
clusters:
- name: {context}
  cluster:
    server: https://127.0.0.1:{port}
    insecure-skip-tls-verify: true
users:
- name: {context}-user
  user:
    token: test-token-{context}
contexts:
- name: {context}
  context:
    cluster: {context}
    user: {context}-user
"
    );
    std::fs::write(path, text).unwrap();
}

/// A worker running in the background until stopped.
#[derive(Debug)]
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<WorkerStats>,
}

impl Running {
    /// A worker probing through `prober` (a [`ScriptedProber`], or a real one).
    pub fn start<P: Prober>(store: Store, prober: P, settings: WorkerSettings) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let worker = Worker::new(store, prober, settings);
        let task = tokio::spawn(worker.run(async move {
            let _ = stopped.await;
        }));
        Self {
            stop: Some(stop),
            task,
        }
    }

    pub async fn stop(mut self) -> WorkerStats {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.unwrap()
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
