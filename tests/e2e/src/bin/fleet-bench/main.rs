//! Fleet benchmark: the whole engine against N fake clusters, beside the floor and a peer.
//!
//! Starts `fake-kube` with N clusters (one kubeconfig file each, client certificates
//! embedded) as its own process, and measures `vigil serve` (the first-party plugins, a
//! fresh SQLite file) from outside, through `/metrics` and `/proc`:
//!
//! - **fleet**: vigil discovers the N kubeconfig files. Start to discovery done; the
//!   burst, from the first outcome to the last cluster's first outcome, and from start to
//!   it; CPU per probe over the burst (start-up included); peak RSS; a single
//!   `GET /api/v1/clusters?limit=1` while the burst runs (p99). Then a second, healthy
//!   cycle (CPU and writes per probe), and a mass failure: every cluster refuses
//!   connections for two cycles — the brake must hold at the end, and the CPU per probe
//!   of each cycle is reported.
//! - **floor**: the test kit's native prober making the same fresh TLS connection and
//!   namespace request per cluster at the same concurrency, with no Wasm and no database.
//! - **steady**: for each rate, clusters registered through the API at that rate (so
//!   their probes stay spread as a real fleet's are) with the interval that makes it the
//!   probe rate; vigil's CPU and writes per probe and how late probes start (p99) over a
//!   window of several intervals.
//! - **peer**: blackbox_exporter and vigil's `http` plugin probing the same HTTPS
//!   `/readyz` URLs at the same rate, CPU per probe of each.
//!
//! ```text
//! cargo build --release -p vigil -p vigil-fake-kube -p vigil-e2e
//! target/release/fleet-bench --clusters 10000
//! ```
//!
//! Exits non-zero when a cluster gets no outcome in time, when a probe that should
//! succeed fails, or when the brake does not hold in the mass failure; it never judges a
//! time.

#![forbid(unsafe_code)]

mod paced;
mod peer;
mod vigil;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use vigil_decision::ProbeOutcome;
use vigil_domain::discovery::{Sources, discover};
use vigil_e2e::NativeProber;
use vigil_e2e::fake_kube::{FakeKubeProcess, materials};
use vigil_e2e::proc_stats::{cpu_seconds, memory_mib};

use crate::vigil::{Setup, Vigil, Window, request};

/// vigil's default probe concurrency, which the floor and the peer's driver use too.
pub const CONCURRENCY: usize = 64;

struct Options {
    clusters: usize,
    deadline: Duration,
    vigil: PathBuf,
    fake_kube: PathBuf,
    plugin_dir: PathBuf,
    blackbox: PathBuf,
    interval: Option<u64>,
    rates: Vec<f64>,
    peer_rates: Vec<f64>,
    phases: Vec<String>,
}

impl Options {
    fn runs(&self, phase: &str) -> bool {
        self.phases.iter().any(|p| p == phase)
    }
}

fn numbers(flag: &str, value: &str) -> Result<Vec<f64>, String> {
    value
        .split(',')
        .map(|v| match v.trim().parse::<f64>() {
            Ok(n) if n > 0.0 => Ok(n),
            _ => Err(format!("{flag}: not a positive number: {v}")),
        })
        .collect()
}

fn options() -> Result<Options, String> {
    let here = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut options = Options {
        clusters: 1_000,
        deadline: Duration::from_secs(900),
        vigil: here.with_file_name("vigil"),
        fake_kube: here.with_file_name("fake-kube"),
        // The first-party plugins cargo built with this binary (vigil-test-support).
        plugin_dir: vigil_test_support::first_party_dir(),
        blackbox: PathBuf::from("/usr/bin/prometheus-blackbox-exporter"),
        interval: None,
        rates: vec![100.0, 500.0, 1000.0, 2000.0],
        peer_rates: vec![100.0, 500.0],
        phases: ["fleet", "steady", "peer"].map(str::to_owned).to_vec(),
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
            "--interval" => options.interval = Some(number()?.max(1)),
            "--vigil" => options.vigil = PathBuf::from(value),
            "--fake-kube" => options.fake_kube = PathBuf::from(value),
            "--plugin-dir" => options.plugin_dir = PathBuf::from(value),
            "--blackbox" => options.blackbox = PathBuf::from(value),
            "--rates" => options.rates = numbers(&flag, &value)?,
            "--peer-rates" => options.peer_rates = numbers(&flag, &value)?,
            "--phases" => {
                options.phases = value.split(',').map(str::to_owned).collect();
                if let Some(bad) = options
                    .phases
                    .iter()
                    .find(|p| !["fleet", "burst", "steady", "peer"].contains(&p.as_str()))
                {
                    return Err(format!(
                        "--phases: unknown phase {bad} (fleet, burst, steady, peer)"
                    ));
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    for (what, path) in [("vigil", &options.vigil), ("fake-kube", &options.fake_kube)] {
        if !path.is_file() {
            return Err(format!("{what} not found at {}", path.display()));
        }
    }
    if options.runs("peer") && !options.blackbox.is_file() {
        return Err(format!(
            "blackbox_exporter not found at {} (Debian package prometheus-blackbox-exporter; \
             or leave the peer out with --phases fleet,steady)",
            options.blackbox.display()
        ));
    }
    for plugin in ["kubeconfig-file", "http"] {
        if !options.plugin_dir.join(format!("{plugin}.wasm")).is_file() {
            return Err(format!(
                "no {plugin} plugin in {}",
                options.plugin_dir.display()
            ));
        }
    }
    Ok(options)
}

/// A plugin directory with the probe plugins of `from` alone: no audit plugin, whose
/// drain audits of every ONLINE cluster would add their cost to the probes'.
fn probe_plugins(from: &Path, work: &Path) -> Result<PathBuf, String> {
    let dir = work.join("plugins.d");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for plugin in ["kubeconfig-file", "http"] {
        for extension in ["wasm", "toml"] {
            let file = format!("{plugin}.{extension}");
            if from.join(&file).is_file() {
                std::fs::copy(from.join(&file), dir.join(&file))
                    .map_err(|e| format!("copying {file}: {e}"))?;
            }
        }
    }
    Ok(dir)
}

/// The end of what every vigil of this run logged, after a failure.
fn show_logs(work: &Path) {
    let Ok(entries) = std::fs::read_dir(work) else {
        return;
    };
    for entry in entries.flatten() {
        let log = entry.path().join(vigil::LOG);
        if let Ok(text) = std::fs::read_to_string(&log) {
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- the end of {}:", log.display());
            for line in &lines[lines.len().saturating_sub(20)..] {
                eprintln!("{line}");
            }
        }
    }
}

/// What the fleet phase measured.
struct FleetRun {
    discovery: Duration,
    first_outcome: Duration,
    last_outcome: Duration,
    burst_cpu_ms_per_probe: f64,
    peak_rss_mib: f64,
    get_p99: Duration,
    gets: usize,
    /// The cycles after the burst; `None` when only the burst ran.
    cycles: Option<Cycles>,
}

/// The second, healthy cycle and the two of the mass failure.
struct Cycles {
    healthy: Window,
    failing_onset: Window,
    failing_held: Window,
    suppressed: u64,
}

async fn run_fleet(
    options: &Options,
    fake: &FakeKubeProcess,
    kubeconfigs: &Path,
    work: &Path,
) -> Result<FleetRun, String> {
    let n = u64::try_from(options.clusters).unwrap_or(u64::MAX);
    let interval = options
        .interval
        .unwrap_or(20 + u64::try_from(options.clusters / 250).unwrap_or(0));
    let vigil = Vigil::start(&Setup {
        binary: &options.vigil,
        plugin_dir: &options.plugin_dir,
        kubeconfigs: Some(kubeconfigs),
        credential_dir: None,
        interval,
        work: work.to_path_buf(),
    })?;
    let pid = vigil.pid();
    let (mut discovery, mut first_outcome) = (None, None);
    let mut latencies = Vec::new();
    let burst_end = loop {
        if vigil.started.elapsed() > options.deadline {
            return Err(format!(
                "not every cluster had an outcome within {} s",
                options.deadline.as_secs()
            ));
        }
        if let Some(fleet) = vigil.scrape().await {
            let elapsed = vigil.started.elapsed();
            if discovery.is_none() && fleet.known >= n {
                discovery = Some(elapsed);
            }
            if first_outcome.is_none() && fleet.probes > 0 {
                first_outcome = Some(elapsed);
            }
            if fleet.known >= n && fleet.decided >= n {
                break vigil.mark().await?;
            }
            // A single GET while the burst runs, as an operator's page would make.
            if first_outcome.is_some()
                && let Some((latency, 200, _)) =
                    request(vigil.listen, "GET", "/api/v1/clusters?limit=1", None, None).await
            {
                latencies.push(latency);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let last_outcome = burst_end.at.duration_since(vigil.started);
    let peak_rss_mib = memory_mib(pid, "VmHWM:");
    let probes_at_burst = burst_end.scrape.probes;
    latencies.sort();
    let get_p99 = latencies
        .get((latencies.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default();

    let burst = FleetRun {
        discovery: discovery.unwrap_or(last_outcome),
        first_outcome: first_outcome.unwrap_or(last_outcome),
        last_outcome,
        burst_cpu_ms_per_probe: burst_end.cpu * 1e3 / burst_end.scrape.probes.max(1) as f64,
        peak_rss_mib,
        get_p99,
        gets: latencies.len(),
        cycles: None,
    };
    if !options.runs("fleet") {
        return Ok(burst);
    }

    // The second cycle, every cluster healthy again.
    let every = Duration::from_millis(200);
    let cycle = |k: u64| move |s: &vigil::Scrape| s.probes >= probes_at_burst + k * n;
    vigil
        .wait_for(options.deadline, every, "a second cycle", cycle(1))
        .await?;
    let healthy_end = vigil.mark().await?;

    // Every cluster refuses connections: two cycles, the brake engaging in the first.
    let body = json!({ "fault": { "kind": "refuse" } }).to_string();
    match request(
        fake.control().parse().map_err(|_| "bad control address")?,
        "PUT",
        "/fault",
        None,
        Some(&body),
    )
    .await
    {
        Some((_, 200, _)) => {}
        other => return Err(format!("could not make the clusters refuse: {other:?}")),
    }
    vigil
        .wait_for(options.deadline, every, "a failing cycle", cycle(2))
        .await?;
    let onset_end = vigil.mark().await?;
    vigil
        .wait_for(options.deadline, every, "a second failing cycle", cycle(3))
        .await?;
    let held_end = vigil.mark().await?;
    if !held_end.scrape.brake_holding || held_end.scrape.offline > 0 {
        return Err(format!(
            "mass failure: the brake {} and {} clusters are OFFLINE",
            if held_end.scrape.brake_holding {
                "holds"
            } else {
                "does not hold"
            },
            held_end.scrape.offline
        ));
    }
    let body = json!({ "fault": { "kind": "none" } }).to_string();
    let control = fake.control().parse().map_err(|_| "bad control address")?;
    if !matches!(
        request(control, "PUT", "/fault", None, Some(&body)).await,
        Some((_, 200, _))
    ) {
        return Err("could not bring the clusters back".to_owned());
    }
    Ok(FleetRun {
        peak_rss_mib: memory_mib(pid, "VmHWM:"),
        cycles: Some(Cycles {
            healthy: Window::between(&burst_end, &healthy_end),
            failing_onset: Window::between(&healthy_end, &onset_end),
            failing_held: Window::between(&onset_end, &held_end),
            suppressed: held_end.scrape.suppressed,
        }),
        ..burst
    })
}

/// What the floor measured: every cluster probed once, natively.
struct FloorRun {
    wall: Duration,
    cpu_ms_per_probe: f64,
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
        cpu_ms_per_probe: (cpu_seconds(own) - cpu_before) * 1e3 / materials.len().max(1) as f64,
        probes: materials.len(),
    })
}

/// The steady runs through `kubeconfig-file`: the clusters the kubeconfig files define,
/// registered by hand (their files readable through `VIGIL_CREDENTIAL_DIRS`).
async fn run_steady(
    options: &Options,
    kubeconfigs: &Path,
    work: &Path,
) -> Result<Vec<(f64, paced::Steady)>, String> {
    let discovered = discover(&Sources::new([], Some(kubeconfigs.to_path_buf()))).clusters;
    let mut runs: Vec<(f64, paced::Steady)> = Vec::new();
    for (k, &wanted) in options.rates.iter().enumerate() {
        // At least 1,000 clusters, and as many as one interval of a second needs; the
        // rate is then what the whole seconds of the interval give.
        let n = discovered.len().min((wanted as usize).max(1_000));
        let rate = n as f64 / (n as f64 / wanted).round().max(1.0);
        if runs.iter().any(|(done, _)| *done == rate) {
            continue;
        }
        let bodies: Vec<serde_json::Value> = discovered[..n]
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "endpoint": c.endpoint,
                    "kubeconfig_secret_ref": c.reference,
                })
            })
            .collect();
        let run = paced::steady(
            &options.vigil,
            &options.plugin_dir,
            Some(kubeconfigs),
            &work.join(format!("steady-{k}")),
            &bodies,
            rate,
        )
        .await?;
        runs.push((rate, run));
    }
    Ok(runs)
}

/// The peer runs: the first clusters' `/readyz` through vigil's `http` plugin and through
/// blackbox_exporter, rate by rate.
async fn run_peer(
    options: &Options,
    fake: &FakeKubeProcess,
    work: &Path,
) -> Result<Vec<(f64, paced::Steady, peer::PeerRun)>, String> {
    let control = fake.control().parse().map_err(|_| "bad control address")?;
    let n = options.clusters.min(1_000);
    let mut targets = Vec::new();
    for i in 0..n {
        let path = format!("/clusters/cluster-{i:05}");
        let Some((_, 200, body)) = request(control, "GET", &path, None, None).await else {
            return Err(format!("the control API did not answer {path}"));
        };
        let detail: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{path}: {e}"))?;
        let (Some(server), Some(ca)) = (detail["server"].as_str(), detail["ca_pem"].as_str())
        else {
            return Err(format!("{path}: no server or CA"));
        };
        targets.push(peer::Target {
            url: format!("{server}/readyz"),
            ca_pem: ca.to_owned(),
        });
    }
    let bodies: Vec<serde_json::Value> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({
                "name": format!("readyz-{i:05}"),
                "endpoint": t.url.trim_end_matches("/readyz"),
                "kubeconfig_secret_ref": t.url,
                "plugin": "http",
                "parameters": { "status": "401", "ca": t.ca_pem },
            })
        })
        .collect();
    let blackbox =
        peer::Blackbox::start(&options.blackbox, &work.join("blackbox"), &targets).await?;
    let mut runs = Vec::new();
    for (k, &rate) in options.peer_rates.iter().enumerate() {
        let vigil = paced::steady(
            &options.vigil,
            &options.plugin_dir,
            None,
            &work.join(format!("peer-{k}")),
            &bodies,
            rate,
        )
        .await?;
        let seconds = vigil.window.seconds.round().max(10.0) as u64;
        let peer = blackbox.run(&targets, rate, seconds).await?;
        runs.push((rate, vigil, peer));
    }
    Ok(runs)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let options = options()?;
    let work = std::env::temp_dir().join(format!("fleet-bench-{}", std::process::id()));
    let kubeconfigs = work.join("kubeconfigs");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let plugins = probe_plugins(&options.plugin_dir, &work)?;
    let options = Options {
        plugin_dir: plugins,
        ..options
    };
    let result = async {
        // N clusters on 127.78.x.y:6443, client certificates embedded in their kubeconfigs.
        let fake = FakeKubeProcess::start(
            &options.fake_kube,
            options.clusters,
            "embedded",
            78,
            &kubeconfigs,
        )?;
        let fleet = if options.runs("fleet") || options.runs("burst") {
            let fleet = run_fleet(&options, &fake, &kubeconfigs, &work.join("fleet")).await?;
            Some((fleet, run_floor(&kubeconfigs).await?))
        } else {
            None
        };
        let steady = if options.runs("steady") {
            run_steady(&options, &kubeconfigs, &work).await?
        } else {
            Vec::new()
        };
        let peer = if options.runs("peer") {
            run_peer(&options, &fake, &work).await?
        } else {
            Vec::new()
        };
        Ok::<_, String>((fleet, steady, peer))
    }
    .await;
    if result.is_err() {
        show_logs(&work);
    }
    let _ = std::fs::remove_dir_all(&work);
    let (fleet, steady, peer) = result?;
    if let Some((fleet, floor)) = &fleet {
        print_fleet(&options, fleet, floor);
    }
    if !steady.is_empty() {
        print_steady(
            &steady,
            fleet.as_ref().map(|(_, floor)| floor.cpu_ms_per_probe),
        );
    }
    if !peer.is_empty() {
        print_peer(&peer);
    }
    Ok(())
}

fn print_fleet(options: &Options, vigil: &FleetRun, floor: &FloorRun) {
    let seconds = |d: Duration| d.as_secs_f64();
    let burst = vigil.last_outcome.saturating_sub(vigil.first_outcome);
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    println!(
        "| {} clusters | vigil | floor | vigil / floor |",
        options.clusters
    );
    println!("|---|---|---|---|");
    println!(
        "| start to discovery done (s) | {:.2} | | |",
        seconds(vigil.discovery)
    );
    println!(
        "| burst: first to last first outcome (s) | {:.2} | {:.2} | {:.1} |",
        seconds(burst),
        seconds(floor.wall),
        ratio(seconds(burst), seconds(floor.wall))
    );
    println!(
        "| start to last first outcome (s) | {:.2} | | |",
        seconds(vigil.last_outcome)
    );
    println!(
        "| CPU per probe, burst, start-up included (ms) | {:.2} | {:.2} | {:.1} |",
        vigil.burst_cpu_ms_per_probe,
        floor.cpu_ms_per_probe,
        ratio(vigil.burst_cpu_ms_per_probe, floor.cpu_ms_per_probe)
    );
    if let Some(cycles) = &vigil.cycles {
        println!(
            "| CPU per probe, second cycle (ms) | {:.2} | {:.2} | {:.1} |",
            cycles.healthy.cpu_ms_per_probe,
            floor.cpu_ms_per_probe,
            ratio(cycles.healthy.cpu_ms_per_probe, floor.cpu_ms_per_probe)
        );
        println!(
            "| writes per probe, second cycle (bytes; calls) | {:.0}; {:.1} | | |",
            cycles.healthy.bytes_per_probe, cycles.healthy.writes_per_probe
        );
        println!(
            "| mass failure, CPU per probe: onset; held (ms) | {:.2}; {:.2} | | {:.1}; {:.1} × healthy |",
            cycles.failing_onset.cpu_ms_per_probe,
            cycles.failing_held.cpu_ms_per_probe,
            ratio(
                cycles.failing_onset.cpu_ms_per_probe,
                cycles.healthy.cpu_ms_per_probe
            ),
            ratio(
                cycles.failing_held.cpu_ms_per_probe,
                cycles.healthy.cpu_ms_per_probe
            )
        );
        println!(
            "| mass failure: brake | holds, {} failures suppressed, no cluster OFFLINE | | |",
            cycles.suppressed
        );
    }
    println!("| peak RSS (MiB) | {:.0} | | |", vigil.peak_rss_mib);
    println!(
        "| single GET during the burst, p99 (ms) | {:.1} ({} GETs) | | |",
        vigil.get_p99.as_secs_f64() * 1e3,
        vigil.gets
    );
    println!("| floor probes | | {} | |\n", floor.probes);
}

fn print_steady(runs: &[(f64, paced::Steady)], floor_ms: Option<f64>) {
    println!(
        "| steady, kubeconfig-file | clusters, interval | probes/s | CPU per probe (ms) | vigil / floor | writes per probe (bytes; calls) | start delay p99 (s) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (rate, run) in runs {
        let w = &run.window;
        println!(
            "| {rate}/s | {}, {} s | {:.0} | {:.2} | {} | {:.0}; {:.1} | ≤ {} |",
            run.clusters,
            run.interval,
            w.rate(),
            w.cpu_ms_per_probe,
            floor_ms.map_or(String::new(), |f| format!(
                "{:.1}",
                w.cpu_ms_per_probe / f.max(1e-9)
            )),
            w.bytes_per_probe,
            w.writes_per_probe,
            w.delay_p99
        );
    }
    println!();
}

fn print_peer(runs: &[(f64, paced::Steady, peer::PeerRun)]) {
    println!(
        "| HTTPS /readyz | vigil http plugin: probes/s, CPU per probe (ms) | blackbox_exporter: probes/s, CPU per probe (ms) | vigil / blackbox |"
    );
    println!("|---|---|---|---|");
    for (rate, vigil, peer) in runs {
        println!(
            "| {rate}/s | {:.0}, {:.2} | {:.0}, {:.2} | {:.2} |",
            vigil.window.rate(),
            vigil.window.cpu_ms_per_probe,
            peer.probes as f64 / peer.seconds.max(1e-9),
            peer.cpu_ms_per_probe,
            vigil.window.cpu_ms_per_probe / peer.cpu_ms_per_probe.max(1e-9)
        );
    }
    println!();
}
