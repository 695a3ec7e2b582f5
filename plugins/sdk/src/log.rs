//! Writing to vigil's log (the `log` host interface; needs `log = true` in the plugin's
//! `NAME.toml`).
//!
//! vigil tags every line with the plugin's name and the cluster being probed. Use the
//! macros — [`crate::trace!`], [`crate::debug!`], [`crate::info!`], [`crate::warn!`],
//! [`crate::error!`] — which take `format!` arguments. `trace!` and `debug!` first ask
//! [`enabled`] and format nothing vigil would not record (at vigil's default `info`, a
//! debug line costs one host call and no formatting); the other three, recorded unless
//! vigil's log is turned down, write at once. Never log secret material: tokens, keys,
//! kubeconfig contents, or the `Debug` output of a request.
//!
//! Outside a component (native tests), messages go to standard error instead.

pub use crate::bindings::vigil::plugin::log::Level;

/// Whether a message at `level` would be recorded now (the plugin is granted `log`, and
/// vigil's log takes that level): `trace!` and `debug!` ask it before formatting, and so
/// can a plugin before building a costly message. Outside a component, always.
pub fn enabled(level: Level) -> bool {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::vigil::plugin::log::enabled(level);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = level;
        true
    }
}

/// Writes one message at `level`.
pub fn write(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::vigil::plugin::log::write(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{}] {message}", level.as_str());
}

impl Level {
    /// The level's name as in the WIT: `trace`, `debug`, `info`, `warn`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Logs at `trace` level: `vigil_plugin_sdk::trace!("read {} bytes", n)`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::Trace) {
            $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)*))
        }
    };
}

/// Logs at `debug` level: `vigil_plugin_sdk::debug!("context {context:?}")`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::Debug) {
            $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)*))
        }
    };
}

/// Logs at `info` level: `vigil_plugin_sdk::info!("probing {}", server)`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => {
        $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)*))
    };
}

/// Logs at `warn` level: `vigil_plugin_sdk::warn!("unexpected status {status}")`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {
        $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)*))
    };
}

/// Logs at `error` level: `vigil_plugin_sdk::error!("cannot read the kubeconfig")`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => {
        $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)*))
    };
}
