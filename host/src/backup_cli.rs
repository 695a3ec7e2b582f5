//! `vigil backup FILE`: a consistent copy of the SQLite store, taken while `vigil serve`
//! runs (the copy itself is `vigil_store::backup`). Prints the copy's name and size, never
//! the database URL's credentials.

use serde_json::json;
use vigil_store::backup::{Backup, BackupError, backup_sqlite};

use crate::cli::{BackupArgs, OutputFormat};

/// Makes the copy the arguments ask for.
pub async fn run(args: &BackupArgs) -> Result<Backup, BackupError> {
    backup_sqlite(&args.database_url, &args.file).await
}

/// What `vigil backup` prints once the copy is made.
pub fn report(backup: &Backup, output: OutputFormat) -> String {
    match output {
        OutputFormat::Table => format!(
            "backed up to {} ({} bytes)\n",
            backup.file.display(),
            backup.bytes
        ),
        OutputFormat::Json => {
            json!({ "file": backup.file.display().to_string(), "bytes": backup.bytes }).to_string()
                + "\n"
        }
    }
}
