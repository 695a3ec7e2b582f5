//! `future-version`: a test-only probe plugin built against a future contract,
//! `vigil:plugin@0.9.0` (`wit/plugin.wit`, a copy of `wit/since_v0.1.0/plugin.wit` with only
//! the package version changed). Its exports are named `vigil:plugin/prober@0.9.0#…`, which
//! no vigil knows. The host must refuse to load it, and the error must name the version
//! (`0.9.0`) so that an operator knows to upgrade vigil rather than to fix the plugin. Were it
//! loaded, it would answer like any probe plugin (`healthy`).

// Generated glue: the export functions are `unsafe` extern functions.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "probe",
    path: "wit",
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::{Cluster, PluginInfo, ProbeError, ProbeReport, ProbeRequest, Verdict};

/// The plugin.
#[derive(Debug)]
pub struct FutureVersion;

impl Guest for FutureVersion {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "future-version".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            schemes: vec!["file".to_owned()],
            description: "test: built against vigil:plugin@0.9.0".to_owned(),
        }
    }

    fn accepts(_: Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport {
            verdict: Verdict::Healthy,
            reason: None,
            message: "a plugin from the future".to_owned(),
            latency_ms: 0,
            server_version: None,
            details: Vec::new(),
        })
    }
}

export!(FutureVersion);
