//! `vigil serve` as the benchmark runs it, and what it reads of it from outside: plain
//! HTTP on loopback, `/metrics`, and `/proc`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vigil_e2e::proc_stats::{Writes, cpu_seconds, writes};

/// The bearer token of the benchmark's vigil, which registers clusters through the API.
pub const TOKEN: &str = "fleet-bench-token";

/// The file, in each vigil's own directory, that holds what it logged (warnings and
/// errors); the benchmark shows its end when a run fails.
pub const LOG: &str = "vigil.log";

/// A child process killed when the benchmark ends, however it ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address no one listens on now.
pub fn free_address() -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}

/// What one `vigil serve` is started with.
pub struct Setup<'a> {
    pub binary: &'a Path,
    pub plugin_dir: &'a Path,
    /// The kubeconfig directory it discovers; `None` for none (clusters registered by hand).
    pub kubeconfigs: Option<&'a Path>,
    /// Where kubeconfig files registered by hand may lie.
    pub credential_dir: Option<&'a Path>,
    /// Every cluster's probe interval, in seconds.
    pub interval: u64,
    /// Its own directory: database, plugin cache, `HOME`.
    pub work: PathBuf,
}

/// A running `vigil serve`.
pub struct Vigil {
    process: Running,
    pub listen: SocketAddr,
    pub started: Instant,
}

impl Vigil {
    /// Starts it with no environment of ours, a fresh database and its own API port.
    pub fn start(setup: &Setup<'_>) -> Result<Self, String> {
        std::fs::create_dir_all(&setup.work).map_err(|e| e.to_string())?;
        let empty = setup.work.join("no-kubeconfigs");
        std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
        let listen = free_address()?;
        let log = std::fs::File::create(setup.work.join(LOG)).map_err(|e| e.to_string())?;
        let mut command = Command::new(setup.binary);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &setup.work)
            .env("RUST_LOG", "warn")
            .env("KUBECONFIG_DIR", setup.kubeconfigs.unwrap_or(&empty))
            .env("KUBECONFIG_PATH", "")
            .env(
                "DATABASE_URL",
                format!("sqlite://{}", setup.work.join("vigil.db").display()),
            )
            .env("VIGIL_PLUGIN_DIR", setup.plugin_dir)
            // The plugins measured are those of the directory, no other.
            .env("VIGIL_PLUGINS_EMBEDDED", "false")
            .env("VIGIL_CACHE_DIR", setup.work.join("cache"))
            .env("VIGIL_LISTEN", listen.to_string())
            .env("VIGIL_API_TOKEN", TOKEN)
            .env("CLUSTER_HEALTH_INTERVAL", setup.interval.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(dir) = setup.credential_dir {
            command.env("VIGIL_CREDENTIAL_DIRS", dir);
        }
        let started = Instant::now();
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", setup.binary.display()))?;
        Ok(Self {
            process: Running(child),
            listen,
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// `/metrics` now, or `None` while it does not answer.
    pub async fn scrape(&self) -> Option<Scrape> {
        let (_, _, body) = request(self.listen, "GET", "/metrics", None, None).await?;
        Some(Scrape::parse(&body))
    }

    /// Waits, scraping every `every`, until `done` holds; an error past `deadline`
    /// (counted from start) naming `what`.
    pub async fn wait_for(
        &self,
        deadline: Duration,
        every: Duration,
        what: &str,
        done: impl Fn(&Scrape) -> bool,
    ) -> Result<Scrape, String> {
        loop {
            if let Some(scrape) = self.scrape().await
                && done(&scrape)
            {
                return Ok(scrape);
            }
            if self.started.elapsed() > deadline {
                return Err(format!(
                    "{what}: not within {} s of vigil's start",
                    deadline.as_secs()
                ));
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Its CPU time, what it wrote and what `/metrics` says, now.
    pub async fn mark(&self) -> Result<Mark, String> {
        let scrape = self.scrape().await.ok_or("vigil stopped answering")?;
        Ok(Mark {
            at: Instant::now(),
            cpu: cpu_seconds(self.pid()),
            writes: writes(self.pid()),
            scrape,
        })
    }

    /// Registers one cluster through the API.
    pub async fn register(&self, body: &serde_json::Value) -> Result<(), String> {
        let body = body.to_string();
        match request(
            self.listen,
            "POST",
            "/api/v1/clusters",
            Some(TOKEN),
            Some(&body),
        )
        .await
        {
            Some((_, 201, _)) => Ok(()),
            Some((_, status, answer)) => {
                Err(format!("registering a cluster answered {status}: {answer}"))
            }
            None => Err("registering a cluster: no answer".to_owned()),
        }
    }
}

/// One HTTP/1.1 request over a fresh connection: how long it took, the status and the
/// body; `None` when nothing answered.
pub async fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Option<(Duration, u16, String)> {
    let started = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(body);
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let elapsed = started.elapsed();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((elapsed, status, body.to_owned()))
}

/// What `/metrics` says of the fleet.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    /// Clusters in the database, whatever their status.
    pub known: u64,
    /// Clusters whose status is not UNKNOWN any more.
    pub decided: u64,
    pub online: u64,
    pub offline: u64,
    /// Probes ended.
    pub probes: u64,
    pub brake_holding: bool,
    pub suppressed: u64,
    /// `vigil_probe_start_delay_seconds` buckets: upper bound, cumulative count.
    pub delay: Vec<(f64, u64)>,
}

impl Scrape {
    fn parse(metrics: &str) -> Self {
        let mut scrape = Self::default();
        for line in metrics.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value = value.parse::<f64>().unwrap_or(0.0) as u64;
            if let Some(status) = series.strip_prefix("vigil_clusters{status=\"") {
                scrape.known += value;
                match status.trim_end_matches("\"}") {
                    "UNKNOWN" => {}
                    "ONLINE" => {
                        scrape.online += value;
                        scrape.decided += value;
                    }
                    "OFFLINE" => {
                        scrape.offline += value;
                        scrape.decided += value;
                    }
                    _ => scrape.decided += value,
                }
            } else if series.starts_with("vigil_probe_duration_seconds_count{") {
                scrape.probes += value;
            } else if series == "vigil_brake_holding" {
                scrape.brake_holding = value > 0;
            } else if series == "vigil_brake_suppressed_failures_total" {
                scrape.suppressed = value;
            } else if let Some(le) = series
                .strip_prefix("vigil_probe_start_delay_seconds_bucket{le=\"")
                .and_then(|rest| rest.strip_suffix("\"}"))
            {
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                scrape.delay.push((bound, value));
            }
        }
        scrape
    }
}

/// vigil's state at one instant.
#[derive(Debug, Clone)]
pub struct Mark {
    pub at: Instant,
    pub cpu: f64,
    pub writes: Writes,
    pub scrape: Scrape,
}

/// What vigil did between two marks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub seconds: f64,
    pub probes: u64,
    pub cpu_ms_per_probe: f64,
    pub bytes_per_probe: f64,
    pub writes_per_probe: f64,
    /// The 99th percentile of how late probes started, as the bucket bound it falls in.
    pub delay_p99: f64,
}

impl Window {
    pub fn between(from: &Mark, to: &Mark) -> Self {
        let probes = to.scrape.probes.saturating_sub(from.scrape.probes);
        let per = |x: f64| x / probes.max(1) as f64;
        Self {
            seconds: to.at.duration_since(from.at).as_secs_f64(),
            probes,
            cpu_ms_per_probe: per((to.cpu - from.cpu) * 1e3),
            bytes_per_probe: per(to.writes.bytes.saturating_sub(from.writes.bytes) as f64),
            writes_per_probe: per(to.writes.calls.saturating_sub(from.writes.calls) as f64),
            delay_p99: delay_quantile(&from.scrape.delay, &to.scrape.delay, 0.99),
        }
    }

    pub fn rate(&self) -> f64 {
        self.probes as f64 / self.seconds.max(1e-9)
    }
}

/// The bucket bound under which `q` of the probes started between two scrapes fall.
fn delay_quantile(from: &[(f64, u64)], to: &[(f64, u64)], q: f64) -> f64 {
    let before = |bound: f64| {
        from.iter()
            .find(|(b, _)| *b == bound)
            .map_or(0, |(_, count)| *count)
    };
    let deltas: Vec<(f64, u64)> = to
        .iter()
        .map(|(bound, count)| (*bound, count.saturating_sub(before(*bound))))
        .collect();
    let total = deltas.last().map_or(0, |(_, count)| *count);
    if total == 0 {
        return 0.0;
    }
    deltas
        .iter()
        .find(|(_, count)| *count as f64 >= q * total as f64)
        .map_or(f64::INFINITY, |(bound, _)| *bound)
}
