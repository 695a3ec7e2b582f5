//! `vigil-guest-build`: builds the first-party plugins for `wasm32-wasip2` and installs
//! them, each `NAME.wasm` with its `NAME.toml` of grants, into a plugin directory (what
//! `scripts/build-plugins` runs for `scripts/dev serve` and the demo).
//!
//! Usage: `vigil-guest-build first-party DIR`

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use vigil_guest_build::{GuestBuild, GuestSet, install};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [command, dir] = args.as_slice() else {
        eprintln!("usage: vigil-guest-build first-party DIR");
        return ExitCode::from(2);
    };
    if command != "first-party" {
        eprintln!("unknown command {command:?}; usage: vigil-guest-build first-party DIR");
        return ExitCode::from(2);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    // The same guest target directory as the test build's, so neither rebuilds the other's.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("guests");
    let built = match GuestBuild::new(&root, &target).build(&[GuestSet::FirstParty]) {
        Ok(built) => built,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    for component in &built {
        match install(component, Path::new(dir)) {
            Ok(path) => {
                let size = std::fs::metadata(&path).map_or(0, |m| m.len());
                eprintln!("    {:<48} {size:>8} bytes", path.display());
            }
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
