//! Fleet benchmark: the whole engine against N fake clusters, beside the floor.
//!
//! Starts `fake-kube` with N clusters (one kubeconfig file each, client certificates
//! embedded) as its own process, then `vigil serve` on that kubeconfig directory with the
//! first-party plugins and a fresh SQLite file, and measures from outside, through
//! `/metrics` and `/proc`:
//!
//! - start to discovery done (every cluster in the database);
//! - the burst: from the first outcome to the last cluster's first outcome, and from start
//!   to the last first outcome;
//! - vigil's CPU time per probe over the burst, and its peak RSS;
//! - a single `GET /api/v1/clusters?limit=1` while the burst runs (p99).
//!
//! Then, on the same clusters, the floor: the test kit's native prober making the same
//! fresh TLS connection and namespace request per cluster at the same concurrency, with no
//! Wasm and no database; and the ratios of vigil to it.
//!
//! ```text
//! cargo build --release -p vigil -p vigil-fake-kube -p vigil-e2e   # and the plugins
//! target/release/fleet-bench --clusters 10000
//! ```
//!
//! Exits non-zero when a cluster gets no outcome before `--deadline` seconds, or when a
//! probe of the floor fails; it never judges a time.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vigil_decision::ProbeOutcome;
use vigil_e2e::NativeProber;
use vigil_e2e::fake_kube::{FakeKubeProcess, materials};
use vigil_e2e::proc_stats::{cpu_seconds, memory_mib};

/// vigil's default probe concurrency, which the floor uses too.
const CONCURRENCY: usize = 64;

struct Options {
    clusters: usize,
    deadline: Duration,
    vigil: PathBuf,
    fake_kube: PathBuf,
    plugin_dir: PathBuf,
}

fn options() -> Result<Options, String> {
    let here = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut options = Options {
        clusters: 1_000,
        deadline: Duration::from_secs(600),
        vigil: here.with_file_name("vigil"),
        fake_kube: here.with_file_name("fake-kube"),
        // The first-party plugins cargo built with this binary (vigil-test-support).
        plugin_dir: vigil_test_support::first_party_dir(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--clusters" => options.clusters = usize::try_from(number()?).unwrap_or(usize::MAX),
            "--deadline" => options.deadline = Duration::from_secs(number()?),
            "--vigil" => options.vigil = PathBuf::from(value),
            "--fake-kube" => options.fake_kube = PathBuf::from(value),
            "--plugin-dir" => options.plugin_dir = PathBuf::from(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    for (what, path) in [("vigil", &options.vigil), ("fake-kube", &options.fake_kube)] {
        if !path.is_file() {
            return Err(format!("{what} not found at {}", path.display()));
        }
    }
    if !options.plugin_dir.join("kubeconfig-file.wasm").is_file() {
        return Err(format!(
            "no kubeconfig-file plugin in {}",
            options.plugin_dir.display()
        ));
    }
    Ok(options)
}

/// A child process killed when the benchmark ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address no one listens on now.
fn free_address() -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}

/// `vigil serve` on the kubeconfig directory, with a fresh database and plugin cache in
/// `work`, only the burst scheduled (an interval of an hour), and no environment of ours.
fn start_vigil(
    options: &Options,
    kubeconfigs: &Path,
    work: &Path,
    listen: SocketAddr,
) -> Result<Running, String> {
    let child = Command::new(&options.vigil)
        .arg("serve")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", work)
        .env("RUST_LOG", "warn")
        .env("KUBECONFIG_DIR", kubeconfigs)
        .env("KUBECONFIG_PATH", "")
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", work.join("vigil.db").display()),
        )
        .env("VIGIL_PLUGIN_DIR", &options.plugin_dir)
        .env("VIGIL_CACHE_DIR", work.join("cache"))
        .env("VIGIL_LISTEN", listen.to_string())
        .env("CLUSTER_HEALTH_INTERVAL", "3600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", options.vigil.display()))?;
    Ok(Running(child))
}

/// One `GET path` over a fresh connection: the time it took and the body, or `None` when
/// the server did not answer 200 (not listening yet, say).
async fn get(address: SocketAddr, path: &str) -> Option<(Duration, String)> {
    let started = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let elapsed = started.elapsed();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| (elapsed, body.to_owned()))
}

/// What `/metrics` says of the fleet.
#[derive(Debug, Default, Clone, Copy)]
struct Fleet {
    /// Clusters in the database, whatever their status.
    known: u64,
    /// Clusters whose status is not UNKNOWN any more.
    decided: u64,
    /// Probes ended.
    probes: u64,
}

fn read_fleet(metrics: &str) -> Fleet {
    let mut fleet = Fleet::default();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value = value.parse::<f64>().unwrap_or(0.0) as u64;
        if series.starts_with("vigil_clusters{") {
            fleet.known += value;
            if !series.contains("status=\"UNKNOWN\"") {
                fleet.decided += value;
            }
        } else if series.starts_with("vigil_probe_duration_seconds_count{") {
            fleet.probes += value;
        }
    }
    fleet
}

/// What one run of vigil measured.
struct VigilRun {
    discovery: Duration,
    first_outcome: Duration,
    last_outcome: Duration,
    cpu_seconds: f64,
    probes: u64,
    peak_rss_mib: f64,
    get_p99: Duration,
    gets: usize,
}

async fn run_vigil(options: &Options, kubeconfigs: &Path, work: &Path) -> Result<VigilRun, String> {
    let listen = free_address()?;
    let started = Instant::now();
    let vigil = start_vigil(options, kubeconfigs, work, listen)?;
    let pid = vigil.0.id();
    let n = u64::try_from(options.clusters).unwrap_or(u64::MAX);
    let (mut discovery, mut first_outcome) = (None, None);
    let mut latencies = Vec::new();
    loop {
        if started.elapsed() > options.deadline {
            return Err(format!(
                "not every cluster had an outcome within {} s",
                options.deadline.as_secs()
            ));
        }
        if let Some((_, metrics)) = get(listen, "/metrics").await {
            let fleet = read_fleet(&metrics);
            if discovery.is_none() && fleet.known >= n {
                discovery = Some(started.elapsed());
            }
            if first_outcome.is_none() && fleet.probes > 0 {
                first_outcome = Some(started.elapsed());
            }
            if fleet.known >= n && fleet.decided >= n {
                let last_outcome = started.elapsed();
                let cpu = cpu_seconds(pid);
                let peak = memory_mib(pid, "VmHWM:");
                latencies.sort();
                let p99 = latencies
                    .get((latencies.len() * 99).div_ceil(100).saturating_sub(1))
                    .copied()
                    .unwrap_or_default();
                return Ok(VigilRun {
                    discovery: discovery.unwrap_or(last_outcome),
                    first_outcome: first_outcome.unwrap_or(last_outcome),
                    last_outcome,
                    cpu_seconds: cpu,
                    probes: fleet.probes,
                    peak_rss_mib: peak,
                    get_p99: p99,
                    gets: latencies.len(),
                });
            }
            // A single GET while the burst runs, as an operator's page would make.
            if first_outcome.is_some()
                && let Some((latency, _)) = get(listen, "/api/v1/clusters?limit=1").await
            {
                latencies.push(latency);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the floor measured: every cluster probed once, natively.
struct FloorRun {
    wall: Duration,
    cpu_seconds: f64,
    probes: usize,
}

async fn run_floor(kubeconfigs: &Path) -> Result<FloorRun, String> {
    let materials = Arc::new(materials(kubeconfigs));
    let prober = NativeProber::default();
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let own = std::process::id();
    let cpu_before = cpu_seconds(own);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (materials, prober, next, failed) = (
            Arc::clone(&materials),
            prober.clone(),
            Arc::clone(&next),
            Arc::clone(&failed),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(material) = materials.get(i) else {
                    return;
                };
                if !matches!(prober.probe_material(material).await, ProbeOutcome::Healthy) {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?;
    }
    let wall = started.elapsed();
    let failures = failed.load(Ordering::Relaxed);
    if failures > 0 {
        return Err(format!("{failures} probes of the floor failed"));
    }
    Ok(FloorRun {
        wall,
        cpu_seconds: cpu_seconds(own) - cpu_before,
        probes: materials.len(),
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let options = options()?;
    let work = std::env::temp_dir().join(format!("fleet-bench-{}", std::process::id()));
    let kubeconfigs = work.join("kubeconfigs");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let result = async {
        // N clusters on 127.78.x.y:6443, client certificates embedded in their kubeconfigs.
        let fleet = FakeKubeProcess::start(
            &options.fake_kube,
            options.clusters,
            "embedded",
            78,
            &kubeconfigs,
        )?;
        let vigil = run_vigil(&options, &kubeconfigs, &work).await?;
        let floor = run_floor(&kubeconfigs).await?;
        drop(fleet);
        Ok::<_, String>((vigil, floor))
    }
    .await;
    let _ = std::fs::remove_dir_all(&work);
    let (vigil, floor) = result?;

    let seconds = |d: Duration| d.as_secs_f64();
    let burst = vigil.last_outcome.saturating_sub(vigil.first_outcome);
    let vigil_ms_per_probe = vigil.cpu_seconds * 1e3 / vigil.probes.max(1) as f64;
    let floor_ms_per_probe = floor.cpu_seconds * 1e3 / floor.probes.max(1) as f64;
    println!("| measure | vigil | floor | vigil / floor |");
    println!("|---|---|---|---|");
    println!("| clusters | {} | {} | |", options.clusters, floor.probes);
    println!(
        "| start to discovery done (s) | {:.2} | | |",
        seconds(vigil.discovery)
    );
    println!(
        "| burst: first to last first outcome (s) | {:.2} | {:.2} | {:.1} |",
        seconds(burst),
        seconds(floor.wall),
        seconds(burst) / seconds(floor.wall).max(1e-9)
    );
    println!(
        "| start to last first outcome (s) | {:.2} | | |",
        seconds(vigil.last_outcome)
    );
    println!(
        "| CPU per probe, start-up included (ms) | {vigil_ms_per_probe:.2} | {floor_ms_per_probe:.2} | {:.1} |",
        vigil_ms_per_probe / floor_ms_per_probe.max(1e-9)
    );
    println!("| peak RSS (MiB) | {:.0} | | |", vigil.peak_rss_mib);
    println!(
        "| single GET during the burst, p99 (ms) | {:.1} ({} GETs) | | |",
        vigil.get_p99.as_secs_f64() * 1e3,
        vigil.gets
    );
    println!(
        "\nevery one of the {} clusters had an outcome ({} probes)",
        options.clusters, vigil.probes
    );
    Ok(())
}
