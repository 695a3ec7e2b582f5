//! What sharing a fleet costs: `vigil serve` replicas on one PostgreSQL database against
//! the fake Kubernetes API server, with 1, 2 and 3 replicas in turn.
//!
//! For each count, on a fresh database, once every cluster is ONLINE and one interval
//! has passed, it measures over a window of whole intervals: probes made (the replicas'
//! own counts), CPU per probe of the replicas and of the PostgreSQL server, and from the
//! server's statistics the statements, rows written and commits per probe — per cluster
//! per interval, since each cluster is probed once an interval — and the share of the
//! server's time spent on claims. On a machine of 2 shared cores this measures overhead,
//! not scaling: the replicas share those cores.
//!
//! ```text
//! replica-bench [--clusters N] [--interval S] [--intervals K] [--replicas 1,2,3]
//!               [--vigil PATH] [--fake-kube PATH] [--plugin-dir DIR]
//! ```

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vigil_decision::ClusterStatus;
use vigil_e2e::fake_kube::FakeKubeProcess;
use vigil_e2e::proc_stats::cpu_seconds;
use vigil_store::Store;
use vigil_test_support::postgres::PgServer;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    clusters: usize,
    interval: u64,
    intervals: u64,
    replicas: Vec<usize>,
    vigil: PathBuf,
    fake_kube: PathBuf,
    plugin_dir: PathBuf,
}

fn options() -> Result<Options, String> {
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let mut options = Options {
        clusters: 3_000,
        interval: 10,
        intervals: 3,
        replicas: vec![1, 2, 3],
        vigil: target.join("vigil"),
        fake_kube: target.join("fake-kube"),
        plugin_dir: vigil_test_support::first_party_dir(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |value: &str| value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--clusters" => options.clusters = number(&value)? as usize,
            "--interval" => options.interval = number(&value)?,
            "--intervals" => options.intervals = number(&value)?,
            "--replicas" => {
                options.replicas = value
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--replicas: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--vigil" => options.vigil = PathBuf::from(value),
            "--fake-kube" => options.fake_kube = PathBuf::from(value),
            "--plugin-dir" => options.plugin_dir = PathBuf::from(value),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(options)
}

/// A child process killed when the benchmark ends, however it ends.
struct Running(Child, SocketAddr);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

fn http_get(address: SocketAddr, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response.split_once("\r\n\r\n")?.1.to_owned())
}

/// Probes a replica made, from its `/metrics`.
fn probes(replica: &Running) -> f64 {
    http_get(replica.1, "/metrics")
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("vigil_probe_duration_seconds_count"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn start_replica(
    options: &Options,
    work: &Path,
    id: &str,
    database_url: &str,
    kubeconfigs: &Path,
) -> Running {
    std::fs::create_dir_all(work).expect("the replica's directory");
    let listen = free_address();
    let log = std::fs::File::create(work.join("vigil.log")).expect("its log");
    let child = Command::new(&options.vigil)
        .arg("serve")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", work)
        .env("RUST_LOG", "warn")
        .env("DATABASE_URL", database_url)
        .env("KUBECONFIG_DIR", kubeconfigs)
        .env("KUBECONFIG_PATH", "")
        .env("VIGIL_PLUGIN_DIR", &options.plugin_dir)
        // The plugins measured are those of the directory, no other.
        .env("VIGIL_PLUGINS_EMBEDDED", "false")
        .env("VIGIL_CACHE_DIR", work.join("cache"))
        .env("VIGIL_LISTEN", listen.to_string())
        .env("VIGIL_REPLICA_ID", id)
        .env("CLUSTER_HEALTH_INTERVAL", options.interval.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("vigil starts");
    Running(child, listen)
}

/// CPU seconds of the PostgreSQL server: the postmaster and every process it started.
fn server_cpu(data_dir: &Path) -> f64 {
    let postmaster: u32 = std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()
        .and_then(|text| text.lines().next()?.trim().parse().ok())
        .unwrap_or(0);
    let mut total = cpu_seconds(postmaster);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let parent = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let after = stat.rsplit_once(')')?.1.to_owned();
                after.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if parent == Some(postmaster) {
            total += cpu_seconds(pid);
        }
    }
    total
}

/// The server's counters for the database: statements, claim statements and their time,
/// all statements' time, rows written, commits.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    statements: f64,
    claim_ms: f64,
    total_ms: f64,
    rows_written: f64,
    commits: f64,
}

/// The counters, read with `psql` as the server's superuser (only the store speaks SQL
/// through a client library).
fn counters(server: &PgServer, database: &str) -> Counters {
    let row = server.psql(
        database,
        "SELECT COALESCE(SUM(calls), 0), \
           COALESCE(SUM(total_exec_time) FILTER (WHERE query LIKE '%claimed_by = $1, claim_epoch%'), 0), \
           COALESCE(SUM(total_exec_time), 0), \
           (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database \
              WHERE datname = current_database()), \
           (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) \
         FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    let values: Vec<f64> = row
        .trim()
        .split('|')
        .map(|value| value.trim().parse().unwrap_or(0.0))
        .collect();
    let value = |i: usize| values.get(i).copied().unwrap_or(0.0);
    Counters {
        statements: value(0),
        claim_ms: value(1),
        total_ms: value(2),
        rows_written: value(3),
        commits: value(4),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("replica-bench: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    let work = std::env::temp_dir().join(format!("replica-bench-{}", std::process::id()));
    let kubeconfigs = work.join("kubeconfigs");
    std::fs::create_dir_all(&kubeconfigs).expect("the work directory");
    let fake = FakeKubeProcess::start(
        &options.fake_kube,
        options.clusters,
        "embedded",
        1,
        &kubeconfigs,
    )
    .expect("fake-kube starts");
    let server = vigil_test_support::postgres::server();
    let data_dir = server.socket_dir().join("data");
    println!(
        "{} clusters, interval {} s, window {} intervals; fake-kube pid {}",
        options.clusters,
        options.interval,
        options.intervals,
        fake.pid()
    );
    println!(
        "replicas | probes | vigil CPU ms/probe | postgres CPU ms/probe | statements/probe | rows written/probe | commits/probe | claims' share of server time"
    );
    for &count in &options.replicas {
        let database = server.fresh_database();
        let store = Store::open(&database.url).await.expect("the store");
        server.psql(
            &database.name,
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
        );
        let replicas: Vec<Running> = (0..count)
            .map(|i| {
                let id = format!("r{i}");
                start_replica(
                    &options,
                    &work.join(format!("{}-{id}", database.name)),
                    &id,
                    &database.url,
                    &kubeconfigs,
                )
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let online = store
                .status_counts()
                .await
                .ok()
                .and_then(|counts| counts.get(&ClusterStatus::Online).copied())
                .unwrap_or(0);
            if online >= options.clusters as u64 {
                break;
            }
            if Instant::now() > deadline {
                eprintln!("replica-bench: only {online} clusters ONLINE after 600 s");
                return std::process::ExitCode::FAILURE;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(options.interval)).await;

        server.psql(&database.name, "SELECT pg_stat_statements_reset()");
        let before = counters(server, &database.name);
        let probes_before: f64 = replicas.iter().map(probes).sum();
        let vigil_before: f64 = replicas.iter().map(|r| cpu_seconds(r.0.id())).sum();
        let server_before = server_cpu(&data_dir);
        tokio::time::sleep(Duration::from_secs(options.interval * options.intervals)).await;
        let after = counters(server, &database.name);
        let probed = replicas.iter().map(probes).sum::<f64>() - probes_before;
        let vigil_cpu = replicas.iter().map(|r| cpu_seconds(r.0.id())).sum::<f64>() - vigil_before;
        let server_cpu = server_cpu(&data_dir) - server_before;
        let per = |value: f64| value / probed.max(1.0);
        println!(
            "{count} | {probed:.0} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.1} %",
            per(vigil_cpu) * 1000.0,
            per(server_cpu) * 1000.0,
            per(after.statements - before.statements),
            per(after.rows_written - before.rows_written),
            per(after.commits - before.commits),
            100.0 * (after.claim_ms - before.claim_ms)
                / (after.total_ms - before.total_ms).max(f64::MIN_POSITIVE),
        );
        drop(replicas);
        store.close().await;
    }
    drop(fake);
    let _ = std::fs::remove_dir_all(&work);
    std::process::ExitCode::SUCCESS
}
