//! The compiled-code cache: compiled components keyed by the sha256 of the plugin
//! file and the engine's compatibility hash, written atomically under a directory the
//! host owns, and loaded back instead of compiling again.
//!
//! Loading an artifact back is an `unsafe` call — wasmtime trusts the bytes as machine
//! code it produced. This module holds the one place in the host where unsafe code is
//! allowed ([`deserialize_verified`]), and reaches it only with bytes the host wrote
//! itself: read from a directory owned by this process's user and writable by no one
//! else, from a regular file owned by that user, and carrying a digest over the key and
//! the artifact that the host computed when it wrote the file — an HMAC keyed by a secret
//! of the cache ([`SECRET_FILE`], readable by this user only), so that a process that can
//! write the directory but not read that secret cannot forge one. Anything else — a
//! missing, unreadable, truncated or altered file, a foreign directory — is never
//! deserialized: the plugin is compiled again (and a bad file deleted and rewritten).
//!
//! The processes vigil starts (exec credential commands) cannot write the directory nor
//! read the secret: Landlock keeps them out (`exec::confine`). Another process of vigil's
//! own user, unconfined, can do both: against it the cache is as trusted as vigil's binary.

use std::fs::{DirBuilder, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tracing::{debug, warn};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The directory, under the cache directory, holding compiled components. The host
/// creates it and writes every file in it; nothing else is ever deserialized.
const ARTIFACT_DIR: &str = "components-v1";

/// The extension of a compiled component.
const ARTIFACT_EXTENSION: &str = "cwasm";

/// The first bytes of every artifact file; the sha256 digest follows, then the
/// artifact wasmtime serialized.
const FILE_MAGIC: &[u8; 16] = b"vigil-cwasm-v1\0\0";

/// The length of the digest after the magic.
const DIGEST_BYTES: usize = 32;

/// The largest artifact file read back; a larger one is treated as damaged.
const MAX_ARTIFACT_BYTES: u64 = 512 * 1024 * 1024;

/// The cache's secret, in the artifact directory: 32 random bytes that key every digest.
const SECRET_FILE: &str = ".key";

/// The length of the secret.
const SECRET_BYTES: usize = 32;

/// A cache of compiled components.
#[derive(Debug, Clone)]
pub(crate) struct CodeCache {
    dir: PathBuf,
    /// The secret, read (or created) once.
    secret: std::sync::Arc<std::sync::OnceLock<Result<Secret, String>>>,
}

/// The cache's secret.
#[derive(Clone)]
struct Secret([u8; SECRET_BYTES]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// What the compiled-code cache did for one plugin file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// The artifact for this file and engine was there, intact: it was loaded instead of
    /// compiling.
    Hit,
    /// There was none: the component was compiled and its artifact written.
    Miss,
    /// There was one, but it was unreadable, truncated or altered: it was deleted, the
    /// component compiled again and a fresh artifact written.
    Recompiled,
    /// The component was compiled and nothing was cached: no cache directory is
    /// configured, or it cannot be trusted (not owned by this user, or writable by
    /// others) or written.
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

/// What a lookup found.
enum Lookup {
    /// An intact artifact, loaded.
    Found(Component),
    /// No artifact for the key.
    Absent,
    /// An artifact that could not be used; it has been deleted (or could not be).
    Discarded,
    /// The directory cannot be trusted: nothing is read from it or written to it.
    Untrusted,
}

/// The bytes of an artifact file whose digest matched: written by this host for this
/// key. The only way to make one is [`CodeCache::read_verified`].
struct VerifiedArtifact {
    file: Vec<u8>,
}

impl VerifiedArtifact {
    /// The artifact wasmtime serialized, without the header.
    fn artifact(&self) -> &[u8] {
        &self.file[FILE_MAGIC.len() + DIGEST_BYTES..]
    }
}

/// Compiles `bytes` into a component, through the cache when there is one: an intact
/// artifact is loaded instead; otherwise the component is compiled and its artifact
/// written for the next load.
pub(crate) fn compile(
    engine: &Engine,
    cache: Option<&CodeCache>,
    bytes: &[u8],
) -> wasmtime::Result<(Component, CacheStatus)> {
    let Some(cache) = cache else {
        return Ok((
            crate::engine::compile_component(engine, bytes)?,
            CacheStatus::Disabled,
        ));
    };
    let key = CodeCache::key(engine, bytes);
    let status = match cache.lookup(engine, &key) {
        Lookup::Found(component) => return Ok((component, CacheStatus::Hit)),
        Lookup::Absent => CacheStatus::Miss,
        Lookup::Discarded => CacheStatus::Recompiled,
        Lookup::Untrusted => {
            return Ok((
                crate::engine::compile_component(engine, bytes)?,
                CacheStatus::Disabled,
            ));
        }
    };
    let component = crate::engine::compile_component(engine, bytes)?;
    let status = match component.serialize() {
        Ok(artifact) => match cache.store(&key, &artifact) {
            Ok(()) => status,
            Err(error) => {
                warn!(dir = %cache.dir.display(), "cannot write the compiled-code cache: {error}");
                CacheStatus::Disabled
            }
        },
        Err(error) => {
            warn!("cannot serialize a compiled component: {error:#}");
            CacheStatus::Disabled
        }
    };
    Ok((component, status))
}

impl CodeCache {
    /// A cache under `dir` (created on first write).
    pub(crate) fn new(dir: &Path) -> Self {
        Self {
            dir: dir.join(ARTIFACT_DIR),
            secret: std::sync::Arc::default(),
        }
    }

    /// The cache's secret: read from [`SECRET_FILE`] (a regular file of this user's that no
    /// one else can read or write), or created there when missing. The directory exists
    /// and was checked.
    fn secret(&self) -> Result<Secret, String> {
        self.secret
            .get_or_init(|| read_or_create_secret(&self.dir.join(SECRET_FILE)))
            .clone()
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

    /// Looks up the artifact of `key` and loads it when it is intact. A damaged one is
    /// deleted, so that the compile that follows replaces it.
    fn lookup(&self, engine: &Engine, key: &str) -> Lookup {
        match std::fs::symlink_metadata(&self.dir) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Lookup::Absent,
            Err(error) => {
                warn!(dir = %self.dir.display(), "compiled-code cache not used: cannot read the directory: {error}");
                return Lookup::Untrusted;
            }
            Ok(metadata) => {
                if let Err(why) = owned_by_us(&metadata, true) {
                    warn!(dir = %self.dir.display(), "compiled-code cache not used: the directory {why}");
                    return Lookup::Untrusted;
                }
            }
        }
        let secret = match self.secret() {
            Ok(secret) => secret,
            Err(why) => {
                warn!(dir = %self.dir.display(), "compiled-code cache not used: its key {why}");
                return Lookup::Untrusted;
            }
        };
        let path = self.path(key);
        let verified = match Self::read_verified(&path, key, &secret) {
            Ok(Some(verified)) => verified,
            Ok(None) => return Lookup::Absent,
            Err(why) => {
                self.discard(&path, &why);
                return Lookup::Discarded;
            }
        };
        match deserialize_verified(engine, &verified) {
            Ok(component) => {
                debug!(file = %path.display(), "compiled component loaded from the cache");
                Lookup::Found(component)
            }
            Err(error) => {
                self.discard(&path, &format!("wasmtime refused it: {error:#}"));
                Lookup::Discarded
            }
        }
    }

    /// Reads the artifact file at `path` and checks it was written by this host for
    /// `key`: a regular file owned by this user and writable by no one else, holding the
    /// magic, then the digest of `key` and the artifact, then the artifact. `Ok(None)`
    /// when there is no file; `Err` says what is wrong with one.
    fn read_verified(
        path: &Path,
        key: &str,
        secret: &Secret,
    ) -> Result<Option<VerifiedArtifact>, String> {
        let before = match std::fs::symlink_metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot be read: {error}")),
        };
        owned_by_us(&before, false)?;
        if before.len() > MAX_ARTIFACT_BYTES {
            return Err(format!("is larger than {MAX_ARTIFACT_BYTES} bytes"));
        }
        let mut file = File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
        // The file opened must be the one checked above, not something renamed over it
        // in between.
        let opened = file
            .metadata()
            .map_err(|e| format!("cannot be read: {e}"))?;
        if !same_file(&before, &opened) {
            return Err("was replaced while it was being opened".to_owned());
        }
        let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
        file.read_to_end(&mut bytes)
            .map_err(|e| format!("cannot be read: {e}"))?;
        let header = FILE_MAGIC.len() + DIGEST_BYTES;
        if bytes.len() <= header || !bytes.starts_with(FILE_MAGIC) {
            return Err("is truncated or not a vigil cache file".to_owned());
        }
        let (recorded, artifact) = bytes[FILE_MAGIC.len()..].split_at(DIGEST_BYTES);
        if !artifact_digest_matches(secret, key, artifact, recorded) {
            return Err("does not match its recorded digest (truncated or altered)".to_owned());
        }
        Ok(Some(VerifiedArtifact { file: bytes }))
    }

    /// Deletes a damaged artifact, saying why.
    fn discard(&self, path: &Path, why: &str) {
        warn!(file = %path.display(), "compiled-code cache: discarding the artifact, which {why}; compiling the plugin again");
        if let Err(error) = std::fs::remove_file(path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            warn!(file = %path.display(), "cannot delete the damaged artifact: {error}");
        }
    }

    /// Writes the artifact of `key` atomically: a temporary file readable and writable
    /// by this user only, in the same directory, synced, then renamed over the final
    /// name, so that a reader never sees half. The directory is created for this user
    /// only when missing.
    pub(crate) fn store(&self, key: &str, artifact: &[u8]) -> std::io::Result<()> {
        if let Some(parent) = self.dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut builder = DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&self.dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        owned_by_us(&std::fs::symlink_metadata(&self.dir)?, true)
            .map_err(|why| std::io::Error::other(format!("the directory {why}")))?;
        let secret = self
            .secret()
            .map_err(|why| std::io::Error::other(format!("the cache's key {why}")))?;

        let final_path = self.path(key);
        let temp_path = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let result = (|| {
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&temp_path)?;
            file.write_all(FILE_MAGIC)?;
            file.write_all(&artifact_digest(&secret, key, artifact))?;
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

/// Turns verified artifact bytes back into a component.
///
/// This is the one function of the host allowed to use `unsafe` (ARCHITECTURE.md,
/// invariants); keep it this small.
#[allow(unsafe_code)]
fn deserialize_verified(
    engine: &Engine,
    verified: &VerifiedArtifact,
) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` requires bytes produced by `Component::serialize`
    // (or `Engine::precompile_component`) of a compatible engine, because wasmtime runs
    // them as machine code without validating them. A `VerifiedArtifact` is only made by
    // `CodeCache::read_verified`, which accepts a file only from a directory owned by this
    // process's user and writable by no one else, only a regular file owned by that user
    // and writable by no one else, and only when the HMAC-SHA256 the host recorded over the
    // key and the artifact at write time (`CodeCache::store`, right after
    // `Component::serialize`), under the cache's secret that only this user can read,
    // matches the bytes read; the bytes are copied by wasmtime from this verified buffer,
    // so the file changing afterwards cannot affect them. So the bytes are what a holder
    // of the secret serialized for this key — this host, or another process of this user
    // (as trusted as the binary: README) — and the key includes the
    // engine's `precompile_compatibility_hash` (wasmtime also checks the engine settings
    // recorded in the artifact and refuses a mismatch with an error).
    unsafe { Component::deserialize(engine, verified.artifact()) }
}

/// The digest recorded in an artifact file: an HMAC-SHA256 under the cache's secret over
/// the key (so that a file copied under another key does not verify) and the artifact.
fn artifact_digest(secret: &Secret, key: &str, artifact: &[u8]) -> [u8; DIGEST_BYTES] {
    let mut context = ring::hmac::Context::with_key(&hmac_key(secret));
    context.update(b"vigil-cwasm-v1\0");
    context.update(key.as_bytes());
    context.update(b"\0");
    context.update(artifact);
    let tag = context.sign();
    let mut digest = [0_u8; DIGEST_BYTES];
    digest.copy_from_slice(tag.as_ref());
    digest
}

/// Whether `recorded` is the digest of `key` and `artifact`, compared in constant time (the
/// artifact is signed as it lies, never copied).
fn artifact_digest_matches(secret: &Secret, key: &str, artifact: &[u8], recorded: &[u8]) -> bool {
    let expected = artifact_digest(secret, key, artifact);
    recorded.len() == expected.len()
        && recorded
            .iter()
            .zip(expected)
            .fold(0_u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

fn hmac_key(secret: &Secret) -> ring::hmac::Key {
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret.0)
}

/// Reads the secret at `path`, or creates it (random, mode 0600) when missing: written in
/// full to a temporary file, then linked to its name, so that a vigil starting at the same
/// time on the same cache never reads half of one. A file that is not a regular file of
/// this user's, that others may read or write, or that does not hold exactly the secret's
/// length is refused (the cache is then not used).
fn read_or_create_secret(path: &Path) -> Result<Secret, String> {
    if !path.exists() {
        let mut bytes = [0_u8; SECRET_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| "cannot be made: no randomness".to_owned())?;
        let temp = path.with_extension(format!("{}.tmp", std::process::id()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options
            .open(&temp)
            .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
            .and_then(|()| std::fs::hard_link(&temp, path));
        let _ = std::fs::remove_file(&temp);
        match written {
            Ok(()) => return Ok(Secret(bytes)),
            // Another vigil made it first: read that one.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(format!("cannot be created: {error}")),
        }
    }
    let metadata =
        std::fs::symlink_metadata(path).map_err(|error| format!("cannot be read: {error}"))?;
    owned_by_us(&metadata, false)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if metadata.permissions().mode() & 0o077 != 0 {
            return Err("may be read by other users".to_owned());
        }
    }
    let bytes = std::fs::read(path).map_err(|error| format!("cannot be read: {error}"))?;
    let secret: [u8; SECRET_BYTES] = bytes
        .try_into()
        .map_err(|_| format!("does not hold {SECRET_BYTES} bytes"))?;
    Ok(Secret(secret))
}

/// Whether `metadata` (not following symlinks) is a directory (`dir`) or a regular file
/// owned by this process's user and writable by no one else; if not, why.
#[cfg(unix)]
fn owned_by_us(metadata: &std::fs::Metadata, dir: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let kind_ok = if dir {
        metadata.file_type().is_dir()
    } else {
        metadata.file_type().is_file()
    };
    if !kind_ok {
        return Err(if dir {
            "is not a directory".to_owned()
        } else {
            "is not a regular file".to_owned()
        });
    }
    let us = rustix::process::geteuid().as_raw();
    if metadata.uid() != us {
        return Err(format!(
            "is owned by user {}, not by this process's user {us}",
            metadata.uid()
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by other users (mode {:o})",
            metadata.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Without Unix ownership and modes the host cannot tell that it alone wrote a file:
/// the cache is not used.
#[cfg(not(unix))]
fn owned_by_us(_metadata: &std::fs::Metadata, _dir: bool) -> Result<(), String> {
    Err("cannot be checked for ownership on this platform".to_owned())
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_a: &std::fs::Metadata, _b: &std::fs::Metadata) -> bool {
    false
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}
