//! Backing up a SQLite store while an engine writes it (`vigil backup FILE`).
//!
//! The copy is SQLite's `VACUUM INTO`, run on a connection of its own that only reads: one
//! read transaction, so the copy is the database as one commit left it, whatever the engine
//! commits meanwhile (in WAL mode a reader neither waits for the writer nor holds it up).
//! The connection is not opened read-only: a read-only connection to a WAL database that no
//! engine holds leaves its `-wal` and `-shm` files behind, which it may not remove.
//! It is written to `FILE.partial`, checked with `PRAGMA integrity_check`, synced to disk,
//! and only then renamed to `FILE` (and the directory synced): a `FILE` that exists is a
//! whole, checked copy. An existing `FILE` is never overwritten.
//!
//! PostgreSQL has its own tools (`pg_dump`), which this module does not replace.

use std::path::{Path, PathBuf};
use std::str::FromStr as _;
use std::time::Duration;

use sqlx::ConnectOptions as _;
use sqlx::Connection as _;
use sqlx::sqlite::SqliteConnectOptions;

use super::{Backend, StoreError, query_error, redact_url, sqlite_path};

/// How long the copy waits for a lock SQLite needs (a WAL reader only waits for one while
/// the log is being recovered).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a backup was not made. No message carries the database URL's credentials.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The store is on PostgreSQL.
    #[error(
        "DATABASE_URL {url} is a PostgreSQL database: vigil backup copies SQLite stores; \
         back PostgreSQL up with its own tools (pg_dump)"
    )]
    Postgres {
        /// The URL, with any password redacted.
        url: String,
    },
    /// The store is an in-memory SQLite database: there is no file to copy.
    #[error("DATABASE_URL {url} is an in-memory database: there is no file to back up")]
    InMemory {
        /// The URL, with any secret redacted.
        url: String,
    },
    /// The database file does not exist.
    #[error("the database {} does not exist", .path.display())]
    Missing {
        /// The database file.
        path: PathBuf,
    },
    /// The destination (or its `.partial` file) exists.
    #[error("{} already exists: {why}", .path.display())]
    Exists {
        /// The file.
        path: PathBuf,
        /// What to do about it.
        why: &'static str,
    },
    /// A file operation failed.
    #[error("cannot {doing} {}", .path.display())]
    Io {
        /// What was being done.
        doing: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The database holds no vigil schema yet (an engine creating it, or another file):
    /// nothing worth a backup.
    #[error("the database {} holds no vigil database (no schema yet)", .path.display())]
    Blank {
        /// The database file.
        path: PathBuf,
    },
    /// The copy did not pass SQLite's integrity check (it is removed).
    #[error("the copy failed SQLite's integrity check: {report}")]
    Corrupt {
        /// The check's first lines.
        report: String,
    },
    /// The database could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl BackupError {
    /// Whether the settings are at fault (a PostgreSQL, in-memory or malformed URL) rather
    /// than the database or the files.
    pub fn is_setting(&self) -> bool {
        matches!(
            self,
            Self::Postgres { .. }
                | Self::InMemory { .. }
                | Self::Store(StoreError::UnsupportedUrl { .. })
        )
    }
}

/// A finished backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The copy (as given, not canonicalised).
    pub file: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
}

/// `FILE.partial`: where the copy is written until it is whole and checked.
pub fn partial_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Copies the SQLite store of `url` into the new file `file`, consistently, while an
/// engine may be writing it (see the module's documentation).
pub async fn backup_sqlite(url: &str, file: &Path) -> Result<Backup, BackupError> {
    if Backend::of_url(url)? == Backend::Postgres {
        return Err(BackupError::Postgres {
            url: redact_url(url),
        });
    }
    let Some(source) = sqlite_path(url)? else {
        return Err(BackupError::InMemory {
            url: redact_url(url),
        });
    };
    if !source.exists() {
        return Err(BackupError::Missing { path: source });
    }
    refuse_existing(file)?;
    let partial = partial_path(file);
    claim(&partial)?;
    let copied = copy_into(url, &source, &partial).await;
    let finished = match copied {
        Ok(()) => finish(&partial, file),
        Err(error) => Err(error),
    };
    match finished {
        Ok(bytes) => Ok(Backup {
            file: file.to_path_buf(),
            bytes,
        }),
        Err(error) => {
            // The partial file is this backup's own (it was created empty above).
            let _ = std::fs::remove_file(&partial);
            Err(error)
        }
    }
}

fn refuse_existing(file: &Path) -> Result<(), BackupError> {
    if std::fs::symlink_metadata(file).is_ok() {
        return Err(BackupError::Exists {
            path: file.to_path_buf(),
            why: "vigil backup never overwrites a file; name a new one",
        });
    }
    Ok(())
}

/// Creates `partial` empty, for this backup alone (`VACUUM INTO` writes into a file that
/// does not exist or is empty), readable by its owner only, as the database is.
fn claim(partial: &Path) -> Result<(), BackupError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(partial) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(BackupError::Exists {
                path: partial.to_path_buf(),
                why: "another backup to this file is running, or one was interrupted \
                      (then remove it)",
            })
        }
        Err(source) => Err(BackupError::Io {
            doing: "create",
            path: partial.to_path_buf(),
            source,
        }),
    }
}

/// `VACUUM INTO partial` on a connection to the store at `url` (the file `source`, never
/// created), then the copy's checks: SQLite's integrity check, and a vigil schema in it.
async fn copy_into(url: &str, source: &Path, partial: &Path) -> Result<(), BackupError> {
    let open_error = |source: sqlx::Error| StoreError::Open {
        url: redact_url(url),
        source: source.into(),
    };
    // An absolute path: SQLite would take a destination spelled `file:…` as a URI.
    let destination = std::path::absolute(partial).map_err(|source| BackupError::Io {
        doing: "resolve",
        path: partial.to_path_buf(),
        source,
    })?;
    let Some(destination) = destination.to_str().map(str::to_owned) else {
        return Err(BackupError::Io {
            doing: "name",
            path: partial.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "SQLite takes a file name in UTF-8 only",
            ),
        });
    };
    let options = SqliteConnectOptions::from_str(url)
        .map_err(open_error)?
        .read_only(false)
        .create_if_missing(false)
        .busy_timeout(BUSY_TIMEOUT);
    let mut connection = options.connect().await.map_err(open_error)?;
    let copied = sqlx::query("VACUUM INTO $1")
        .bind(destination)
        .execute(&mut connection)
        .await
        .map_err(query_error("copying the database (VACUUM INTO)"));
    let _ = connection.close().await;
    copied?;

    let mut copy = SqliteConnectOptions::new()
        .filename(partial)
        .read_only(true)
        .connect()
        .await
        .map_err(|source| StoreError::Open {
            url: partial.display().to_string(),
            source: source.into(),
        })?;
    let report: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut copy)
        .await
        .map_err(query_error("checking the copy (PRAGMA integrity_check)"))?;
    let migrations: Result<i64, _> = sqlx::query_scalar(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_one(&mut copy)
    .await;
    let _ = copy.close().await;
    if report != ["ok"] {
        return Err(BackupError::Corrupt {
            report: report.into_iter().take(5).collect::<Vec<_>>().join("; "),
        });
    }
    if migrations.map_err(query_error("reading the copy's schema"))? == 0 {
        return Err(BackupError::Blank {
            path: source.to_path_buf(),
        });
    }
    Ok(())
}

/// Syncs `partial`, gives it its name `file` (refusing a `file` that appeared meanwhile)
/// and syncs the directory, so that the name survives a crash too. Returns the size.
fn finish(partial: &Path, file: &Path) -> Result<u64, BackupError> {
    let io = |doing: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Io {
            doing,
            path,
            source,
        }
    };
    let copy = std::fs::OpenOptions::new()
        .write(true)
        .open(partial)
        .map_err(io("open", partial))?;
    copy.sync_all().map_err(io("sync", partial))?;
    let bytes = copy.metadata().map_err(io("read", partial))?.len();
    drop(copy);
    refuse_existing(file)?;
    std::fs::rename(partial, file).map_err(io("rename the copy to", file))?;
    let directory = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(directory)
        .and_then(|dir| dir.sync_all())
        .map_err(io("sync the directory", directory))?;
    Ok(bytes)
}
