//! Running the `vigil` binary of this package in tests, through the one harness of
//! `vigil-test-support` ([`vigil_test_support::serve`]): only this package knows the
//! binary's path.

use std::path::Path;
use std::process::Command;

pub use vigil_test_support::serve::{
    Running, Serve, TRACE, Vigil, http_get, log_lines, message, read_log, signal, tail, wait_exit,
};

/// The `vigil` binary this package built.
pub fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_vigil"))
}

/// `vigil` with a clean environment, run in `dir`, for any of its commands
/// ([`vigil_test_support::serve::command`]).
pub fn vigil(dir: &Path) -> Command {
    vigil_test_support::serve::command(binary(), dir)
}

/// `vigil serve` run in `dir`, to configure and start ([`Serve`]).
pub fn serve(dir: &Path) -> Serve {
    Serve::new(binary(), dir)
}
