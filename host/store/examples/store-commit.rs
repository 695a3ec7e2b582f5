//! What a durable commit costs: the store's write pattern — one `BEGIN IMMEDIATE`
//! transaction per probe result ([`Store::apply_probe`]) — on a SQLite file in WAL mode,
//! with `synchronous = FULL` (each commit syncs the log; what the engine uses) against
//! `NORMAL` (the log is synced at checkpoints only), in alternating rounds on fresh
//! databases.
//!
//! ```text
//! cargo run -p vigil-store --example store-commit -- --clusters 500 --probes 2000 --rounds 5 --dir target
//! ```
//!
//! `--dir` must be on the disk the database would live on: a tmpfs syncs for free.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use vigil_decision::{BrakeConfig, ClusterId, HealthPolicy, ProbeOutcome, Timestamp};
use vigil_store::{ApplySettings, CommitDurability, DiscoveredClusterRow, Store};

struct Options {
    clusters: usize,
    probes: usize,
    rounds: usize,
    concurrency: usize,
    dir: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        clusters: 500,
        probes: 3_000,
        rounds: 5,
        concurrency: 1,
        dir: PathBuf::from("."),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or(format!("{flag}: not a positive number: {value}"))
        };
        match flag.as_str() {
            "--clusters" => options.clusters = number()?,
            "--probes" => options.probes = number()?,
            "--rounds" => options.rounds = number()?,
            "--concurrency" => options.concurrency = number()?,
            "--dir" => options.dir = PathBuf::from(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(options)
}

fn settings() -> ApplySettings {
    ApplySettings {
        defaults: HealthPolicy::default(),
        brake: BrakeConfig {
            enabled: true,
            ratio: 1.0,
            min_failed: 3,
            window_millis: 300_000,
        },
        brake_window_explicit: false,
        replicas: Default::default(),
    }
}

/// One round: `probes` results applied to `clusters` fresh clusters from `concurrency`
/// tasks; the wall time of the applies alone.
async fn round(
    options: &Options,
    synchronous: CommitDurability,
    file: &std::path::Path,
) -> Result<Duration, String> {
    let store = Store::open_with_synchronous(&format!("sqlite://{}", file.display()), synchronous)
        .await
        .map_err(|e| e.to_string())?;
    let rows: Vec<DiscoveredClusterRow> = (0..options.clusters)
        .map(|i| DiscoveredClusterRow {
            name: format!("bench-{i:05}"),
            endpoint: format!("https://127.0.0.1:{}", 10_000 + i),
            reference: format!("/bench/{i}.yaml#bench-{i:05}"),
        })
        .collect();
    store
        .upsert_discovered(&rows, Timestamp::from_secs(1_000))
        .await
        .map_err(|e| e.to_string())?;
    let mut ids = Vec::with_capacity(rows.len());
    for row in &rows {
        ids.push(
            store
                .cluster(&row.name)
                .await
                .map_err(|e| e.to_string())?
                .id,
        );
    }
    let settings = settings();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..options.concurrency {
        let store = store.clone();
        let ids: Vec<ClusterId> = ids.clone();
        let probes = options.probes;
        let concurrency = options.concurrency;
        tasks.push(tokio::spawn(async move {
            // Probe `i` goes to cluster `i mod clusters`, a second apart: a steady fleet.
            for i in (task..probes).step_by(concurrency) {
                let id = ids[i % ids.len()];
                let now = Timestamp::from_secs(2_000 + i64::try_from(i).unwrap_or(0));
                let next = now.plus_secs(60);
                store
                    .apply_probe(id, &ProbeOutcome::Healthy, now, next, &settings)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let elapsed = started.elapsed();
    store.close().await;
    Ok(elapsed)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let options = options()?;
    let dir = options
        .dir
        .join(format!("store-commit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "{} probes on {} clusters from {} task(s), {} rounds, in {}",
        options.probes,
        options.clusters,
        options.concurrency,
        options.rounds,
        dir.display()
    );
    let mut full = Vec::new();
    let mut normal = Vec::new();
    let mut paired = Vec::new();
    for r in 0..options.rounds {
        // Alternate which goes first, so that a drift in the machine's load favours neither.
        let order = if r % 2 == 0 {
            [CommitDurability::Full, CommitDurability::Normal]
        } else {
            [CommitDurability::Normal, CommitDurability::Full]
        };
        let mut this_round = [0.0; 2];
        for synchronous in order {
            let name = format!("{r}-{synchronous:?}.db").to_lowercase();
            let elapsed = round(&options, synchronous, &dir.join(&name)).await?;
            let per_second = options.probes as f64 / elapsed.as_secs_f64();
            let micros = elapsed.as_secs_f64() * 1e6 / options.probes as f64;
            println!(
                "round {r} {synchronous:?}: {per_second:.0} commits/s, {micros:.0} µs per commit"
            );
            match synchronous {
                CommitDurability::Full => {
                    full.push(per_second);
                    this_round[0] = per_second;
                }
                _ => {
                    normal.push(per_second);
                    this_round[1] = per_second;
                }
            }
        }
        paired.push(this_round[1] / this_round[0]);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (full, normal) = (median(&mut full), median(&mut normal));
    println!(
        "median: FULL {full:.0} commits/s ({:.0} µs), NORMAL {normal:.0} commits/s ({:.0} µs); NORMAL / FULL {:.2} (paired median {:.2})",
        1e6 / full,
        1e6 / normal,
        normal / full,
        median(&mut paired)
    );
    Ok(())
}
