//! What the plugin runtime costs per probe, in three measures:
//!
//! 1. **Instantiate + call**: the `noop` test plugin (answers `healthy` at once, no host
//!    call) probed through `PluginRuntime` — a fresh store and sandbox, instantiation
//!    from the plugin's `InstancePre`, the call, the outcome mapping — timed call by call
//!    after a warm-up; median and p99 in µs.
//! 2. **Load**: `PluginRuntime::load` of a directory holding the first-party
//!    `kubeconfig-file` plugin, without a cache (compiling) and with a warm cache (loading
//!    the compiled artifact), next to the load of an empty directory (the engine and
//!    linker alone); medians.
//! 3. **Plugin vs native**: the `kubeconfig-file` plugin and the native Rust prober
//!    (`NativeProber`) each probing the same fake cluster, sequentially, a fresh TLS
//!    connection per probe for both. The fake server runs as its own process
//!    (`fake-kube`), so the process CPU time measured here is the client's alone. Rounds
//!    alternate native and plugin; the ratio is of the median CPU per probe, and each
//!    plugin round is also divided by the native round just before it (a shared machine's
//!    load drifts less within a pair than across the run), with the median of those. With
//!    `--prober native` or `--prober plugin` only that prober runs, to profile one side
//!    (e.g. under `perf record`). The probes run in a spawned task, on the runtime's
//!    worker threads, as vigil's worker runs them; `--parallel N` keeps N probes in flight
//!    (N tasks, each probing one after the other), as `vigil serve` probes many clusters
//!    at once. `--cold-call FILE.wasm` makes the plugin side a native probe followed by
//!    one call of that plugin, and reports what the call adds: its cost between two TLS
//!    handshakes, from cold caches, as in `vigil serve` (repeated on its own, as in 1., a
//!    call runs from warm ones). With `--clock none` the CPU clock is not read, so that
//!    the probes (or the calls of 1.) can run under valgrind, which counts their
//!    instructions (`scripts/bench-instructions`; the vDSO clock does not run under
//!    valgrind).
//!
//! Before the probes, the loaded runtime's own CPU per second without calls: while its
//! epoch ticker still ticks (the linger after the load's calls), and at rest, once the
//! ticker sleeps.
//!
//! ```text
//! cargo build --release -p vigil-fake-kube -p vigil-e2e   # builds the plugins it loads too
//! target/release/plugin-overhead
//! ```

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vigil_decision::{ClusterId, ProbeOutcome};
use vigil_domain::discovery::{Sources, discover};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::{Reference, Resolution, resolve};
use vigil_e2e::NativeProber;
use vigil_e2e::fake_kube::FakeKubeProcess;
use vigil_plugin_host::{CacheStatus, PluginRuntime, RuntimeSettings, TICKER_LINGER};

/// The allocator of the `vigil` binary, so that the runtime is measured as vigil runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    calls: usize,
    warmup: usize,
    loads: usize,
    cold_loads: usize,
    probes: usize,
    rounds: usize,
    address_block: u8,
    server: PathBuf,
    plugins: PathBuf,
    test_plugins: PathBuf,
    only: Option<String>,
    /// `native` or `plugin`: probe with that prober alone (to profile one side).
    prober: Option<String>,
    /// The process CPU clock, or none (`--clock none`, for valgrind).
    clock: CpuClock,
    /// Probes in flight at once in a round (1: one after the other).
    parallel: usize,
    /// `--cold-call FILE.wasm`: the plugin side is a native probe followed by one call of
    /// that plugin, so the rounds show what one call costs between two TLS handshakes.
    cold_call: Option<PathBuf>,
}

/// The process CPU clock, or none: then every reading is zero.
#[derive(Debug, Clone, Copy)]
struct CpuClock(bool);

impl CpuClock {
    fn now(self) -> Duration {
        if self.0 {
            process_cpu()
        } else {
            Duration::ZERO
        }
    }
}

const USAGE: &str = "plugin-overhead [--calls 10000] [--warmup 1000] [--loads 20] [--cold-loads 5] \
[--probes 500] [--rounds 5] [--address-block 79] [--server PATH] [--plugins DIR] [--test-plugins DIR] \
[--only calls|loads|probes] [--prober native|plugin] [--clock cpu|none] [--parallel 1] \
[--cold-call FILE.wasm|NAME]";

fn options() -> Result<Options, String> {
    let mut options = Options {
        calls: 10_000,
        warmup: 1_000,
        loads: 20,
        cold_loads: 5,
        probes: 500,
        rounds: 5,
        address_block: 79,
        server: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("fake-kube"),
        // The plugins cargo built for the tests (vigil-test-support), unless told otherwise.
        plugins: vigil_test_support::first_party_dir(),
        test_plugins: vigil_test_support::test_plugins_dir(),
        only: None,
        prober: None,
        clock: CpuClock(true),
        parallel: 1,
        cold_call: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_owned());
        }
        let value = args
            .next()
            .ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--calls" => options.calls = number()?.max(1),
            "--warmup" => options.warmup = number()?,
            "--loads" => options.loads = number()?.max(1),
            "--cold-loads" => options.cold_loads = number()?.max(1),
            "--probes" => options.probes = number()?.max(1),
            "--rounds" => options.rounds = number()?.max(1),
            "--parallel" => options.parallel = number()?.max(1),
            "--address-block" => {
                options.address_block = value
                    .parse()
                    .map_err(|_| format!("{flag}: not an octet: {value}"))?;
            }
            "--server" => options.server = PathBuf::from(value),
            "--plugins" => options.plugins = PathBuf::from(value),
            "--test-plugins" => options.test_plugins = PathBuf::from(value),
            // A `.wasm` file, or the name of a plugin built for the tests (`noop`).
            "--cold-call" => {
                options.cold_call = Some(if value.ends_with(".wasm") {
                    PathBuf::from(value)
                } else {
                    vigil_test_support::plugin_file(&value)
                });
            }
            "--only" if ["calls", "loads", "probes"].contains(&value.as_str()) => {
                options.only = Some(value);
            }
            "--prober" if ["native", "plugin"].contains(&value.as_str()) => {
                options.prober = Some(value);
            }
            "--clock" if ["cpu", "none"].contains(&value.as_str()) => {
                options.clock = CpuClock(value == "cpu");
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    let counted = match options.only.as_deref() {
        Some("calls") => true,
        Some("probes") => options.prober.is_some(),
        _ => false,
    };
    if options.cold_call.is_some() && options.prober.is_some() {
        return Err(format!(
            "--cold-call compares both sides: use it without --prober\n{USAGE}"
        ));
    }
    if !options.clock.0 && !counted {
        return Err(format!(
            "--clock none is for counting instructions: use it with --only calls, or with --only probes and --prober\n{USAGE}"
        ));
    }
    Ok(options)
}

/// A scratch directory, removed at the end however the benchmark ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A plugin directory `dir` holding `source` (a built `.wasm`) as `NAME.wasm`, with
/// `grants` as its `NAME.toml`.
fn plugin_dir(dir: &Path, name: &str, source: &Path, grants: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::copy(source, dir.join(format!("{name}.wasm")))
        .map_err(|e| format!("{}: {e}", source.display()))?;
    std::fs::write(dir.join(format!("{name}.toml")), grants).map_err(|e| e.to_string())?;
    Ok(dir.to_path_buf())
}

/// The calls the runtime is sized for, unless a round keeps more in flight.
const CONCURRENCY: usize = 4;

/// Loads a plugin directory for [`CONCURRENCY`] calls at once.
async fn load(plugins: &Path, cache: Option<&Path>) -> Result<(PluginRuntime, Duration), String> {
    load_for(plugins, cache, CONCURRENCY).await
}

/// Loads a plugin directory for [`CONCURRENCY`] calls at once, or `concurrency` if more.
async fn load_for(
    plugins: &Path,
    cache: Option<&Path>,
    concurrency: usize,
) -> Result<(PluginRuntime, Duration), String> {
    let started = Instant::now();
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugins.to_path_buf(),
        cache_dir: cache.map(Path::to_path_buf),
        concurrency: u32::try_from(concurrency.max(CONCURRENCY)).map_err(|e| e.to_string())?,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .map_err(|e| e.to_string())?;
    let elapsed = started.elapsed();
    if let Some(refused) = report.refused.first() {
        return Err(refused.to_string());
    }
    Ok((runtime, elapsed))
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median_duration(mut values: Vec<Duration>) -> Duration {
    values.sort();
    quantile(&values, 0.5)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile(&values, 0.5)
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// CPU time (user + system, every thread) of this process.
fn process_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// 1. Instantiate + call of the noop plugin, per call.
async fn instantiate_and_call(options: &Options, scratch: &Path) -> Result<Vec<String>, String> {
    let plugins = plugin_dir(
        &scratch.join("noop"),
        "noop",
        &options.test_plugins.join("noop.wasm"),
        "",
    )?;
    let (runtime, _) = load(&plugins, None).await?;
    let target = ProbeTarget {
        cluster: ClusterId(1),
        name: "noop".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("/nonexistent/kubeconfig#noop").map_err(|e| e.to_string())?,
        connection: None,
        plugin: Some("noop".to_owned()),
        timeout: Duration::from_secs(10),
        labels: Default::default(),
        parameters: Default::default(),
    };
    for _ in 0..options.warmup {
        runtime.probe(&target).await;
    }
    let mut times = Vec::with_capacity(options.calls);
    let mut unhealthy = 0usize;
    let cpu_before = options.clock.now();
    let wall_before = Instant::now();
    for _ in 0..options.calls {
        let started = Instant::now();
        let outcome = runtime.probe(&target).await;
        times.push(started.elapsed());
        if outcome != ProbeOutcome::Healthy {
            unhealthy += 1;
        }
    }
    let cpu = options.clock.now().saturating_sub(cpu_before);
    let wall = wall_before.elapsed();
    if unhealthy > 0 {
        return Err(format!("{unhealthy} noop calls were not healthy"));
    }
    times.sort();
    let n = times.len();
    let mean = times.iter().sum::<Duration>() / u32::try_from(n).unwrap_or(u32::MAX);
    Ok(vec![
        format!("| calls (after {} warm-up) | {n} |", options.warmup),
        format!("| median (µs) | {:.1} |", micros(quantile(&times, 0.5))),
        format!("| p90 (µs) | {:.1} |", micros(quantile(&times, 0.9))),
        format!(
            "| **p99 (µs)** (goal ≤ 50) | **{:.1}** |",
            micros(quantile(&times, 0.99))
        ),
        format!("| p99.9 (µs) | {:.1} |", micros(quantile(&times, 0.999))),
        format!("| max (µs) | {:.1} |", micros(times[n - 1])),
        format!("| mean (µs) | {:.1} |", micros(mean)),
        if options.clock.0 {
            format!(
                "| process CPU per call (µs) | {:.1} |",
                micros(cpu) / n as f64
            )
        } else {
            "| process CPU per call (µs) | not read (--clock none) |".to_owned()
        },
        format!(
            "| calls per second (one at a time) | {:.0} |",
            n as f64 / wall.as_secs_f64()
        ),
    ])
}

/// 2. Load times: empty directory, compiling, warm cache.
async fn load_times(options: &Options, scratch: &Path) -> Result<Vec<String>, String> {
    let empty = scratch.join("empty");
    std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
    let source = options.plugins.join("kubeconfig-file.wasm");
    let grants = std::fs::read_to_string(options.plugins.join("kubeconfig-file.toml"))
        .map_err(|e| format!("kubeconfig-file.toml: {e}"))?;
    let plugins = plugin_dir(
        &scratch.join("kubeconfig-file"),
        "kubeconfig-file",
        &source,
        &grants,
    )?;
    let size = std::fs::metadata(&source).map_err(|e| e.to_string())?.len();
    let cache = scratch.join("cache");

    let mut base = Vec::new();
    for _ in 0..options.loads {
        base.push(load(&empty, None).await?.1);
    }
    let mut cold = Vec::new();
    for _ in 0..options.cold_loads {
        cold.push(load(&plugins, None).await?.1);
    }
    // Fill the cache, then load from it.
    let (runtime, _) = load(&plugins, Some(&cache)).await?;
    if runtime.plugins()[0].cache != CacheStatus::Miss {
        return Err(format!(
            "first cached load: {:?}",
            runtime.plugins()[0].cache
        ));
    }
    drop(runtime);
    let mut warm = Vec::new();
    for _ in 0..options.loads {
        let (runtime, elapsed) = load(&plugins, Some(&cache)).await?;
        let status = runtime.plugins()[0].cache;
        if status != CacheStatus::Hit {
            return Err(format!("warm load: {status:?}, expected a hit"));
        }
        warm.push(elapsed);
    }
    let artifact_size: u64 = std::fs::read_dir(cache.join("components-v1"))
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .map(|metadata| metadata.len())
        .sum();
    let (base, cold, warm) = (
        median_duration(base),
        median_duration(cold),
        median_duration(warm),
    );
    Ok(vec![
        format!(
            "| plugin file / cached artifact (KiB) | {} / {} |",
            size / 1024,
            artifact_size / 1024
        ),
        format!(
            "| load, empty plugin directory: engine and linker only (ms, median of {}) | {:.2} |",
            options.loads,
            millis(base)
        ),
        format!(
            "| load, no cache: compile (ms, median of {}) | {:.2} |",
            options.cold_loads,
            millis(cold)
        ),
        format!(
            "| **load, warm cache: hit (ms, median of {})** | **{:.2}** |",
            options.loads,
            millis(warm)
        ),
        format!(
            "| plugin's own share, compile vs hit (ms) | {:.2} vs {:.2} |",
            millis(cold.saturating_sub(base)),
            millis(warm.saturating_sub(base))
        ),
    ])
}

/// 3. The kubeconfig-file plugin against the native prober, on one fake cluster served
///    by a child process.
async fn plugin_vs_native(options: &Options, scratch: &Path) -> Result<Vec<String>, String> {
    let kubeconfigs = scratch.join("kubeconfigs");
    let server = FakeKubeProcess::start(
        &options.server,
        1,
        "embedded",
        options.address_block,
        &kubeconfigs,
    )?;

    let report = discover(&Sources::new([], Some(kubeconfigs)));
    let cluster = report.clusters.first().ok_or("no cluster discovered")?;
    let reference = Reference::parse(&cluster.reference).map_err(|e| e.to_string())?;
    let Resolution::Connection(material) = resolve(&reference) else {
        return Err("the fake cluster's kubeconfig does not resolve".to_owned());
    };
    let target = ProbeTarget {
        cluster: ClusterId(1),
        name: cluster.name.clone(),
        endpoint: material.server.clone(),
        reference,
        connection: Some(material),
        plugin: Some("kubeconfig-file".to_owned()),
        timeout: Duration::from_secs(5),
        labels: Default::default(),
        parameters: Default::default(),
    };

    let source = options.plugins.join("kubeconfig-file.wasm");
    let grants = std::fs::read_to_string(options.plugins.join("kubeconfig-file.toml"))
        .map_err(|e| e.to_string())?;
    let plugins = plugin_dir(&scratch.join("probe"), "kubeconfig-file", &source, &grants)?;
    let (runtime, _) = load_for(&plugins, None, options.parallel).await?;
    let native = NativeProber::default();

    // What the loaded runtime costs without calls: for a second while its epoch ticker
    // still ticks (the linger after the load's calls), then for a second once it sleeps.
    let ticking_before = options.clock.now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ticking = options.clock.now().saturating_sub(ticking_before);
    let rest_deadline = Instant::now() + TICKER_LINGER + Duration::from_secs(5);
    while !runtime.is_idle() {
        if Instant::now() > rest_deadline {
            return Err("the runtime never came to rest".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rest_before = options.clock.now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rest = options.clock.now().saturating_sub(rest_before);

    let warmup = (options.probes / 10).max(20);
    for _ in 0..warmup {
        expect_healthy("native", &native.probe(&target).await)?;
        expect_healthy("plugin", &runtime.probe(&target).await)?;
    }

    let mut native_cpu = Vec::new();
    let mut plugin_cpu = Vec::new();
    let mut native_wall = Vec::new();
    let mut plugin_wall = Vec::new();
    let (with_native, with_plugin) = match options.prober.as_deref() {
        Some("native") => (true, false),
        Some(_) => (false, true),
        None => (true, true),
    };
    let target = Arc::new(target);
    let cold = match &options.cold_call {
        Some(file) => {
            Some(ColdCall::load(options, file, &scratch.join("cold"), &native, &target).await?)
        }
        None => None,
    };
    for _ in 0..options.rounds {
        if with_native {
            let (cpu, mut walls) = prober_round(options, "native", &native, &target).await?;
            native_cpu.push(cpu);
            native_wall.append(&mut walls);
        }
        if with_plugin {
            let (cpu, mut walls) = match &cold {
                Some(cold) => {
                    prober_round(options, "cold call", &cold.prober, &cold.target).await?
                }
                None => prober_round(options, "plugin", &runtime, &target).await?,
            };
            plugin_cpu.push(cpu);
            plugin_wall.append(&mut walls);
        }
    }
    drop(server);
    if !(with_native && with_plugin) {
        let (who, cpu) = if with_native {
            ("native", native_cpu)
        } else {
            ("plugin", plugin_cpu)
        };
        if !options.clock.0 {
            return Ok(vec![format!(
                "| {who} alone: {} rounds × {} probes, CPU clock not read | – |",
                options.rounds, options.probes,
            )]);
        }
        return Ok(vec![
            format!(
                "| {who} alone: client CPU per probe (µs), per round of {} | {} |",
                options.probes,
                rounds_text(&cpu)
            ),
            format!(
                "| {who} alone: client CPU per probe (µs), median of {} rounds | {:.0} |",
                options.rounds,
                median(cpu)
            ),
        ]);
    }

    if let Some(cold) = &cold {
        return Ok(cold.report(options, &native_cpu, &plugin_cpu));
    }
    let native_rounds = rounds_text(&native_cpu);
    let plugin_rounds = rounds_text(&plugin_cpu);
    // Each plugin round against the native round just before it: on a shared machine the
    // load drifts between rounds, and a pair of neighbouring rounds sees about the same.
    let pair_ratios: Vec<f64> = plugin_cpu
        .iter()
        .zip(&native_cpu)
        .map(|(plugin, native)| plugin / native)
        .collect();
    let pair_text = pair_ratios
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect::<Vec<_>>()
        .join(", ");
    let pair_ratio = median(pair_ratios);
    let native_cpu = median(native_cpu);
    let plugin_cpu = median(plugin_cpu);
    let (native_wall, plugin_wall) = (median_duration(native_wall), median_duration(plugin_wall));
    Ok(vec![
        format!(
            "| probes | {} rounds × {} per prober, alternating, after {warmup} warm-up each, {} in flight (spawned tasks) |",
            options.rounds, options.probes, options.parallel
        ),
        format!("| native: client CPU per probe (µs), per round | {native_rounds} |"),
        format!("| plugin: client CPU per probe (µs), per round | {plugin_rounds} |"),
        format!("| native: client CPU per probe (µs), median | {native_cpu:.0} |"),
        format!("| plugin: client CPU per probe (µs), median | {plugin_cpu:.0} |"),
        format!(
            "| **CPU ratio plugin / native** (goal ≤ 1.2) | **{:.2}** |",
            plugin_cpu / native_cpu
        ),
        format!("| CPU ratio of each round to the native round before it | {pair_text} |"),
        format!("| CPU ratio, median of the paired rounds | {pair_ratio:.2} |"),
        format!(
            "| wall time per probe, median: native / plugin (µs) | {:.0} / {:.0} |",
            micros(native_wall),
            micros(plugin_wall)
        ),
        format!(
            "| runtime without calls, epoch ticker ticking (its linger), CPU per second (µs) | {:.0} |",
            micros(ticking)
        ),
        format!(
            "| runtime at rest, epoch ticker asleep, CPU per second (µs) | {:.0} |",
            micros(rest)
        ),
    ])
}

/// `--cold-call`: a native probe followed by one call of a plugin, as one probe of the
/// plugin side. Repeated on its own a call runs from warm caches; between two native probes
/// (TLS handshakes) it runs as in `vigil serve`, where a call's code and data have been
/// evicted since the last one. The difference with the native rounds is that cold cost.
struct ColdCall {
    name: String,
    prober: NativeThenCall,
    target: Arc<ProbeTarget>,
}

impl ColdCall {
    /// Loads `file` (with its `.toml` beside it, if any) as the only plugin of a runtime,
    /// and pins the probe target to it.
    async fn load(
        options: &Options,
        file: &Path,
        dir: &Path,
        native: &NativeProber,
        target: &ProbeTarget,
    ) -> Result<Self, String> {
        let name = file
            .file_stem()
            .and_then(|stem| stem.to_str())
            .ok_or_else(|| format!("{}: not a NAME.wasm file", file.display()))?
            .to_owned();
        let manifest = file.with_extension("toml");
        let grants = match std::fs::read_to_string(&manifest) {
            Ok(grants) => grants,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(format!("{}: {error}", manifest.display())),
        };
        let plugins = plugin_dir(dir, &name, file, &grants)?;
        let (runtime, _) = load_for(&plugins, None, options.parallel).await?;
        let mut target = target.clone();
        target.plugin = Some(name.clone());
        let prober = NativeThenCall(native.clone(), runtime);
        // Routed once and warmed up like the other side, so the rounds measure calls alone.
        for _ in 0..20 {
            expect_healthy("cold call", &prober.probe(&target).await)?;
        }
        Ok(Self {
            name,
            prober,
            target: Arc::new(target),
        })
    }

    /// The rows of the comparison: native rounds, native + call rounds, and what a call adds.
    fn report(&self, options: &Options, native: &[f64], with_call: &[f64]) -> Vec<String> {
        let name = &self.name;
        let added: Vec<f64> = with_call.iter().zip(native).map(|(w, n)| w - n).collect();
        let added_rounds = rounds_text(&added);
        let typical = median(added);
        vec![
            format!(
                "| rounds | {} × {} probes per side, alternating, {} in flight (spawned tasks) |",
                options.rounds, options.probes, options.parallel
            ),
            format!(
                "| native: client CPU per probe (µs), per round | {} |",
                rounds_text(native)
            ),
            format!(
                "| native probe then one `{name}` call: client CPU (µs), per round | {} |",
                rounds_text(with_call)
            ),
            format!(
                "| **one `{name}` call between two native probes: CPU added (µs)**, each round / median | {} / **{:.1}** |",
                added_rounds, typical
            ),
        ]
    }
}

/// A native probe, then (if healthy) one call of the cold-call runtime's plugin.
#[derive(Debug, Clone)]
struct NativeThenCall(NativeProber, PluginRuntime);

impl Prober for NativeThenCall {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        match self.0.probe(target).await {
            ProbeOutcome::Healthy => self.1.probe(target).await,
            other => other,
        }
    }
}

/// Per-round values as a table cell: `300, 296, 310`.
fn rounds_text(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn expect_healthy(who: &str, outcome: &ProbeOutcome) -> Result<(), String> {
    if *outcome == ProbeOutcome::Healthy {
        Ok(())
    } else {
        Err(format!("{who} probe: {outcome:?}"))
    }
}

/// One round of `prober`: `options.probes` probes of `target`, spread over
/// `options.parallel` tasks (one by default) that each probe one after the other. The probes
/// run in spawned tasks, on the runtime's worker threads, as vigil's worker runs them: a
/// probe polled on the thread that blocks on the runtime would have every wake-up of its
/// connection cross threads (the I/O driver runs on the workers), a cost vigil never pays.
async fn prober_round<P: Prober + Clone>(
    options: &Options,
    who: &'static str,
    prober: &P,
    target: &Arc<ProbeTarget>,
) -> Result<(f64, Vec<Duration>), String> {
    let (probes, lanes) = (options.probes, options.parallel.min(options.probes).max(1));
    let before = options.clock.now();
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..lanes {
        let share = probes / lanes + usize::from(lane < probes % lanes);
        let (prober, target) = (prober.clone(), Arc::clone(target));
        tasks.spawn(async move { probe_in_turn(share, who, || prober.probe(&target)).await });
    }
    let mut walls = Vec::with_capacity(probes);
    while let Some(lane) = tasks.join_next().await {
        walls.append(&mut lane.map_err(|e| e.to_string())??);
    }
    let cpu = options.clock.now().saturating_sub(before);
    Ok((micros(cpu) / probes as f64, walls))
}

/// `probes` sequential probes, each checked healthy; each probe's wall time.
async fn probe_in_turn<F, Fut>(probes: usize, who: &str, probe: F) -> Result<Vec<Duration>, String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = ProbeOutcome>,
{
    let mut walls = Vec::with_capacity(probes);
    for _ in 0..probes {
        let started = Instant::now();
        let outcome = probe().await;
        walls.push(started.elapsed());
        expect_healthy(who, &outcome)?;
    }
    Ok(walls)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), String> {
    let options = options()?;
    let scratch =
        Scratch(std::env::temp_dir().join(format!("plugin-overhead-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).map_err(|e| e.to_string())?;

    let wanted = |part: &str| options.only.as_deref().is_none_or(|only| only == part);
    let mut sections = Vec::new();
    if wanted("calls") {
        eprintln!("instantiate + call of the noop plugin…");
        let rows = instantiate_and_call(&options, &scratch.0).await?;
        sections.push(("Instantiate + call, noop plugin", rows));
    }
    if wanted("loads") {
        eprintln!("load times of kubeconfig-file…");
        let rows = load_times(&options, &scratch.0).await?;
        sections.push(("Load of kubeconfig-file", rows));
    }
    if wanted("probes") {
        eprintln!("kubeconfig-file plugin vs native prober on a fake cluster…");
        let rows = plugin_vs_native(&options, &scratch.0).await?;
        let title = if options.cold_call.is_some() {
            "One plugin call between two native probes, fresh TLS per probe, client CPU"
        } else {
            "kubeconfig-file plugin vs native, fresh TLS per probe, client CPU"
        };
        sections.push((title, rows));
    }

    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("plugin-overhead ({cores} cores available)\n");
    for (title, rows) in sections {
        println!("### {title}\n\n| measure | value |\n|---|---|");
        for row in rows {
            println!("{row}");
        }
        println!();
    }
    Ok(())
}
