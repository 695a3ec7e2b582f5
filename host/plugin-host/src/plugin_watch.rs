//! Live plugin directory: the plugin runtime reloads when a `*.wasm` or
//! `*.toml` file of `VIGIL_PLUGIN_DIR` changes (debounced), and on SIGHUP. What a
//! reload does — candidates, promotion, probation, retirement — is the runtime's
//! ([`PluginRuntime::reload`]); this module only decides when.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify_debouncer_full::notify::{self, EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::{PluginRuntime, ReloadReport};

/// How long the directory must be quiet before a reload: a plugin copied in place is
/// written in several steps, and a `.wasm` usually comes with its `.toml`.
pub const PLUGIN_DEBOUNCE: Duration = Duration::from_millis(500);

/// Whether a path is one the plugin directory's reload cares about.
fn is_plugin_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|extension| extension == "wasm" || extension == "toml")
}

/// Watches `dir` (non-recursively) and sends `()` on `on_change` when a `*.wasm` or
/// `*.toml` file in it changed, once the directory has been quiet for `debounce`.
/// Notifications coalesce in a channel of capacity 1. Watcher errors notify too, since
/// a change may have been missed.
pub fn watch(
    dir: &Path,
    debounce: Duration,
    on_change: mpsc::Sender<()>,
) -> Result<Debouncer<RecommendedWatcher, RecommendedCache>, notify::Error> {
    let handler = move |result: DebounceEventResult| {
        let relevant = match result {
            Ok(events) => events.iter().any(|event| {
                !matches!(event.kind, EventKind::Access(_))
                    && event.paths.iter().any(|path| is_plugin_file(path))
            }),
            Err(errors) => {
                for error in &errors {
                    warn!(%error, "plugin directory watcher error; reloading");
                }
                true
            }
        };
        if relevant {
            let _ = on_change.try_send(());
        }
    };
    let mut debouncer = new_debouncer(debounce, None, handler)?;
    debouncer.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(debouncer)
}

/// Reloads `runtime` whenever its directory changes or the process gets SIGHUP, until
/// the future is dropped.
pub async fn reload_loop(runtime: PluginRuntime, dir: PathBuf) {
    let (changed_tx, mut changed_rx) = mpsc::channel(1);
    let _watcher = match watch(&dir, PLUGIN_DEBOUNCE, changed_tx.clone()) {
        Ok(watcher) => Some(watcher),
        Err(_) if !dir.exists() => {
            info!(plugin_dir = %dir.display(), "the plugin directory does not exist, so it is not watched; once it exists, reload with SIGHUP or POST /api/v1/plugins/reload");
            None
        }
        Err(error) => {
            warn!(plugin_dir = %dir.display(), %error, "the plugin directory is not watched; reload with SIGHUP or POST /api/v1/plugins/reload");
            None
        }
    };
    let hangups = sighup(changed_tx);
    let reloads = async {
        while changed_rx.recv().await.is_some() {
            match runtime.reload().await {
                Ok(report) => log_reload(&report),
                Err(error) => {
                    warn!(plugin_dir = %dir.display(), error = %vigil_domain::probe::error_chain(&error), "plugin reload failed; nothing changed");
                }
            }
        }
    };
    tokio::join!(hangups, reloads);
}

/// Forwards SIGHUP to `on_signal`.
async fn sighup(on_signal: mpsc::Sender<()>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangup) => {
                while hangup.recv().await.is_some() {
                    info!("SIGHUP: reloading the plugin directory");
                    let _ = on_signal.try_send(());
                }
            }
            Err(error) => warn!(%error, "SIGHUP cannot be handled; it will not reload plugins"),
        }
    }
    #[cfg(not(unix))]
    {
        drop(on_signal);
        std::future::pending::<()>().await;
    }
}

/// Logs what a reload did, one line when nothing changed.
pub fn log_reload(report: &ReloadReport) {
    if report.promoted.is_empty() && report.refused.is_empty() && report.retired.is_empty() {
        info!(
            unchanged = report.unchanged.len(),
            "plugin directory reloaded: nothing changed"
        );
        return;
    }
    info!(
        promoted = %report
            .promoted
            .iter()
            .map(|p| format!("{}#{}", p.name, p.generation))
            .collect::<Vec<_>>()
            .join(", "),
        refused = report.refused.len(),
        retired = %report
            .retired
            .iter()
            .map(|(name, generation)| format!("{name}#{generation}"))
            .collect::<Vec<_>>()
            .join(", "),
        unchanged = report.unchanged.len(),
        "plugin directory reloaded"
    );
}
