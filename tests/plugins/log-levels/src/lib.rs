//! `log-levels`: a test-only plugin that says which log levels vigil would record
//! (`log.enabled`), and whether the SDK's `debug!` formatted its message: every probe
//! answers not-probeable (`no-plugin`) with `enabled: LEVELS; debug formatted: N`, where
//! LEVELS lists the enabled levels from `trace` to `error` and N counts the calls of the
//! `debug!` line's argument (0 when vigil does not take debug lines). Not a hostile plugin.

use std::sync::atomic::{AtomicU32, Ordering};

use vigil_plugin_sdk::log::{Level, enabled};
use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// How many times the `debug!` line's argument was formatted in this instance.
static FORMATTED: AtomicU32 = AtomicU32::new(0);

/// An argument whose formatting is counted.
struct Counted;

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        FORMATTED.fetch_add(1, Ordering::Relaxed);
        f.write_str("counted")
    }
}

/// The plugin.
#[derive(Debug)]
pub struct LogLevels;

impl ProbePlugin for LogLevels {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "log-levels",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: says which log levels vigil records",
        )
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let levels: Vec<&str> = [
            Level::Trace,
            Level::Debug,
            Level::Info,
            Level::Warn,
            Level::Error,
        ]
        .into_iter()
        .filter(|level| enabled(*level))
        .map(Level::as_str)
        .collect();
        vigil_plugin_sdk::debug!("a debug line with a {} argument", Counted);
        Err(ProbeError::not_probeable(
            ReasonClass::NoPlugin,
            format!(
                "enabled: {}; debug formatted: {}",
                levels.join(","),
                FORMATTED.load(Ordering::Relaxed)
            ),
        ))
    }
}

vigil_plugin_sdk::register!(LogLevels);
