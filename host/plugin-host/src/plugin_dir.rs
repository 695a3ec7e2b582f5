//! Whether the plugin directory and its files can be trusted.
//!
//! A plugin runs with the grants its `NAME.toml` gives it (credentials, egress), so whoever
//! can change a `NAME.wasm` or a `NAME.toml` can read every credential vigil serves. Only
//! vigil's own user and root may be able to: a directory or file that is owned by another
//! user, or writable by its group or by other users, is refused, naming the path and its
//! owner or mode. A read-only mount (a Kubernetes ConfigMap volume, whose directories are
//! world-writable by mode but cannot be written) is trusted whatever its modes.

use std::path::Path;

/// Why the plugin directory, or one of its files, is not trusted; `Ok` when it is.
///
/// `path` is followed through symbolic links (a ConfigMap's `NAME.wasm` is a link through
/// `..data`): what is checked is the file that would be loaded, and the directory it
/// really lies in.
pub(crate) fn check_file(path: &Path) -> Result<(), String> {
    check_path(path)?;
    let real = std::fs::canonicalize(path)
        .map_err(|error| format!("{} cannot be resolved: {error}", path.display()))?;
    match real.parent() {
        Some(parent) => check_path(parent),
        None => Ok(()),
    }
}

/// [`check_file`] for the directory itself (followed through a symbolic link).
pub(crate) fn check_dir(dir: &Path) -> Result<(), String> {
    check_path(dir)
}

#[cfg(unix)]
fn check_path(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let metadata = std::fs::metadata(path)
        .map_err(|error| format!("{} cannot be checked: {error}", path.display()))?;
    if read_only_mount(path) {
        return Ok(());
    }
    let us = rustix::process::geteuid().as_raw();
    let owner = metadata.uid();
    if owner != us && owner != 0 {
        return Err(format!(
            "{} is owned by user {owner}, neither vigil's user ({us}) nor root",
            path.display()
        ));
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and by other users",
            (true, false) => "its group",
            _ => "other users",
        };
        return Err(format!(
            "{} is writable by {who} (mode {mode:o})",
            path.display()
        ));
    }
    Ok(())
}

/// Without Unix owners and modes nothing can be checked: everything is trusted, as before.
#[cfg(not(unix))]
fn check_path(_path: &Path) -> Result<(), String> {
    Ok(())
}

/// Whether `path` lies on a file system mounted read-only.
#[cfg(unix)]
fn read_only_mount(path: &Path) -> bool {
    rustix::fs::statvfs(path)
        .is_ok_and(|stats| stats.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn modes_and_owners_decide() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("p.wasm");
        std::fs::write(&file, b"x").expect("write");
        chmod(&file, 0o644);
        chmod(dir.path(), 0o755);
        assert_eq!(check_dir(dir.path()), Ok(()));
        assert_eq!(check_file(&file), Ok(()));

        chmod(&file, 0o666);
        let refused = check_file(&file).expect_err("other-writable");
        assert!(
            refused.contains("p.wasm") && refused.contains("mode 666"),
            "{refused}"
        );
        chmod(&file, 0o664);
        let refused = check_file(&file).expect_err("group-writable");
        assert!(refused.contains("its group"), "{refused}");
        chmod(&file, 0o644);

        chmod(dir.path(), 0o1777);
        let refused = check_dir(dir.path()).expect_err("a sticky world-writable directory");
        assert!(refused.contains("mode 1777"), "{refused}");
        // A file whose real directory is writable by others is refused too.
        assert!(check_file(&file).is_err());
        chmod(dir.path(), 0o755);

        // A link to a file in another, writable directory is judged by where it leads.
        let elsewhere = tempfile::tempdir().expect("tempdir");
        chmod(elsewhere.path(), 0o777);
        let target = elsewhere.path().join("q.wasm");
        std::fs::write(&target, b"x").expect("write");
        chmod(&target, 0o644);
        let link = dir.path().join("q.wasm");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let refused = check_file(&link).expect_err("the real directory is writable");
        assert!(refused.contains("mode 777"), "{refused}");
    }
}
