//! Load benchmark of the fake Kubernetes API server: starts `fake-kube` with N
//! clusters as its own process, probes them round-robin with the native
//! prober (a fresh TLS connection per request, as every vigil probe makes),
//! and reports requests per second and the server's CPU and memory, so that
//! other benchmarks can subtract the fake server's own cost.
//!
//! ```text
//! cargo build --release -p vigil-fake-kube -p vigil-e2e
//! target/release/fake-kube-load --clusters 10000 --seconds 20 --concurrency 32
//! ```

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vigil_decision::ProbeOutcome;
use vigil_e2e::NativeProber;
use vigil_e2e::fake_kube::{FakeKubeProcess, materials};
use vigil_e2e::proc_stats::{cpu_seconds, memory_mib};

struct Options {
    clusters: usize,
    seconds: u64,
    concurrency: usize,
    server: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        clusters: 10_000,
        seconds: 20,
        concurrency: 32,
        server: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("fake-kube"),
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
            "--clusters" => options.clusters = number()? as usize,
            "--seconds" => options.seconds = number()?,
            "--concurrency" => options.concurrency = number()? as usize,
            "--server" => options.server = PathBuf::from(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(options)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), String> {
    let options = options()?;
    let dir = std::env::temp_dir().join(format!("fake-kube-load-{}", std::process::id()));
    let started = Instant::now();
    let server = FakeKubeProcess::start(&options.server, options.clusters, "token", 77, &dir)?;
    let pid = server.pid();
    let startup = started.elapsed();
    let idle_rss = memory_mib(pid, "VmRSS:");
    let startup_cpu = cpu_seconds(pid);

    let materials = Arc::new(materials(&dir));
    if materials.len() != options.clusters {
        return Err(format!(
            "{} kubeconfigs resolved of {}",
            materials.len(),
            options.clusters
        ));
    }
    let prober = NativeProber::default();
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = cpu_seconds(pid);
    let load_started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..options.concurrency {
        let (materials, prober, ok, failed, next, stop) = (
            Arc::clone(&materials),
            prober.clone(),
            Arc::clone(&ok),
            Arc::clone(&failed),
            Arc::clone(&next),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize % materials.len();
                match prober.probe_material(&materials[i]).await {
                    ProbeOutcome::Healthy => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(options.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let wall = load_started.elapsed().as_secs_f64();
    let server_cpu = cpu_seconds(pid) - cpu_before;
    let requests = ok.load(Ordering::Relaxed);
    let errors = failed.load(Ordering::Relaxed);
    let loaded_rss = memory_mib(pid, "VmRSS:");
    let peak_rss = memory_mib(pid, "VmHWM:");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);

    println!("| measure | value |");
    println!("|---|---|");
    println!("| clusters | {} |", options.clusters);
    println!(
        "| start-up until ready (s) | {:.2} |",
        startup.as_secs_f64()
    );
    println!("| server CPU during start-up (s) | {startup_cpu:.2} |");
    println!("| server RSS when ready (MiB) | {idle_rss:.0} |");
    println!("| client concurrency | {} |", options.concurrency);
    println!("| namespace lists answered 200 | {requests} in {wall:.1} s |");
    println!("| failed requests | {errors} |");
    println!(
        "| requests per second (fresh TLS each) | {:.0} |",
        requests as f64 / wall
    );
    println!("| server CPU (cores busy) | {:.2} |", server_cpu / wall);
    println!(
        "| server CPU per request (µs) | {:.0} |",
        server_cpu * 1e6 / requests.max(1) as f64
    );
    println!("| server RSS under load / peak (MiB) | {loaded_rss:.0} / {peak_rss:.0} |");
    if errors > 0 {
        return Err(format!("{errors} requests failed"));
    }
    Ok(())
}
