//! Builds every guest (first-party plugins, test plugins, the plugin template) for
//! `wasm32-wasip2` through `vigil-guest-build`, and lays them out for the tests under
//! `OUT_DIR`: `first-party/NAME.wasm` with `NAME.toml`, and `test/NAME.wasm`. Nothing goes
//! to `plugins.d/`, the operators' directory.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use vigil_guest_build::{GuestBuild, GuestSet, guest_target_dir, install};

fn main() {
    if let Err(message) = run() {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(var("OUT_DIR")?);
    let root = manifest_dir
        .ancestors()
        .nth(2)
        .ok_or("tests/test-plugins has no repository root")?;
    let target = guest_target_dir(&out_dir).unwrap_or_else(|| out_dir.join("guests"));
    let guests = GuestBuild::new(root, &target);
    for source in guests.sources() {
        println!("cargo::rerun-if-changed={}", source.display());
    }
    let built = guests
        .build(&[GuestSet::FirstParty, GuestSet::Test, GuestSet::Template])
        .map_err(|error| error.to_string())?;
    for component in &built {
        let dir = if component.grants.is_some() {
            "first-party"
        } else {
            "test"
        };
        install(component, &out_dir.join(dir)).map_err(|error| error.to_string())?;
    }
    println!(
        "cargo::rustc-env=VIGIL_TEST_PLUGINS_DIR={}",
        display(&out_dir)?
    );
    Ok(())
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (run by cargo only)"))
}

fn display(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()))
}
