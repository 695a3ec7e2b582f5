//! `vigil plugin check FILE.wasm [--cluster NAME]`: a plugin file loaded exactly as the
//! engine loads one, without touching the plugin directory or the database.
//!
//! The file and its `NAME.toml` are copied into a private temporary directory, which is
//! then loaded by [`PluginRuntime::load`] — the engine's own code, so every check it makes
//! (component header, compilation, world and contract version, imports, manifest, `info()`
//! under its deadline) is the one the engine makes, and a refusal carries the engine's
//! reason word for word. A loaded plugin can then probe one cluster through the same
//! [`probe_once`] path as `vigil probe`, which never writes the database.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vigil_domain::parameter::{HIDDEN_REFERENCE, is_credential_reference};
use vigil_domain::probe::Probed;
use vigil_engine::worker::{WorkerSettings, probe_once};
use vigil_plugin_host::{
    Manifest, PluginRuntime, PluginSummary, Refusal, RuntimeError, RuntimeSettings,
    SUPPORTED_CONTRACT,
};
use vigil_store::ClusterRecord;

/// What a check needs besides the file.
#[derive(Debug, Clone, Default)]
pub struct CheckSettings {
    /// The compiled-plugin cache, as `vigil serve` uses it (`None`: compile every time).
    pub cache_dir: Option<PathBuf>,
    /// Where `file:///` credential parameters and file references may lie.
    pub credential_dirs: Vec<PathBuf>,
    /// Where, besides a kubeconfig's own directory, the files it names may lie.
    pub kubeconfig_credential_dirs: Vec<PathBuf>,
    /// Where the Secrets of `secret://` references are read.
    pub management: vigil_domain::secrets::ManagementCluster,
    /// Where plugins may connect to clusters (`VIGIL_REGISTRATION_ALLOW`).
    pub registration_allow: vigil_domain::address_rule::AddressRule,
    /// How kubeconfig users' exec commands run.
    pub exec: vigil_plugin_host::ExecSettings,
}

/// Why a check could not be made, or its verdict that the file is refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file cannot be used as a plugin file at all (missing, not `NAME.wasm`).
    #[error("{file}: {reason}")]
    File {
        /// The file as given.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// The private plugin directory could not be prepared.
    #[error("cannot prepare a temporary plugin directory")]
    TempDir(#[source] std::io::Error),
    /// The plugin runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// vigil refuses the plugin, for the engine's reason.
    #[error("plugin {file} {reason}")]
    Refused {
        /// The file as given.
        file: PathBuf,
        /// The engine's reason.
        reason: Refusal,
    },
}

impl CheckError {
    /// A refusal, for programs (`vigil plugin check -o json`): the file, `accepted` false
    /// and the engine's reason. `None` for the errors of the command itself.
    pub fn refusal_json(&self) -> Option<serde_json::Value> {
        let Self::Refused { file, reason } = self else {
            return None;
        };
        Some(serde_json::json!({
            "file": file.display().to_string(),
            "accepted": false,
            "reason": reason.to_string(),
        }))
    }
}

/// A plugin file that loaded, with the runtime that holds it.
#[derive(Debug)]
pub struct CheckedPlugin {
    /// Who the plugin is.
    pub summary: PluginSummary,
    /// Its grants and settings, from `NAME.toml`.
    pub manifest: Manifest,
    /// The `NAME.toml` read, or `None` when there is none (every grant denied).
    pub manifest_file: Option<PathBuf>,
    /// The file as given.
    pub file: PathBuf,
    runtime: PluginRuntime,
    // Kept for as long as the runtime: it holds the copies the runtime loaded.
    _dir: tempfile::TempDir,
}

/// A fresh private directory for [`check`] to load the file from (mode 0700, removed when
/// dropped). Made apart from `check` so that the settings can be checked against it first
/// (the compiled-plugin cache must not lie inside a plugin directory).
pub fn private_dir() -> Result<tempfile::TempDir, CheckError> {
    tempfile::Builder::new()
        .prefix("vigil-plugin-check-")
        .tempdir()
        .map_err(CheckError::TempDir)
}

/// Loads `file` (and the `NAME.toml` beside it) as the engine would load it from its
/// plugin directory, `dir` (from [`private_dir`]), which holds nothing else.
pub async fn check(
    file: &Path,
    settings: &CheckSettings,
    dir: tempfile::TempDir,
) -> Result<CheckedPlugin, CheckError> {
    let bad = |reason: &str| CheckError::File {
        file: file.to_path_buf(),
        reason: reason.to_owned(),
    };
    if file.extension().is_none_or(|extension| extension != "wasm") {
        return Err(bad(
            "a plugin file is named NAME.wasm (vigil reads its grants from NAME.toml beside it)",
        ));
    }
    let Some(name) = file.file_stem().and_then(|stem| stem.to_str()) else {
        return Err(bad("the file name is not UTF-8"));
    };
    match std::fs::metadata(file) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => return Err(bad("not a regular file")),
        Err(error) => return Err(bad(&format!("cannot be read: {error}"))),
    }
    std::fs::copy(file, dir.path().join(format!("{name}.wasm")))
        .map_err(|error| bad(&format!("cannot be read: {error}")))?;
    let manifest_file = file.with_extension("toml");
    let manifest_file = if manifest_file.is_file() {
        std::fs::copy(&manifest_file, dir.path().join(format!("{name}.toml"))).map_err(
            |error| CheckError::File {
                file: manifest_file.clone(),
                reason: format!("cannot be read: {error}"),
            },
        )?;
        Some(manifest_file)
    } else {
        None
    };
    let runtime_settings = RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: dir.path().to_path_buf(),
        cache_dir: settings.cache_dir.clone(),
        concurrency: 1,
        credential_dirs: settings.credential_dirs.clone(),
        kubeconfig_credential_dirs: settings.kubeconfig_credential_dirs.clone(),
        secrets: Some(vigil_domain::secrets::connect(&settings.management).await),
        registration_allow: settings.registration_allow.clone(),
        exec: settings.exec.clone(),
    };
    let (runtime, mut report) = PluginRuntime::load(&runtime_settings).await?;
    if let Some(refused) = report.refused.pop() {
        // The runtime names the copy it read; the operator knows the file beside theirs.
        let reason = match (refused.reason, &manifest_file) {
            (Refusal::Manifest(message), Some(original)) => Refusal::Manifest(
                message.replace(
                    &dir.path()
                        .join(format!("{name}.toml"))
                        .display()
                        .to_string(),
                    &original.display().to_string(),
                ),
            ),
            (reason, _) => reason,
        };
        return Err(CheckError::Refused {
            file: file.to_path_buf(),
            reason,
        });
    }
    let Some(summary) = report.loaded.pop().or_else(|| report.audits.pop()) else {
        return Err(bad("was neither loaded nor refused"));
    };
    // The runtime read the same copy: a manifest it accepted parses here too.
    let manifest = match &manifest_file {
        Some(path) => std::fs::read_to_string(path)
            .ok()
            .and_then(|text| Manifest::parse(&text).ok())
            .unwrap_or_default(),
        None => Manifest::default(),
    };
    Ok(CheckedPlugin {
        summary,
        manifest,
        manifest_file,
        file: file.to_path_buf(),
        runtime,
        _dir: dir,
    })
}

impl CheckedPlugin {
    /// Probes `cluster` once through this plugin alone, under the worker's rules, writing
    /// nothing. The cluster's explicit plugin, if it names another, is set aside: the
    /// plugin's `accepts` decides, as it would for a cluster routed by priority.
    pub async fn probe(&self, cluster: &ClusterRecord, settings: &WorkerSettings) -> Probed {
        let mut cluster = cluster.clone();
        cluster.plugin = None;
        probe_once(&self.runtime, &cluster, settings).await
    }

    /// What [`CheckedPlugin::describe`] says, for programs: the plugin's identity, its
    /// grants and settings from `NAME.toml` (credential parameters shown as such, never
    /// their value).
    pub fn to_json(&self) -> serde_json::Value {
        let summary = &self.summary;
        let manifest = &self.manifest;
        serde_json::json!({
            "file": self.file.display().to_string(),
            "accepted": true,
            "name": summary.name,
            "self_name": summary.self_name,
            "version": summary.version,
            "contract": SUPPORTED_CONTRACT,
            "world": summary.world,
            "schemes": summary.schemes,
            "description": summary.description,
            "sha256": summary.hash,
            "manifest": self.manifest_file.as_ref().map(|path| path.display().to_string()),
            "grants": summary.grants,
            "secret_namespaces": manifest.secret_namespaces,
            "allowed_hosts": manifest.allowed_hosts,
            "credential_hosts": manifest.credential_hosts,
            "priority": manifest.priority,
            "memory_mib": manifest.memory_mib,
            "parameters": self
                .shown_parameters()
                .map(|(name, value)| (name.to_owned(), serde_json::Value::from(value)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }

    /// The manifest's parameters as they may be shown: a credential reference
    /// (`file://`, `secret://`) by what it is, not by where it points.
    fn shown_parameters(&self) -> impl Iterator<Item = (&str, &str)> {
        self.manifest.parameters.iter().map(|(name, value)| {
            let shown = if is_credential_reference(value) {
                HIDDEN_REFERENCE
            } else {
                value.as_str()
            };
            (name.as_str(), shown)
        })
    }

    /// What the plugin is and may do, for people.
    pub fn describe(&self) -> String {
        let summary = &self.summary;
        let manifest = &self.manifest;
        let list = |items: &[String]| {
            if items.is_empty() {
                "none".to_owned()
            } else {
                items.join(", ")
            }
        };
        let mut text = String::new();
        let _ = writeln!(text, "plugin:       {} (accepted)", self.file.display());
        let _ = writeln!(text, "name:         {}", summary.name);
        if summary.self_name != summary.name {
            let _ = writeln!(
                text,
                "              (it calls itself {}; vigil uses the file name)",
                summary.self_name
            );
        }
        let _ = writeln!(text, "version:      {}", summary.version);
        let _ = writeln!(text, "contract:     {SUPPORTED_CONTRACT}, world probe");
        let _ = writeln!(text, "schemes:      {}", list(&summary.schemes));
        let _ = writeln!(text, "description:  {}", summary.description);
        let _ = writeln!(text, "sha256:       {}", summary.hash);
        match &self.manifest_file {
            Some(path) => {
                let _ = writeln!(text, "manifest:     {}", path.display());
            }
            None => {
                let _ = writeln!(
                    text,
                    "manifest:     none ({}.toml is missing beside the file: every grant is denied)",
                    summary.name
                );
            }
        }
        let _ = writeln!(text, "grants:       {}", list(&summary.grants));
        let _ = writeln!(text, "secrets in:   {}", list(&manifest.secret_namespaces));
        let _ = writeln!(text, "extra hosts:  {}", list(&manifest.allowed_hosts));
        let bindings: Vec<String> = manifest
            .credential_hosts
            .iter()
            .map(|(credential, hosts)| format!("{credential} -> {}", hosts.join(", ")))
            .collect();
        let _ = writeln!(text, "cred. hosts:  {}", list(&bindings));
        let _ = writeln!(text, "priority:     {}", manifest.priority);
        let _ = writeln!(text, "memory:       {} MiB", manifest.memory_mib);
        let parameters: Vec<String> = self
            .shown_parameters()
            .map(|(name, value)| format!("{name} = {value}"))
            .collect();
        let _ = writeln!(text, "parameters:   {}", list(&parameters));
        text
    }
}
