//! The one wasmtime `Engine` of the process, its epoch ticker, and compiling a component
//! for it (a component that does not fit the instance pool is refused naming the limit).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use wasmtime::component::Component;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. A guest's CPU deadline is a number of these ticks, so
/// a deadline is enforced to within one tick.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How long the epoch ticker goes on after the last call ended before it sleeps: a
/// runtime with no call in flight makes no wake-up at all (a hundred a second otherwise),
/// while a steady stream of probes never pays for waking it.
pub const TICKER_LINGER: Duration = Duration::from_secs(1);

/// The address space reserved for each linear memory: the whole 32-bit index space, so
/// that compiled code needs no explicit bounds check — an access past the accessible
/// part (the plugin's cap at most) lands in reserved, inaccessible pages and traps. It is
/// only address space (about 4 GiB a pool slot, nothing resident); wasmtime's own default.
/// Reserving only the cap instead cost the `kubeconfig-file` plugin about 54,000 more
/// instructions a probe — a fifth of its guest code's (BENCHMARKS.md, "Plugin runtime
/// overhead").
const MEMORY_RESERVATION_BYTES: u64 = 1 << 32;

/// The guard region after each linear memory, which lets a load's or store's static
/// offset go unchecked too; wasmtime's default.
const MEMORY_GUARD_BYTES: u64 = 32 << 20;

/// Memories a component may have. A Rust `wasm32-wasip2` component has one, and so do
/// the components of componentize-py (Python) and componentize-js (StarlingMonkey).
const MEMORIES_PER_COMPONENT: u32 = 2;

/// Tables a component may have: the main module's plus the one of the shims
/// `wit-component` adds (two in Rust, Python and JavaScript components alike).
const TABLES_PER_COMPONENT: u32 = 4;

/// Elements a table may have. A Rust component's largest table has a few hundred; the
/// interpreters' are larger (componentize-py 0.25: 5,678; StarlingMonkey: 7,696); wasmtime's
/// default. Each pool slot reserves 8 bytes an element of address space, nothing resident
/// beyond what a call touches.
const TABLE_ELEMENTS: usize = 20_000;

/// Core instances a component may have (the main module, the WASI adapter, shims). A Rust
/// component has 3, a StarlingMonkey one 4; componentize-py links the interpreter from 14
/// modules (libc, libpython, its runtime, the WASI adapter and shims), one more per native
/// extension module a plugin brings. The pool only counts core instances (their contexts
/// are allocated per instance), so this bound costs nothing.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;

/// The bytes at the start of each linear memory that stay resident when its pool slot
/// is released, where the kernel can tell which pages a call touched (`PAGEMAP_SCAN`,
/// Linux 6.7+): those pages are reset in place (zeroed, or copied back from the initial
/// image) instead of being given back to the kernel with `madvise` and faulted in again
/// by the next call — the most expensive part of a small call without it (measured in
/// BENCHMARKS.md: a no-op call from 55–62 µs to 17 µs, median). A Rust `wasm32-wasip2` guest
/// keeps its 1 MiB shadow stack first, then its data and the start of its heap, so 2 MiB
/// covers what a small call touches. It holds at most this much resident memory per pool
/// slot, and only pages a call actually touched. Without the ioctl wasmtime would zero
/// the whole prefix on every release, which costs more than it saves: then nothing is
/// kept resident.
const MEMORY_KEEP_RESIDENT_BYTES: usize = 2 * 1024 * 1024;

/// The same for tables: a component's tables are a few hundred entries.
const TABLE_KEEP_RESIDENT_BYTES: usize = 64 * 1024;

/// Instances kept beyond the probe and audit bound, for `info()` and `accepts` calls
/// made while loading and routing.
const SPARE_INSTANCES: u32 = 2;

/// The shared engine and the thread that ticks its epoch.
#[derive(Debug)]
pub(crate) struct SharedEngine {
    engine: Engine,
    ticker: Arc<TickerState>,
    thread: Option<JoinHandle<()>>,
}

/// What the ticker and the calls share.
#[derive(Debug, Default)]
struct TickerState {
    /// Calls alive now: one per store, counted by [`Ticking`].
    active: AtomicUsize,
    /// Set by the ticker before it sleeps; a call that starts while it is set wakes it.
    asleep: AtomicBool,
    stop: AtomicBool,
    /// Epochs advanced so far.
    ticks: AtomicU64,
    /// The ticker's thread, to wake it.
    thread: OnceLock<Thread>,
}

impl TickerState {
    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// Keeps the epoch ticking while a call is alive: held by each call's store, from before
/// its deadline is armed until the store is dropped.
#[derive(Debug)]
pub(crate) struct Ticking(Arc<TickerState>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SharedEngine {
    /// An engine with the component model, epoch interruption and a pooling allocator
    /// for `concurrency` calls at once, each capped at `max_memory_bytes`.
    pub(crate) fn new(concurrency: u32, max_memory_bytes: u64) -> wasmtime::Result<Self> {
        Self::with_linger(concurrency, max_memory_bytes, TICKER_LINGER)
    }

    /// [`SharedEngine::new`] with the ticker going to sleep `linger` after the last call.
    fn with_linger(
        concurrency: u32,
        max_memory_bytes: u64,
        linger: Duration,
    ) -> wasmtime::Result<Self> {
        let instances = concurrency.max(1).saturating_add(SPARE_INSTANCES);
        let memory_slot = usize::try_from(max_memory_bytes).unwrap_or(usize::MAX);

        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .table_elements(TABLE_ELEMENTS)
            // One memory per instance plus a few spares: Rust components have one.
            .total_memories(instances.saturating_add(4))
            .total_tables(instances.saturating_mul(TABLES_PER_COMPONENT))
            .total_stacks(instances)
            .max_memory_size(memory_slot);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(Enabled::Yes)
                .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT_BYTES)
                .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES);
        }

        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .parallel_compilation(true)
            .memory_reservation(MEMORY_RESERVATION_BYTES)
            .memory_guard_size(MEMORY_GUARD_BYTES)
            .memory_reservation_for_growth(0)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let ticker = Arc::new(TickerState::default());
        let linger_ticks = linger.as_millis().div_ceil(EPOCH_TICK.as_millis()).max(1);
        // One ticker for the whole process: a thread per store would cost more than the
        // calls it bounds. It holds only a weak handle so that it never keeps the engine.
        let weak = engine.weak();
        let state = Arc::clone(&ticker);
        let thread = std::thread::Builder::new()
            .name("vigil-epoch".to_owned())
            .spawn(move || {
                let mut idle_ticks = 0;
                while !state.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                    state.ticks.fetch_add(1, Ordering::Relaxed);
                    if state.active.load(Ordering::SeqCst) > 0 {
                        idle_ticks = 0;
                        continue;
                    }
                    idle_ticks += 1;
                    if idle_ticks < linger_ticks {
                        continue;
                    }
                    // Asleep until a call starts. The flag is set before the count is read
                    // again, and a call counts itself before it reads the flag, so one of
                    // the two always sees the other (a wake-up before `park` is kept).
                    state.asleep.store(true, Ordering::SeqCst);
                    while state.active.load(Ordering::SeqCst) == 0
                        && !state.stop.load(Ordering::SeqCst)
                    {
                        std::thread::park();
                    }
                    state.asleep.store(false, Ordering::SeqCst);
                    idle_ticks = 0;
                }
            })
            .map_err(|error| {
                wasmtime::Error::msg(format!("cannot start the epoch ticker: {error}"))
            })?;
        let _ = ticker.thread.set(thread.thread().clone());
        Ok(Self {
            engine,
            ticker,
            thread: Some(thread),
        })
    }

    /// The engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Counts a call as alive, waking the ticker if it sleeps: a call's epoch deadline
    /// only passes while the ticker ticks. Take it before arming the deadline and keep it
    /// for the whole life of the store.
    pub(crate) fn ticking(&self) -> Ticking {
        self.ticker.active.fetch_add(1, Ordering::SeqCst);
        if self.ticker.asleep.load(Ordering::SeqCst) {
            self.ticker.wake();
        }
        Ticking(Arc::clone(&self.ticker))
    }

    /// Whether the ticker sleeps: no call alive for [`TICKER_LINGER`].
    pub(crate) fn is_idle(&self) -> bool {
        self.ticker.asleep.load(Ordering::SeqCst)
    }
}

impl Drop for SharedEngine {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::SeqCst);
        self.ticker.wake();
        if let Some(thread) = self.thread.take() {
            // The ticker sleeps one tick at most once woken; joining keeps no thread
            // behind.
            let _ = thread.join();
        }
    }
}

/// Compiles a component for the shared engine. wasmtime checks the component's structure
/// against the pool as it compiles; a component that does not fit — more memories, tables
/// or core instances than a component may have, a table or an initial memory larger than
/// a slot — is refused naming vigil's limit and what the component needs, rather than in
/// the words of wasmtime's pool configuration, which a plugin's author does not set.
pub(crate) fn compile_component(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    Component::new(engine, bytes).map_err(|error| {
        match error
            .chain()
            .find_map(|cause| pool_refusal(&cause.to_string()))
        {
            Some(refusal) => {
                wasmtime::Error::msg(format!("it does not fit vigil's instance pool: {refusal}"))
            }
            None => error,
        }
    })
}

/// What the component needs and what vigil allows, from one of wasmtime's refusals by
/// the pool (their wording is wasmtime's, tested below against the pinned version).
fn pool_refusal(message: &str) -> Option<String> {
    // Counts are written in decimal, a memory slot's size in hexadecimal (`0x4000000`).
    let numbers: Vec<u64> = message
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|word| match word.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => word.parse().ok(),
        })
        .collect();
    let [.., need, allowed] = numbers[..] else {
        return None;
    };
    let mib = |bytes: u64| bytes.div_ceil(1 << 20);
    let refusal = if message.contains("transitively contains") {
        let what = if message.contains("core module instances") {
            "core instances"
        } else if message.contains("linear memories") {
            "memories"
        } else if message.contains("tables") {
            "tables"
        } else {
            return None;
        };
        format!("it needs {need} {what}; vigil allows {allowed} per component")
    } else if message.contains("exceeds the per-instance limit") {
        let what = if message.contains("memories") {
            "memories"
        } else {
            "tables"
        };
        format!("a core module of it defines {need} {what}; vigil allows {allowed} per module")
    } else if message.contains("minimum element size") {
        format!("it needs a table of {need} elements; vigil allows {allowed} per table")
    } else if message.contains("minimum byte size") {
        format!(
            "it needs {} MiB of memory to start; vigil allows {} MiB, the largest `memory-mib` \
             of the plugins loaded",
            mib(need),
            mib(allowed)
        )
    } else {
        return None;
    };
    Some(refusal)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use vigil_test_support::wait::until_true;

    use super::*;

    #[test]
    fn the_ticker_sleeps_without_calls_and_wakes_for_the_next() {
        let engine =
            SharedEngine::with_linger(2, 1 << 20, Duration::from_millis(50)).expect("engine");
        let ticks = || engine.ticker.ticks.load(Ordering::Relaxed);

        // A call alive keeps it ticking, however long it lasts: three lingers' worth of
        // ticks (15) and more.
        let call = engine.ticking();
        let before = ticks();
        until_true(
            "15 ticks pass with a call alive",
            Duration::from_secs(5),
            || ticks() >= before + 15,
        );
        assert!(ticks() >= before + 5, "{} → {}", before, ticks());
        assert!(!engine.is_idle());

        // Without one it goes on for the linger, then sleeps and stops advancing: while
        // another engine's ticker, kept busy by a call, ticks ten times.
        drop(call);
        until_true("the ticker sleeps", Duration::from_secs(2), || {
            engine.is_idle()
        });
        let asleep = ticks();
        let witness =
            SharedEngine::with_linger(1, 1 << 20, Duration::from_millis(50)).expect("engine");
        let witness_ticks = || witness.ticker.ticks.load(Ordering::Relaxed);
        let _witness_call = witness.ticking();
        let witnessed = witness_ticks();
        until_true(
            "another ticker ticks ten times",
            Duration::from_secs(5),
            || witness_ticks() >= witnessed + 10,
        );
        assert_eq!(ticks(), asleep, "the ticker advanced while asleep");

        // The next call wakes it at once.
        let _call = engine.ticking();
        until_true(
            "the woken ticker ticks three times",
            Duration::from_millis(500),
            || ticks() >= asleep + 3,
        );
        assert!(!engine.is_idle());
    }

    #[test]
    fn a_sleeping_ticker_does_not_hold_up_the_engine_s_drop() {
        let engine =
            SharedEngine::with_linger(1, 1 << 20, Duration::from_millis(10)).expect("engine");
        until_true("the ticker sleeps", Duration::from_secs(2), || {
            engine.is_idle()
        });
        let started = Instant::now();
        drop(engine);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    /// `value` in LEB128, as the binary format writes sizes, counts and limits.
    fn leb(mut value: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                bytes.push(byte);
                return bytes;
            }
            bytes.push(byte | 0x80);
        }
    }

    /// A section: its id, its size and its contents.
    fn section(id: u8, contents: &[u8]) -> Vec<u8> {
        let mut bytes = vec![id];
        bytes.extend(leb(u32::try_from(contents.len()).expect("small")));
        bytes.extend_from_slice(contents);
        bytes
    }

    /// A core module defining `memories` memories of `pages` pages and a table of each
    /// size of `tables`.
    fn module(memories: u32, pages: u32, tables: &[u32]) -> Vec<u8> {
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        if !tables.is_empty() {
            let mut contents = leb(u32::try_from(tables.len()).expect("small"));
            for &elements in tables {
                contents.extend([0x70, 0x00]);
                contents.extend(leb(elements));
            }
            bytes.extend(section(4, &contents));
        }
        if memories > 0 {
            let mut contents = leb(memories);
            for _ in 0..memories {
                contents.push(0x00);
                contents.extend(leb(pages));
            }
            bytes.extend(section(5, &contents));
        }
        bytes
    }

    /// A component instantiating each of `modules` as many times as it says.
    fn component(modules: &[(Vec<u8>, u32)]) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        for (module, _) in modules {
            bytes.extend(section(1, module));
        }
        let count: u32 = modules.iter().map(|(_, times)| times).sum();
        let mut instances = leb(count);
        for (index, (_, times)) in modules.iter().enumerate() {
            for _ in 0..*times {
                instances.push(0x00);
                instances.extend(leb(u32::try_from(index).expect("small")));
                instances.push(0x00);
            }
        }
        bytes.extend(section(2, &instances));
        bytes
    }

    /// Compiles `component` for an engine whose largest memory cap is 64 MiB: `Ok` or
    /// vigil's refusal.
    fn compile(component: &[u8]) -> Result<(), String> {
        let engine = SharedEngine::new(2, 64 << 20).expect("engine");
        compile_component(engine.engine(), component)
            .map(drop)
            .map_err(|error| format!("{error:#}"))
    }

    #[test]
    fn the_interpreters_components_fit_the_pool() {
        // componentize-py's shape, with a few native extension modules more: one memory
        // of 13 MiB, a table of 5,678 elements and the shims' table, 20 core instances.
        let python = component(&[
            (module(1, 205, &[5678]), 1),
            (module(0, 0, &[94]), 1),
            (module(0, 0, &[]), 18),
        ]);
        assert_eq!(compile(&python), Ok(()));
        // StarlingMonkey's: one memory, a table of 7,696 elements, 4 core instances.
        let javascript = component(&[
            (module(1, 40, &[7696]), 1),
            (module(0, 0, &[32]), 1),
            (module(0, 0, &[]), 2),
        ]);
        assert_eq!(compile(&javascript), Ok(()));
    }

    #[test]
    fn a_component_past_a_limit_is_refused_naming_the_limit_and_its_need() {
        let check = |component: Vec<u8>, expected: &str| {
            let refusal = compile(&component).expect_err("refused");
            assert!(
                refusal.contains(&format!(
                    "it does not fit vigil's instance pool: {expected}"
                )),
                "{refusal}"
            );
        };
        check(
            component(&[(module(1, 1, &[]), 3)]),
            "it needs 3 memories; vigil allows 2 per component",
        );
        check(
            component(&[(module(0, 0, &[1]), 5)]),
            "it needs 5 tables; vigil allows 4 per component",
        );
        check(
            component(&[(module(0, 0, &[]), 33)]),
            "it needs 33 core instances; vigil allows 32 per component",
        );
        check(
            component(&[(module(0, 0, &[30_000]), 1)]),
            "it needs a table of 30000 elements; vigil allows 20000 per table",
        );
        check(
            component(&[(module(2, 1, &[]), 1)]),
            "a core module of it defines 2 memories; vigil allows 1 per module",
        );
        check(
            component(&[(module(1, 2048, &[]), 1)]),
            "it needs 128 MiB of memory to start; vigil allows 64 MiB",
        );
    }

    #[test]
    fn other_refusals_are_wasmtime_s_own() {
        assert_eq!(pool_refusal("failed to parse WebAssembly module"), None);
        let refusal = compile(b"\0asm\x0d\0\x01\0\x01").expect_err("refused");
        assert!(!refusal.contains("instance pool"), "{refusal}");
    }
}
