//! Builds vigil's WebAssembly guests — the first-party plugins, the hostile test plugins
//! and the plugin template — for `wasm32-wasip2`, from a build script.
//!
//! The guests form a workspace of their own (`plugins/Cargo.toml`): they are components,
//! built with a release profile tuned for size. A build script that needs them (the test
//! plugins' crate, and any crate that embeds the first-party plugins) calls
//! [`GuestBuild::build`], which runs the same `cargo` as the outer build on that workspace:
//!
//! - into **one** guest target directory, `<target>/guests`, whichever outer build asks
//!   (test, clippy, install), so the guests are compiled once and then only checked;
//! - without the outer build's `RUSTC_WRAPPER`, `RUSTC_WORKSPACE_WRAPPER`, `RUSTFLAGS`,
//!   `CARGO_ENCODED_RUSTFLAGS`, `CARGO_BUILD_RUSTFLAGS`, `CARGO_BUILD_TARGET` and
//!   `CARGO_TARGET_DIR`: a clippy or coverage run of the host must not leak into the guests;
//! - failing, never skipping, when a piece of the toolchain is missing, with the command
//!   that installs it.
//!
//! Every output is checked to be a WebAssembly component before it is handed out.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target every guest is built for.
pub const GUEST_TARGET: &str = "wasm32-wasip2";

/// The first eight bytes of a WebAssembly component (magic, then the component layer).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// Variables of the outer build that must not reach the guests' build.
const CLEARED_VARIABLES: [&str; 7] = [
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_TARGET_DIR",
];

/// Which guests to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestSet {
    /// The first-party plugins (`plugins/*` crates that are `cdylib`s), each with its
    /// `NAME.toml` of grants.
    FirstParty,
    /// The test plugins (`tests/plugins/*`, packages `vigil-test-NAME`): test-only, never
    /// installed where operators' plugins go.
    Test,
    /// The plugin template (`examples/plugin-template`), a standalone crate built as its
    /// authors build it.
    Template,
}

/// One built component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// The plugin's name (its `NAME.wasm`).
    pub name: String,
    /// The component in the guest target directory.
    pub wasm: PathBuf,
    /// Its `NAME.toml` of grants, for the plugins that have one in the repository.
    pub grants: Option<PathBuf>,
}

/// Why the guests could not be built.
#[derive(Debug)]
pub enum GuestBuildError {
    /// The `wasm32-wasip2` standard library is not installed.
    MissingTarget {
        /// The sysroot that lacks it.
        sysroot: PathBuf,
    },
    /// A command could not be run, or failed.
    Command {
        /// The command line.
        command: String,
        /// What happened.
        detail: String,
    },
    /// A file could not be read.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A built file is not a WebAssembly component.
    NotAComponent {
        /// The file.
        path: PathBuf,
    },
}

impl fmt::Display for GuestBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingTarget { sysroot } => write!(
                f,
                "the {GUEST_TARGET} target is not installed in {}: run `rustup target add {GUEST_TARGET}`",
                sysroot.display()
            ),
            Self::Command { command, detail } => write!(f, "`{command}` {detail}"),
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::NotAComponent { path } => write!(
                f,
                "{} is not a WebAssembly component (wrong header)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for GuestBuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The guests of one repository checkout, built into one target directory.
#[derive(Debug, Clone)]
pub struct GuestBuild {
    root: PathBuf,
    target_dir: PathBuf,
    cargo: OsString,
    rustc: OsString,
}

impl GuestBuild {
    /// The guests of the repository at `root`, built under `target_dir` (usually
    /// `<outer target>/guests`: see [`guest_target_dir`]). `cargo` and `rustc` are taken
    /// from the outer build's `CARGO` and `RUSTC` when it set them.
    pub fn new(root: &Path, target_dir: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            target_dir: target_dir.to_path_buf(),
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            rustc: std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()),
        }
    }

    /// The files and directories whose change means the guests must be built again (for
    /// `cargo::rerun-if-changed`): the guest workspace, the test plugins, the template and
    /// the contract.
    pub fn sources(&self) -> Vec<PathBuf> {
        [
            "plugins",
            "tests/plugins",
            "examples/plugin-template",
            "wit",
        ]
        .iter()
        .map(|dir| self.root.join(dir))
        .collect()
    }

    /// [`Self::sources`] that the guests of `set` are built from.
    pub fn sources_of(&self, set: GuestSet) -> Vec<PathBuf> {
        let dirs: &[&str] = match set {
            GuestSet::FirstParty => &["plugins", "wit"],
            GuestSet::Test => &["plugins", "tests/plugins", "wit"],
            GuestSet::Template => &["examples/plugin-template", "wit"],
        };
        dirs.iter().map(|dir| self.root.join(dir)).collect()
    }

    /// Builds `sets` (the guest workspace's in one `cargo` run, so that they share their
    /// dependencies' builds) and returns every component, checked.
    pub fn build(&self, sets: &[GuestSet]) -> Result<Vec<Component>, GuestBuildError> {
        self.check_target()?;
        let mut planned = Vec::new();
        if sets.contains(&GuestSet::FirstParty) {
            planned.extend(self.first_party()?);
        }
        if sets.contains(&GuestSet::Test) {
            planned.extend(self.test_plugins()?);
        }
        if !planned.is_empty() {
            let packages: Vec<&str> = planned.iter().map(|p| p.package.as_str()).collect();
            self.cargo_build(&self.root.join("plugins/Cargo.toml"), &packages)?;
        }
        if sets.contains(&GuestSet::Template) {
            let manifest = self.root.join("examples/plugin-template/Cargo.toml");
            self.cargo_build(&manifest, &["plugin-template"])?;
            planned.push(Planned {
                name: "plugin-template".to_owned(),
                package: "plugin-template".to_owned(),
                grants: None,
            });
        }
        let built = self.target_dir.join(GUEST_TARGET).join("release");
        planned
            .into_iter()
            .map(|plan| {
                let wasm = built.join(format!("{}.wasm", plan.package.replace('-', "_")));
                check_component(&wasm)?;
                Ok(Component {
                    name: plan.name,
                    wasm,
                    grants: plan.grants,
                })
            })
            .collect()
    }

    fn check_target(&self) -> Result<(), GuestBuildError> {
        let mut command = Command::new(&self.rustc);
        command.args(["--print", "sysroot"]);
        let output = command.output().map_err(|error| GuestBuildError::Command {
            command: format!("{} --print sysroot", self.rustc.to_string_lossy()),
            detail: format!("could not run: {error}"),
        })?;
        let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if sysroot.join("lib/rustlib").join(GUEST_TARGET).is_dir() {
            Ok(())
        } else {
            Err(GuestBuildError::MissingTarget { sysroot })
        }
    }

    /// The `cdylib` crates of the guest workspace, with their grants.
    fn first_party(&self) -> Result<Vec<Planned>, GuestBuildError> {
        let mut planned = Vec::new();
        for dir in sorted_dirs(&self.root.join("plugins"))? {
            let manifest = dir.join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else {
                continue;
            };
            // Plugins are components, so `cdylib` crates; the SDK and the rules it shares
            // with the host are libraries.
            if !text
                .lines()
                .any(|l| l.replace(' ', "") == r#"crate-type=["cdylib"]"#)
            {
                continue;
            }
            let name = file_name(&dir);
            planned.push(Planned {
                grants: Some(dir.join(format!("{name}.toml"))),
                package: name.clone(),
                name,
            });
        }
        Ok(planned)
    }

    fn test_plugins(&self) -> Result<Vec<Planned>, GuestBuildError> {
        Ok(sorted_dirs(&self.root.join("tests/plugins"))?
            .into_iter()
            .filter(|dir| dir.join("Cargo.toml").is_file())
            .map(|dir| {
                let name = file_name(&dir);
                Planned {
                    package: format!("vigil-test-{name}"),
                    name,
                    grants: None,
                }
            })
            .collect())
    }

    fn cargo_build(&self, manifest: &Path, packages: &[&str]) -> Result<(), GuestBuildError> {
        let mut command = self.cargo_command(manifest, packages);
        let shown = format!("{command:?}");
        let status = command.status().map_err(|error| GuestBuildError::Command {
            command: shown.clone(),
            detail: format!("could not run: {error}"),
        })?;
        if status.success() {
            Ok(())
        } else {
            Err(GuestBuildError::Command {
                command: shown,
                detail: format!("failed ({status})"),
            })
        }
    }

    /// The `cargo build` of `packages` of the workspace at `manifest`, for the guest target,
    /// into the guest target directory, without the outer build's wrappers and flags.
    fn cargo_command(&self, manifest: &Path, packages: &[&str]) -> Command {
        let mut command = Command::new(&self.cargo);
        command
            .args(["build", "--locked", "--release", "--target", GUEST_TARGET])
            .arg("--manifest-path")
            .arg(manifest)
            .arg("--target-dir")
            .arg(&self.target_dir);
        for package in packages {
            command.args(["-p", package]);
        }
        for variable in CLEARED_VARIABLES {
            command.env_remove(variable);
        }
        command
    }
}

/// The guest target directory of an outer build whose build script has `out_dir` as its
/// `OUT_DIR`: `guests` under the outer target directory (the ancestor that holds cargo's
/// `CACHEDIR.TAG`), so that every outer build shares it. `None` when there is no such
/// ancestor.
pub fn guest_target_dir(out_dir: &Path) -> Option<PathBuf> {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(|target| target.join("guests"))
}

/// Copies `component` to `destination` (and its grants beside it, as `NAME.toml`), each
/// written beside and renamed into place so that a watcher never sees half a file.
pub fn install(component: &Component, destination_dir: &Path) -> Result<PathBuf, GuestBuildError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GuestBuildError::Io { path, source }
    };
    std::fs::create_dir_all(destination_dir).map_err(io(destination_dir))?;
    // The grants first: a component that appears without its NAME.toml is denied everything.
    if let Some(grants) = &component.grants {
        let to = destination_dir.join(format!("{}.toml", component.name));
        copy_atomically(grants, &to).map_err(io(grants))?;
    }
    let to = destination_dir.join(format!("{}.wasm", component.name));
    copy_atomically(&component.wasm, &to).map_err(io(&component.wasm))?;
    Ok(to)
}

fn copy_atomically(from: &Path, to: &Path) -> std::io::Result<()> {
    let partial = to.with_extension("partial");
    std::fs::copy(from, &partial)?;
    std::fs::rename(&partial, to)
}

#[derive(Debug)]
struct Planned {
    name: String,
    package: String,
    grants: Option<PathBuf>,
}

fn check_component(path: &Path) -> Result<(), GuestBuildError> {
    use std::io::Read as _;
    let mut header = [0_u8; 8];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut header))
        .map_err(|source| GuestBuildError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if header == COMPONENT_HEADER {
        Ok(())
    } else {
        Err(GuestBuildError::NotAComponent {
            path: path.to_path_buf(),
        })
    }
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, GuestBuildError> {
    let entries = std::fs::read_dir(dir).map_err(|source| GuestBuildError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_target_dir_is_under_the_outer_target_dir() {
        let dir = std::env::temp_dir().join(format!("vigil-guest-build-{}", std::process::id()));
        let out = dir.join("target/debug/build/x-123/out");
        std::fs::create_dir_all(&out).expect("create");
        assert_eq!(guest_target_dir(&out), None);
        std::fs::write(dir.join("target/CACHEDIR.TAG"), "Signature").expect("tag");
        assert_eq!(guest_target_dir(&out), Some(dir.join("target/guests")));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A clippy or coverage run of the host sets these for its own crates; the guests'
    /// build must not inherit them.
    #[test]
    fn the_outer_builds_wrappers_flags_and_target_do_not_reach_the_guests() {
        let guests = GuestBuild::new(Path::new("/repo"), Path::new("/repo/target/guests"));
        let command = guests.cargo_command(Path::new("/repo/plugins/Cargo.toml"), &["http"]);
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        for variable in CLEARED_VARIABLES {
            assert!(
                removed.iter().any(|r| r == variable),
                "{variable} is passed on"
            );
        }
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for expected in [
            "--target",
            GUEST_TARGET,
            "--target-dir",
            "/repo/target/guests",
            "-p",
            "http",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "{expected} missing from {args:?}"
            );
        }
    }

    /// A toolchain without the guest target is a failure that says how to install it.
    #[test]
    fn a_missing_guest_target_fails_with_the_command_that_installs_it() {
        let dir = std::env::temp_dir().join(format!("vigil-guest-sysroot-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib/rustlib/x86_64-unknown-linux-gnu")).expect("create");
        // A `rustc` whose sysroot is `dir`, which holds the host's standard library only.
        let script = dir.join("rustc");
        std::fs::write(&script, format!("#!/bin/sh\necho {}\n", dir.display())).expect("write");
        let mut permissions = std::fs::metadata(&script).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&script, permissions).expect("chmod");
        let guests = GuestBuild {
            root: dir.clone(),
            target_dir: dir.join("target"),
            cargo: "cargo".into(),
            rustc: script.into_os_string(),
        };
        let error = guests
            .build(&[GuestSet::Test])
            .expect_err("no wasm32-wasip2 here");
        assert!(
            matches!(error, GuestBuildError::MissingTarget { .. }),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("rustup target add wasm32-wasip2"),
            "{error}"
        );
        std::fs::create_dir_all(dir.join("lib/rustlib").join(GUEST_TARGET)).expect("create");
        assert!(guests.check_target().is_ok(), "found once installed");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_file_that_is_not_a_component_is_refused() {
        let dir = std::env::temp_dir().join(format!("vigil-guest-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create");
        let module = dir.join("module.wasm");
        std::fs::write(&module, [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]).expect("write");
        assert!(matches!(
            check_component(&module),
            Err(GuestBuildError::NotAComponent { .. })
        ));
        let component = dir.join("component.wasm");
        std::fs::write(&component, COMPONENT_HEADER).expect("write");
        assert!(check_component(&component).is_ok());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
