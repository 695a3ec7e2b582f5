//! Whether a file that decides what vigil does — a plugin it loads, a program it runs —
//! can be trusted: only vigil's own user and root may be able to change it.
//!
//! What is checked is where the file really is (every symbolic link followed: a
//! ConfigMap's files are links through `..data`): the file, its directory, and every
//! directory above it up to `/` — whoever can write one of them can move the file's
//! directory aside and put another in its place. Each must be owned by vigil's user or by
//! root, and not writable by its group or by other users, with two exceptions: a path on a
//! file system mounted read-only cannot be written whatever its mode (a Kubernetes
//! ConfigMap or Secret volume, whose directories are world-writable by mode), and a
//! directory *above* the file's own that is sticky (`/tmp`, mode 1777) lets nobody move
//! what another user owns. The file's own directory gets no sticky exception: others
//! could add files beside it (a plugin directory's new plugin).

use std::path::{Path, PathBuf};

/// Why `path` (a file, followed through links) is not trusted; `Ok` when it is.
pub fn check_file(path: &Path) -> Result<(), String> {
    let real = resolve(path)?;
    check_path(&real, Place::Itself)?;
    let mut ancestors = real.ancestors().skip(1);
    if let Some(parent) = ancestors.next() {
        check_path(parent, Place::OwnDirectory)?;
    }
    ancestors.try_for_each(|dir| check_path(dir, Place::Above))
}

/// Why the directory `dir` (followed through links) is not trusted, as the directory
/// files are read from (no sticky exception for it); `Ok` when it is.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let real = resolve(dir)?;
    check_path(&real, Place::OwnDirectory)?;
    real.ancestors()
        .skip(1)
        .try_for_each(|above| check_path(above, Place::Above))
}

fn resolve(path: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(path)
        .map_err(|error| format!("{} cannot be resolved: {error}", path.display()))
}

/// Where a checked path stands from the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Itself,
    OwnDirectory,
    Above,
}

#[cfg(unix)]
fn check_path(path: &Path, place: Place) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let metadata = std::fs::metadata(path)
        .map_err(|error| format!("{} cannot be checked: {error}", path.display()))?;
    let us = rustix::process::geteuid().as_raw();
    let owner = metadata.uid();
    if owner != us && owner != 0 {
        return Err(format!(
            "{} is owned by user {owner}, neither vigil's user ({us}) nor root",
            path.display()
        ));
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 == 0 || read_only_mount(path) {
        return Ok(());
    }
    if place == Place::Above && mode & 0o1000 != 0 {
        return Ok(());
    }
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "its group and by other users",
        (true, false) => "its group",
        _ => "other users",
    };
    Err(format!(
        "{} is writable by {who} (mode {mode:o})",
        path.display()
    ))
}

/// Without Unix owners and modes nothing can be checked: everything is trusted.
#[cfg(not(unix))]
fn check_path(_path: &Path, _place: Place) -> Result<(), String> {
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

    #[test]
    fn every_directory_above_counts_and_a_sticky_one_above_is_trusted() {
        let top = tempfile::tempdir().expect("tempdir");
        let middle = top.path().join("middle");
        let own = middle.join("own");
        std::fs::create_dir_all(&own).expect("mkdir");
        let file = own.join("tool");
        std::fs::write(&file, b"x").expect("write");
        chmod(&file, 0o755);
        chmod(&own, 0o755);
        chmod(&middle, 0o755);
        chmod(top.path(), 0o755);
        assert_eq!(check_file(&file), Ok(()));

        // A writable directory two levels up: whoever writes it can swap `own` out.
        chmod(&middle, 0o777);
        let refused = check_file(&file).expect_err("a writable ancestor");
        assert!(
            refused.contains("middle") && refused.contains("mode 777"),
            "{refused}"
        );
        assert!(check_dir(&own).is_err());
        // Sticky, it lets nobody move what is not theirs.
        chmod(&middle, 0o1777);
        assert_eq!(check_file(&file), Ok(()));
        assert_eq!(check_dir(&own), Ok(()));
        chmod(&middle, 0o755);
    }
}
