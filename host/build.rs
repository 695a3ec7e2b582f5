//! Builds the first-party plugins into the `vigil` binary, and records what `vigil
//! --version` prints about the build.
//!
//! The plugins are built for `wasm32-wasip2` by `vigil-guest-build` (into the guest target
//! directory that every build of this checkout shares), checked to be components, and
//! written to `OUT_DIR/embedded.rs` as one `include_bytes!` each with the text of their
//! `NAME.toml`. The build date is `SOURCE_DATE_EPOCH` when set (reproducible builds), else
//! the time of the build; the commit is `VIGIL_BUILD_COMMIT` when set (a build from an
//! archive), else what `git` says
//! of the checkout, else `unknown`.

#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use vigil_guest_build::{GuestBuild, GuestSet, guest_target_dir};

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
        .parent()
        .ok_or("the vigil crate has no repository root")?;

    let target = guest_target_dir(&out_dir).unwrap_or_else(|| out_dir.join("guests"));
    let guests = GuestBuild::new(root, &target);
    for source in guests.sources_of(GuestSet::FirstParty) {
        println!("cargo::rerun-if-changed={}", source.display());
    }
    let built = guests
        .build(&[GuestSet::FirstParty])
        .map_err(|error| error.to_string())?;

    let embedded_dir = out_dir.join("embedded");
    std::fs::create_dir_all(&embedded_dir)
        .map_err(|e| format!("{}: {e}", embedded_dir.display()))?;
    let mut code = String::from(
        "/// The first-party plugins built into this binary: name, component, `NAME.toml`.\n\
         pub const EMBEDDED: &[(&str, &[u8], &str)] = &[\n",
    );
    for component in &built {
        let grants = component.grants.as_deref().ok_or_else(|| {
            format!(
                "the first-party plugin {} has no grants file",
                component.name
            )
        })?;
        // Copied next to the generated code, so that the binary embeds exactly what was
        // checked, whatever later builds write to the guest target directory.
        let wasm = embedded_dir.join(format!("{}.wasm", component.name));
        let toml = embedded_dir.join(format!("{}.toml", component.name));
        copy(&component.wasm, &wasm)?;
        copy(grants, &toml)?;
        writeln!(
            code,
            "    ({:?}, include_bytes!({:?}), include_str!({:?})),",
            component.name,
            display(&wasm)?,
            display(&toml)?
        )
        .map_err(|e| e.to_string())?;
    }
    code.push_str("];\n");
    write(&out_dir.join("embedded.rs"), &code)?;

    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo::rerun-if-env-changed=VIGIL_BUILD_COMMIT");
    let build_epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(value) => value
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("SOURCE_DATE_EPOCH is not a number of seconds: {value:?}"))?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs(),
    };
    println!("cargo::rustc-env=VIGIL_BUILD_EPOCH={build_epoch}");
    println!("cargo::rustc-env=VIGIL_GIT_COMMIT={}", git_commit(root));
    Ok(())
}

/// The commit the binary is built from.
fn git_commit(root: &Path) -> String {
    if let Ok(commit) = std::env::var("VIGIL_BUILD_COMMIT") {
        return commit;
    }
    let git_dir = root.join(".git");
    if !git_dir.exists() {
        return "unknown".to_owned();
    }
    // A new commit changes HEAD (a detached checkout) or the branch it points to.
    println!("cargo::rerun-if-changed={}", git_dir.join("HEAD").display());
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD"))
        && let Some(reference) = head.trim().strip_prefix("ref: ")
    {
        // A watched file that does not exist would run this script at every build.
        let loose = git_dir.join(reference);
        let watched = if loose.exists() {
            loose
        } else {
            git_dir.join("packed-refs")
        };
        if watched.exists() {
            println!("cargo::rerun-if-changed={}", watched.display());
        }
    }
    Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    // Only when it changed: a rewritten file would make cargo rebuild the crate.
    if std::fs::read(from).ok() == std::fs::read(to).ok() {
        return Ok(());
    }
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (run by cargo only)"))
}

fn display(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()))
}
