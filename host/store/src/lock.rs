//! One engine per database file (docs/rules.md#one-engine-per-file): `vigil serve` holds an exclusive lock on
//! a file beside the SQLite database for as long as it runs.
//!
//! The lock is an OS advisory lock (`flock`), not the mere existence of the
//! file, so a crashed engine never leaves a stale lock behind. It is keyed on the
//! database's canonical path (symbolic links resolved, in the file's name and in its
//! directories), so two engines cannot share a file by naming it through different links.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
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
        /// The database file: its canonical path, and the path given when that differs.
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
        source: io::Error,
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

    /// Takes the lock of `database`, failing at once if another process holds it. The lock
    /// file lies beside the database's canonical path (see [`canonical_database_path`]).
    pub fn acquire(database: &Path) -> Result<Self, LockError> {
        let canonical = canonical_database_path(database).map_err(|source| LockError::Io {
            lock: Self::path_for(database).display().to_string(),
            source,
        })?;
        let path = Self::path_for(&canonical);
        let io = |source| LockError::Io {
            lock: path.display().to_string(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file, path }),
            Err(TryLockError::WouldBlock) => Err(LockError::Held {
                database: if std::path::absolute(database).is_ok_and(|given| given == canonical) {
                    canonical.display().to_string()
                } else {
                    format!("{} (named {})", canonical.display(), database.display())
                },
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

/// How many symbolic links [`canonical_database_path`] follows by hand before giving up (the
/// kernel's own limit for one path).
const MAX_LINKS: usize = 40;

/// The path of the file that opening `database` would open or create: absolute, with every
/// symbolic link resolved, its directories created if missing (SQLite creates the file, not
/// them). A database that does not exist yet may still be named through a link that points
/// to where it will be created: that link is followed too.
pub fn canonical_database_path(database: &Path) -> io::Result<PathBuf> {
    let mut path = std::path::absolute(database)?;
    for _ in 0..MAX_LINKS {
        match std::fs::canonicalize(&path) {
            Ok(canonical) => return Ok(canonical),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not name a file", database.display()),
            ));
        };
        match std::fs::read_link(&path) {
            // A dangling link: its target is where the database will be created.
            Ok(target) => path = parent.join(target),
            Err(_) => {
                std::fs::create_dir_all(parent)?;
                return Ok(std::fs::canonicalize(parent)?.join(name));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} goes through more than {MAX_LINKS} symbolic links",
            database.display()
        ),
    ))
}
