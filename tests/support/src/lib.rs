//! What vigil's integration tests share.
//!
//! - The WebAssembly plugins, built by cargo itself: this crate's build script compiles
//!   the first-party plugins, the hostile test plugins (`tests/plugins/`) and the plugin
//!   template for `wasm32-wasip2` (through `vigil-guest-build`, into the target directory),
//!   so a test always runs the guests of the checkout it was built from and never reads
//!   `plugins.d/`, the operators' directory.
//! - The kubeconfig corpus ([`corpus`]).
//! - A throwaway PostgreSQL server, one per test binary, with a fresh database per test
//!   ([`postgres`]).
//! - With the `serve` feature, a real `vigil serve` ([`serve`]) and polling with a
//!   deadline, the one place tests sleep ([`wait`]).
//! - With the `engine` feature, a scripted prober and an engine on a temporary SQLite
//!   file ([`engine`]); with `api`, the REST API over it ([`api`]).

#![forbid(unsafe_code)]

#[cfg(feature = "api")]
pub mod api;
pub mod corpus;
#[cfg(feature = "engine")]
pub mod engine;
pub mod postgres;
#[cfg(feature = "serve")]
pub mod serve;
pub mod tools;
#[cfg(feature = "serve")]
pub mod wait;

use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support lies two levels under the repository root")
        .to_path_buf()
}

/// Where the build script laid the plugins out.
fn built() -> &'static Path {
    Path::new(env!("VIGIL_TEST_PLUGINS_DIR"))
}

/// A plugin directory holding every first-party plugin (`NAME.wasm` and its `NAME.toml`
/// of grants), as `scripts/build-plugins first-party` installs them. Tests copy from it
/// or point vigil at it; they never write to it.
pub fn first_party_dir() -> PathBuf {
    built().join("first-party")
}

/// The directory of the built test plugins (`tests/plugins/NAME` as `NAME.wasm`) and the
/// plugin template.
pub fn test_plugins_dir() -> PathBuf {
    built().join("test")
}

/// The built plugin `name`: a first-party plugin, a test plugin (`tests/plugins/NAME`) or
/// `plugin-template`. Panics, naming it, when there is no such plugin.
pub fn plugin_file(name: &str) -> PathBuf {
    [
        first_party_dir().join(format!("{name}.wasm")),
        test_plugins_dir().join(format!("{name}.wasm")),
    ]
    .into_iter()
    .find(|path| path.is_file())
    .unwrap_or_else(|| {
        panic!("no plugin {name} was built (plugins/{name} or tests/plugins/{name})")
    })
}

/// The bytes of the built plugin `name` with a custom section appended: the same
/// component, behaving the same, under another digest — a "new version" of it.
pub fn plugin_variant(name: &str, tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(plugin_file(name)).expect("read the plugin");
    let section_name = b"vigil-test-variant";
    let mut content = leb128(section_name.len());
    content.extend_from_slice(section_name);
    content.extend_from_slice(tag.as_bytes());
    bytes.push(0); // custom section
    bytes.extend(leb128(content.len()));
    bytes.extend(content);
    bytes
}

fn leb128(mut value: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Writes `bytes` to `path` as tools that install plugins should: beside it, then
/// renamed over it, so a reader never sees half a file.
pub fn install(path: &Path, bytes: &[u8]) {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, bytes).expect("write the plugin");
    std::fs::rename(&partial, path).expect("rename the plugin into place");
}

/// A plugin directory `dir/plugins.d` holding the built first-party plugin `name` (and
/// its `NAME.toml`) alone: for tests that count every request a fake server gets, which
/// other first-party plugins (an audit plugin) would add to.
pub fn plugin_dir_with_only(dir: &Path, name: &str) -> PathBuf {
    let built = first_party_dir();
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("create the plugin dir");
    for file in [format!("{name}.wasm"), format!("{name}.toml")] {
        assert!(
            built.join(&file).is_file(),
            "no first-party plugin file {file}"
        );
        std::fs::copy(built.join(&file), plugins.join(&file)).expect("copy the plugin");
    }
    plugins
}
