//! Where the built plugins are, for tests that load them: first-party ones in
//! `plugins.d/`, test ones in `target/test-plugins/` (both built by
//! `scripts/build-plugins`; a missing one fails the test).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The built plugin `name`.
pub fn plugin_file(name: &str) -> PathBuf {
    [
        root().join("plugins.d").join(format!("{name}.wasm")),
        root()
            .join("target/test-plugins")
            .join(format!("{name}.wasm")),
    ]
    .into_iter()
    .find(|path| path.is_file())
    .unwrap_or_else(|| panic!("plugin {name} is not built: run scripts/build-plugins"))
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
/// other plugins of `plugins.d/` (an audit plugin) would add to.
pub fn plugin_dir_with_only(dir: &Path, name: &str) -> PathBuf {
    let built = root().join("plugins.d");
    let (wasm, toml) = (format!("{name}.wasm"), format!("{name}.toml"));
    assert!(
        built.join(&wasm).is_file() && built.join(&toml).is_file(),
        "{}/{wasm} (and .toml) are missing: run scripts/build-plugins",
        built.display()
    );
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("create the plugin dir");
    for file in [wasm, toml] {
        std::fs::copy(built.join(&file), plugins.join(&file)).expect("copy the plugin");
    }
    plugins
}
