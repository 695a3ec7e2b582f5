//! The outside programs that system tests need (PostgreSQL, Alertmanager, promtool,
//! iptables, Chromium, componentize-py and -js…), each installed by
//! `scripts/install-tools NAME`. A system test that cannot find one fails naming that
//! command, never skips.

use std::path::PathBuf;

/// The path of `program` on `PATH`. Panics when it is not there, naming the command that
/// installs it: `scripts/install-tools NAME`.
pub fn require(program: &str, name: &str) -> PathBuf {
    find(program).unwrap_or_else(|| panic!("{}", missing(program, name)))
}

/// The path of `program` on `PATH`, if it is there.
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// What a system test says when `program` is missing.
pub fn missing(program: &str, name: &str) -> String {
    format!(
        "`{program}` is not installed, and this system test needs it: \
         run `scripts/install-tools {name}` (or `scripts/install-tools all`, \
         as `scripts/dev test` does)"
    )
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
