//! `alloc`: a test-only plugin whose `probe` allocates 1 GiB and writes to every byte of it.
//! Under vigil's memory cap (64 MiB by default) the allocation fails and the Rust guest
//! aborts, which traps; the host must report the probe `inconclusive` (memory limit — its
//! `ResourceLimiter` knows the cap was hit, which the trap alone does not say) and stay up.
//! If the host enforced no cap, the probe would succeed in touching the memory and return
//! `inconclusive` (`plugin-fault`) with a message starting "memory limit not enforced", so a
//! host test can tell the two apart.

use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// How much the probe allocates.
const ONE_GIB: usize = 1 << 30;

/// The plugin.
#[derive(Debug)]
pub struct Alloc;

impl ProbePlugin for Alloc {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "alloc",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: allocates and touches 1 GiB",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        // `vec![1; n]` writes every byte, so the pages are really used, not only reserved.
        let block = std::hint::black_box(vec![1u8; ONE_GIB]);
        let sum: u64 = block
            .iter()
            .step_by(64 * 1024)
            .map(|&byte| u64::from(byte))
            .sum();
        Err(ProbeError::inconclusive(
            ReasonClass::PluginFault,
            format!("memory limit not enforced: allocated and touched 1 GiB (checksum {sum})"),
        ))
    }
}

vigil_plugin_sdk::register!(Alloc);
