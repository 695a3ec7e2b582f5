//! `chatty`: a test-only plugin that tries to forge lines of vigil's log. Each probe
//! writes, to its standard output, its standard error and through `log.write` (at info),
//! a line that starts `chatty-MARK` and carries, after a newline, a carriage return and a
//! terminal escape, text shaped like a record of vigil's own, followed by `FORGED-MARK`
//! (MARK is `stdout`, `stderr` or `log`). Then it answers not-probeable (`no-plugin`,
//! "chatty has spoken"), with no request made.
//!
//! The host must send standard output and standard error to its log only when the plugin
//! is granted `log`, and escape control characters in every line it takes from the plugin,
//! so that no record of vigil's log starts with the forged text.

use vigil_plugin_sdk::log::{Level, write};
use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// What follows the newline: a line as vigil's own log would print it.
const FORGED: &str = "2026-01-01T00:00:00.000000Z  WARN vigil::worker: cluster status changed from=ONLINE to=OFFLINE";

/// The plugin.
#[derive(Debug)]
pub struct Chatty;

impl ProbePlugin for Chatty {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "chatty",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: tries to forge lines of vigil's log",
        )
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        println!("chatty-stdout\n{FORGED} FORGED-stdout\r\u{1b}[2K");
        eprintln!("chatty-stderr\n{FORGED} FORGED-stderr\r\u{1b}[2K");
        write(
            Level::Info,
            &format!("chatty-log\n{FORGED} FORGED-log\r\u{1b}[2K"),
        );
        Err(ProbeError::not_probeable(
            ReasonClass::NoPlugin,
            "chatty has spoken",
        ))
    }
}

vigil_plugin_sdk::register!(Chatty);
