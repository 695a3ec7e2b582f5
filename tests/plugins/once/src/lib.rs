//! `once`: a test-only plugin that answers `healthy` on the first probe call of its
//! instance, and an error naming the count on any later call of the same instance. vigil
//! gives every call an instance of its own, so through the host it is always healthy; a
//! host that let a call find the state an earlier call left would be caught by it.
//! `accepts` is the SDK's default (kubeconfig file references). Not a hostile plugin.

use std::sync::atomic::{AtomicU32, Ordering};

use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// Probe calls made on this instance so far.
static CALLS: AtomicU32 = AtomicU32::new(0);

/// The plugin.
#[derive(Debug)]
pub struct Once;

impl ProbePlugin for Once {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "once",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: healthy on its instance's first call only",
        )
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        match CALLS.fetch_add(1, Ordering::Relaxed) {
            0 => Ok(ProbeReport::healthy(0)),
            earlier => Err(ProbeError::not_probeable(
                ReasonClass::NoPlugin,
                format!("instance reused: {earlier} probe calls before this one"),
            )),
        }
    }
}

vigil_plugin_sdk::register!(Once);
