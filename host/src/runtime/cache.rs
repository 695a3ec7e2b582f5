//! The compiled-code cache: compiled components keyed by the sha256 of the plugin
//! file and the engine's compatibility hash, written atomically under a directory the
//! host owns.
//!
//! Loading an artifact back (`Component::deserialize_file`) is an `unsafe` call —
//! wasmtime trusts the bytes as machine code — and the workspace forbids unsafe code.
//! Until that lint allows one audited call here, a hit is recorded (so the artifact
//! and key handling are exercised) but the component is compiled again.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;

/// The directory, under the cache directory, holding compiled components. The host
/// creates it and writes every file in it; nothing else is ever deserialized.
const ARTIFACT_DIR: &str = "components-v1";

/// The extension of a compiled component.
const ARTIFACT_EXTENSION: &str = "cwasm";

/// A cache of compiled components.
#[derive(Debug, Clone)]
pub(crate) struct CodeCache {
    dir: PathBuf,
}

/// Whether a cached artifact existed for a plugin file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// The artifact for this file and engine was already there.
    Hit,
    /// It was not: the component was compiled and the artifact written.
    Miss,
    /// No cache directory is configured, or it could not be written.
    Disabled,
}

/// Feeds `Hash` output into sha256, so that the engine's compatibility hash becomes
/// part of a stable, collision-resistant key.
struct DigestHasher(Sha256);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        // Never used: the key is the full digest.
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl CodeCache {
    /// A cache under `dir` (created on first write).
    pub(crate) fn new(dir: &Path) -> Self {
        Self {
            dir: dir.join(ARTIFACT_DIR),
        }
    }

    /// The key of a plugin file's bytes for this engine, as lowercase hex.
    pub(crate) fn key(engine: &Engine, bytes: &[u8]) -> String {
        let mut hasher = DigestHasher(Sha256::new());
        hasher.write(b"vigil-plugin-cache-v1\0");
        hasher.write(&Sha256::digest(bytes));
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hex(&hasher.0.finalize())
    }

    /// Where the artifact of `key` lives.
    pub(crate) fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{ARTIFACT_EXTENSION}"))
    }

    /// Whether an artifact for `key` exists, written by the host (a regular file named
    /// by its key in the host's own directory, holding a precompiled component).
    pub(crate) fn contains(&self, key: &str) -> bool {
        let path = self.path(key);
        let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
        is_file
            && matches!(
                Engine::detect_precompiled_file(&path),
                Ok(Some(wasmtime::Precompiled::Component))
            )
    }

    /// Writes the artifact of `key` atomically: a temporary file in the same directory,
    /// synced, then renamed over the final name, so that a reader never sees half.
    pub(crate) fn store(&self, key: &str, artifact: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let final_path = self.path(key);
        let temp_path = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let result = (|| {
            let mut file = std::fs::File::create(&temp_path)?;
            file.write_all(artifact)?;
            file.sync_all()?;
            std::fs::rename(&temp_path, &final_path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temp_path);
        }
        result
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}
