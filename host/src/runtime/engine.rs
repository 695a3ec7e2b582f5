//! The one wasmtime `Engine` of the process and its epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. A guest's CPU deadline is a number of these ticks, so
/// a deadline is enforced to within one tick.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The address space reserved for each linear memory: the whole 32-bit index space, so
/// that compiled code needs no explicit bounds check — an access past the accessible
/// part (the plugin's cap at most) lands in reserved, inaccessible pages and traps. It is
/// only address space (about 4 GiB a pool slot, nothing resident); wasmtime's own default.
/// Reserving only the cap instead cost the `kubeconfig-file` plugin about 54,000 more
/// instructions a probe — a fifth of its guest code's (BENCHMARKS.md, plugin runtime
/// overhead, "Fifth follow-up").
const MEMORY_RESERVATION_BYTES: u64 = 1 << 32;

/// The guard region after each linear memory, which lets a load's or store's static
/// offset go unchecked too; wasmtime's default.
const MEMORY_GUARD_BYTES: u64 = 32 << 20;

/// Memories a component may have. A Rust `wasm32-wasip2` component has one.
const MEMORIES_PER_COMPONENT: u32 = 2;

/// Tables a component may have (the main module's plus the shims `wit-component` adds).
const TABLES_PER_COMPONENT: u32 = 4;

/// Core instances a component may have (the main module, the WASI adapter, shims).
const CORE_INSTANCES_PER_COMPONENT: u32 = 16;

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
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
}

impl SharedEngine {
    /// An engine with the component model, epoch interruption and a pooling allocator
    /// for `concurrency` calls at once, each capped at `max_memory_bytes`.
    pub(crate) fn new(concurrency: u32, max_memory_bytes: u64) -> wasmtime::Result<Self> {
        let instances = concurrency.max(1).saturating_add(SPARE_INSTANCES);
        let memory_slot = usize::try_from(max_memory_bytes).unwrap_or(usize::MAX);

        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(TABLES_PER_COMPONENT)
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

        let stop = Arc::new(AtomicBool::new(false));
        // One ticker for the whole process: a thread per store would cost more than the
        // calls it bounds. It holds only a weak handle so that it never keeps the engine.
        let weak = engine.weak();
        let flag = Arc::clone(&stop);
        let ticker = std::thread::Builder::new()
            .name("vigil-epoch".to_owned())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|error| {
                wasmtime::Error::msg(format!("cannot start the epoch ticker: {error}"))
            })?;
        Ok(Self {
            engine,
            stop,
            ticker: Some(ticker),
        })
    }

    /// The engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for SharedEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker.take() {
            // The ticker sleeps one tick at most; joining keeps no thread behind.
            let _ = ticker.join();
        }
    }
}
