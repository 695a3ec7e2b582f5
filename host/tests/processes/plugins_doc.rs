//! PLUGINS.md run as a new user runs it: every ```sh block, in order, in one shell, in a
//! fresh copy of what the guide touches (the template is copied; the SDK and the contract
//! are linked), with the built `vigil` binary first on `PATH`. The guide's template build
//! to `wasm32-wasip2` therefore runs here, and `vigil plugin check` must accept the result,
//! so the document cannot drift from the code.
//!
//! The copy lives at a fixed place under `target/`, and the template's `target/` directory
//! is a link to `target/guests/` (where the test plugins' build script builds the template
//! too), so the dependencies are built once and a second run rebuilds only what changed,
//! while the commands read exactly as the guide writes them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The fenced blocks of `markdown` whose info string is `lang`, in order.
pub(crate) fn fenced_blocks(markdown: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match &mut current {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    current = Some((info.trim().to_owned(), String::new()));
                }
            }
            Some((info, text)) => {
                if trimmed.starts_with("```") {
                    if info == lang {
                        blocks.push(std::mem::take(text));
                    }
                    current = None;
                } else {
                    text.push_str(trimmed);
                    text.push('\n');
                }
            }
        }
    }
    assert!(current.is_none(), "an unclosed fence in the document");
    blocks
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            copy_dir(&entry.path(), &to.join(&name));
        } else if kind.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).expect("copy");
        }
    }
}

/// Runs `script` (a guide's shell blocks, `guide` naming them in a failure) as a new user
/// would: in one bash shell (`set -euxo pipefail`) in `dir`, with the built `vigil` first on
/// `PATH`, no `VIGIL_PLUGIN_DIR`, `cache` as vigil's compiled-plugin cache (where a new
/// user's shell would not point), and whatever else `configure` sets. Fails the test when
/// a command fails; returns the standard output.
pub(crate) fn run_guide(
    guide: &str,
    script: &str,
    dir: &Path,
    cache: &Path,
    configure: impl FnOnce(&mut Command),
) -> String {
    let vigil = crate::process::binary();
    let path = std::env::join_paths(
        std::iter::once(vigil.parent().expect("bin dir").to_path_buf()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ),
    )
    .expect("PATH");
    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(format!("set -euxo pipefail\n{script}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("VIGIL_CACHE_DIR", cache)
        .env_remove("VIGIL_PLUGIN_DIR")
        .env("NO_COLOR", "1");
    configure(&mut bash);
    let output = bash.output().expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{guide} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    stdout
}

#[test]
fn the_guide_blocks_extract_in_order_and_only_sh() {
    let blocks = fenced_blocks(
        "a\n```sh\none\n```\n```rust\nfn x() {}\n```\n  ```sh\n  two\n  three\n  ```\n```text\nno\n```\n",
        "sh",
    );
    assert_eq!(blocks, ["one\n", "two\nthree\n"]);
}

#[test]
fn every_shell_command_of_plugins_md_runs_and_the_template_is_accepted() {
    let root = root();
    let guide = std::fs::read_to_string(root.join("PLUGINS.md")).expect("PLUGINS.md");
    let blocks = fenced_blocks(&guide, "sh");
    let script = blocks.concat();
    // The guide must keep its promise: build the template for wasm32-wasip2 and check it.
    for step in [
        "cargo build --release --target wasm32-wasip2",
        "vigil plugin check ",
        "plugins.d",
    ] {
        assert!(
            script.contains(step),
            "PLUGINS.md no longer runs `{step}`:\n{script}"
        );
    }

    // A checkout as the guide sees it, rebuilt on every run.
    let work = root.join("target").join("plugins-doc");
    let checkout = work.join("checkout");
    if checkout.exists() {
        std::fs::remove_dir_all(&checkout).expect("clean the previous run");
    }
    std::fs::create_dir_all(checkout.join("examples")).expect("mkdir");
    for linked in ["plugins", "wit"] {
        std::os::unix::fs::symlink(root.join(linked), checkout.join(linked)).expect("symlink");
    }
    let template = checkout.join("examples").join("plugin-template");
    copy_dir(&root.join("examples").join("plugin-template"), &template);
    let build_dir = root.join("target").join("guests");
    std::fs::create_dir_all(&build_dir).expect("mkdir");
    std::os::unix::fs::symlink(&build_dir, template.join("target")).expect("symlink");
    let cache = work.join("cache");

    let stdout = run_guide(
        "PLUGINS.md's commands",
        &script,
        &checkout,
        &cache,
        |bash| {
            bash.env_remove("CARGO_TARGET_DIR");
        },
    );
    // `vigil plugin check` accepted the template and printed its grants.
    assert!(stdout.contains("(accepted)"), "{stdout}");
    assert!(stdout.contains("name:         plugin-template"), "{stdout}");
    assert!(stdout.contains("grants:       log, http"), "{stdout}");
    // The template's own test ran natively.
    assert!(
        stdout.contains("the_expected_status_is_healthy_and_others_say_what_was_seen ... ok"),
        "{stdout}"
    );
    // Installed as the guide says.
    for file in ["plugin-template.wasm", "plugin-template.toml"] {
        assert!(
            checkout.join("plugins.d").join(file).is_file(),
            "{file} not installed"
        );
    }
}
