//! `cargo install` of the `vigil` crate gives a binary that needs nothing beside it: with
//! no plugin directory anywhere it probes a fake cluster ONLINE with its embedded plugins
//! (the checks of embedded.rs, run on the installed binary).
//!
//! The install shares this build's target directory and its `dev` profile (`--profile test`):
//! the workspace's features are unified (the `vigil-workspace-hack` crate), so the
//! dependencies the tests built are reused and only vigil's own crates may be compiled
//! again. The shipped release profile (fat link-time optimisation) is not built here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_vigil_probes_with_its_embedded_plugins() {
    let root = tempfile::tempdir().unwrap();
    let binary = crate::process::binary();
    // target/debug/vigil: the target directory is two levels up.
    let target_dir = binary
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in a target directory");
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let mut install = Command::new(&cargo);
    // What cargo set for this test process describes the vigil package, not the build to
    // run; build scripts that watch those variables (ring's) would run again, and every
    // crate above them would compile again.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_for_the_test = [
            "CARGO_PKG_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
            "CARGO_MANIFEST_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || [
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref());
        if set_for_the_test {
            install.env_remove(name.as_ref());
        }
    }
    let output = install
        .args([
            "install",
            "--locked",
            "--profile",
            "test",
            "--offline",
            "--path",
        ])
        .arg(&crate_dir)
        .arg("--root")
        .arg(root.path())
        .arg("--target-dir")
        .arg(target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo install failed:\n{stderr}");
    // What was compiled again, for the record (the test's log).
    let compiled: Vec<&str> = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("Compiling"))
        .collect();
    eprintln!(
        "cargo install took {:?}; compiled: {compiled:#?}",
        started.elapsed()
    );
    // Only vigil's own crates: a dependency compiled again means the features of an
    // install differ from the workspace's (see vigil-workspace-hack).
    let foreign: Vec<&&str> = compiled
        .iter()
        .filter(|l| {
            let name = l.trim_start().trim_start_matches("Compiling ");
            !name.starts_with("vigil")
        })
        .collect();
    assert!(
        foreign.is_empty(),
        "the install compiled dependencies again: {foreign:#?}"
    );

    let installed = root.path().join("bin").join("vigil");
    assert!(installed.is_file(), "{} is missing", installed.display());
    crate::embedded::embedded_plugins_serve(&installed).await;
}
