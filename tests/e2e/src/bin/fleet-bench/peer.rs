//! The peer: Prometheus blackbox_exporter probing the same HTTPS health URLs as vigil's
//! `http` plugin, each with its cluster's CA (a TLS module per cluster), driven at a
//! steady rate with at most vigil's concurrency in flight.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use vigil_e2e::proc_stats::cpu_seconds;

use crate::CONCURRENCY;
use crate::vigil::{Running, free_address, request};

/// One health URL and the PEM of the CA its server certificate chains to.
pub struct Target {
    pub url: String,
    pub ca_pem: String,
}

/// What the peer did over its window.
pub struct PeerRun {
    pub probes: u64,
    pub seconds: f64,
    pub cpu_ms_per_probe: f64,
}

/// blackbox_exporter, configured with one module per target.
pub struct Blackbox {
    _process: Running,
    pid: u32,
    listen: std::net::SocketAddr,
}

impl Blackbox {
    /// Writes the configuration and the CA files into `work` and starts `binary`.
    pub async fn start(binary: &Path, work: &Path, targets: &[Target]) -> Result<Self, String> {
        std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
        let mut config = String::from("modules:\n");
        for (i, target) in targets.iter().enumerate() {
            let ca: PathBuf = work.join(format!("ca-{i}.pem"));
            std::fs::write(&ca, &target.ca_pem).map_err(|e| e.to_string())?;
            // The fake API servers authenticate every request: an anonymous GET of
            // /readyz is a 401, which vigil's probe expects as well.
            let _ = write!(
                config,
                "  c{i}:\n    prober: http\n    timeout: 5s\n    http:\n      \
                 valid_status_codes: [401]\n      preferred_ip_protocol: ip4\n      \
                 tls_config:\n        ca_file: {}\n",
                ca.display()
            );
        }
        let file = work.join("blackbox.yml");
        std::fs::write(&file, config).map_err(|e| e.to_string())?;
        let listen = free_address()?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--web.listen-address={listen}"))
            .arg("--log.level=warn")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let pid = child.id();
        let blackbox = Self {
            _process: Running(child),
            pid,
            listen,
        };
        let started = Instant::now();
        while request(listen, "GET", "/-/healthy", None, None)
            .await
            .is_none_or(|(_, status, _)| status != 200)
        {
            if started.elapsed() > Duration::from_secs(60) {
                return Err("blackbox_exporter did not start within 60 s".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(blackbox)
    }

    /// Probes the targets round-robin at `rate` per second for a warm-up of two seconds,
    /// then for `seconds`, and measures the window. Every probe must succeed.
    pub async fn run(
        &self,
        targets: &[Target],
        rate: f64,
        seconds: u64,
    ) -> Result<PeerRun, String> {
        let urls: Arc<Vec<String>> = Arc::new(targets.iter().map(|t| t.url.clone()).collect());
        self.drive(&urls, rate, Duration::from_secs(2)).await?;
        let cpu_before = cpu_seconds(self.pid);
        let started = Instant::now();
        let probes = self
            .drive(&urls, rate, Duration::from_secs(seconds))
            .await?;
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(self.pid) - cpu_before;
        Ok(PeerRun {
            probes,
            seconds,
            cpu_ms_per_probe: cpu * 1e3 / probes.max(1) as f64,
        })
    }

    async fn drive(
        &self,
        urls: &Arc<Vec<String>>,
        rate: f64,
        length: Duration,
    ) -> Result<u64, String> {
        let slots = Arc::new(Semaphore::new(CONCURRENCY));
        let failed = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let mut sent = 0_u64;
        loop {
            let at = start + Duration::from_secs_f64(sent as f64 / rate);
            if at.duration_since(start) >= length {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
            let permit = Arc::clone(&slots)
                .acquire_owned()
                .await
                .map_err(|e| e.to_string())?;
            let i = usize::try_from(sent).unwrap_or(0) % urls.len();
            let path = format!("/probe?module=c{i}&target={}", urls[i]);
            let (listen, failed) = (self.listen, Arc::clone(&failed));
            tasks.spawn(async move {
                let answer = request(listen, "GET", &path, None, None).await;
                if !answer.is_some_and(|(_, status, body)| {
                    status == 200 && body.lines().any(|l| l == "probe_success 1")
                }) {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            });
            sent += 1;
        }
        while tasks.join_next().await.is_some() {}
        match failed.load(Ordering::Relaxed) {
            0 => Ok(sent),
            n => Err(format!("{n} of {sent} blackbox_exporter probes failed")),
        }
    }
}
