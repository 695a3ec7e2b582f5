//! One engine per database file (R4): `vigil serve` holds an exclusive lock on
//! a file beside the SQLite database for as long as it runs.
//!
//! The lock is an OS advisory lock (`flock`), not the mere existence of the
//! file, so a crashed engine never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// Why the database lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another engine holds it.
    #[error(
        "another `vigil serve` is already running on {database} (lock file {lock} is held); \
         stop it first, or give this one another DATABASE_URL"
    )]
    Held {
        /// The database file.
        database: String,
        /// The lock file.
        lock: String,
    },
    /// The lock file could not be created or locked.
    #[error("cannot lock {lock}")]
    Io {
        /// The lock file.
        lock: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// An exclusive lock on a database, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DatabaseLock {
    _file: File,
    path: PathBuf,
}

impl DatabaseLock {
    /// The lock file's path for a database file: `DATABASE.lock`.
    pub fn path_for(database: &Path) -> PathBuf {
        let mut name = database.as_os_str().to_owned();
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Takes the lock of `database`, failing at once if another process holds it.
    pub fn acquire(database: &Path) -> Result<Self, LockError> {
        let path = Self::path_for(database);
        let io = |source| LockError::Io {
            lock: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file, path }),
            Err(TryLockError::WouldBlock) => Err(LockError::Held {
                database: database.display().to_string(),
                lock: path.display().to_string(),
            }),
            Err(TryLockError::Error(source)) => Err(io(source)),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
