//! The per-call sandbox: the store state of one call, its resource limiter, and the
//! host interfaces `log` and `credentials` (`http` and `wasi:http` are in `egress`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::Digest as _;
use tracing::{debug, error, info, trace, warn};
use vigil_decision::ReasonClass;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::contract::{self, CredentialsError, KubeContext, LogLevel};
use super::egress::{Egress, EgressPolicy};
use super::engine::Ticking;
use super::exec::{ExecRunner, Served};
use super::manifest::{CredentialSource, Manifest};
use vigil_domain::exec::ClusterInfo;
use vigil_domain::reference::{self, ConnectionMaterial, Material, Reference, SecretBytes};
use vigil_domain::secrets::{SECRET_READ_TIMEOUT, SecretError, SecretSource};
use vigil_domain::tls::TlsClients;

/// The most bytes of guest stdout and of guest stderr kept per call.
pub const MAX_GUEST_OUTPUT_BYTES: usize = 64 * 1024;

/// The longest `log.write` message kept; longer ones are cut.
pub const MAX_LOG_MESSAGE_BYTES: usize = 4 * 1024;

/// The most `log.write` lines one call may emit; the rest are dropped.
pub const MAX_LOG_LINES_PER_CALL: u32 = 200;

/// The largest credential file (kubeconfig, certificate, key, token) served.
pub const MAX_CREDENTIAL_FILE_BYTES: u64 = 1024 * 1024;

/// The longest a credential file read may take (host calls cannot be interrupted by
/// epochs, so each has its own bound, never longer than the call's budget).
pub const CREDENTIAL_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Which limit a call hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// The instance's memories and tables together would have exceeded the cap.
    Memory {
        /// The total the guest asked for, in bytes.
        requested: u64,
        /// The plugin's cap, in bytes.
        cap: u64,
    },
    /// A table would have grown past the table element bound.
    TableElements {
        /// The elements asked for.
        requested: u64,
    },
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory { requested, cap } => write!(
                f,
                "memory limit of {} MiB reached (the instance asked for {} MiB)",
                cap / (1024 * 1024),
                requested.div_ceil(1024 * 1024)
            ),
            Self::TableElements { requested } => write!(
                f,
                "table limit reached (a table asked for {requested} elements)"
            ),
        }
    }
}

/// The most elements of one table.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// The bytes a table element is counted as against the memory cap.
const TABLE_ELEMENT_BYTES: u64 = 8;

/// A `ResourceLimiter` summing every memory and table of the instance against the
/// plugin's cap — wasmtime's `StoreLimits` limits each memory alone — and recording
/// which limit was hit, since a guest that fails to allocate usually just traps.
#[derive(Debug)]
pub(crate) struct CallLimiter {
    cap: u64,
    used: u64,
    pub(crate) hit: Option<LimitHit>,
}

impl CallLimiter {
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            cap,
            used: 0,
            hit: None,
        }
    }

    fn grow(&mut self, current: u64, desired: u64) -> bool {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.cap {
            self.hit.get_or_insert(LimitHit::Memory {
                requested: total,
                cap: self.cap,
            });
            return false;
        }
        self.used = total;
        true
    }
}

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(current as u64, desired as u64))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.hit.get_or_insert(LimitHit::TableElements {
                requested: desired as u64,
            });
            return Ok(false);
        }
        Ok(self.grow(
            current as u64 * TABLE_ELEMENT_BYTES,
            desired as u64 * TABLE_ELEMENT_BYTES,
        ))
    }
}

/// What the host saw during one call; the outcome mapping reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallRecord {
    /// A request to the cluster (its servers, endpoint or reference host) was made.
    pub cluster_contacted: bool,
    /// A request to the cluster timed out.
    pub cluster_timed_out: bool,
    /// A request to the cluster timed out under a bound the plugin shortened (see
    /// `egress::MIN_CLUSTER_REQUEST_TIMEOUT`): the plugin's own timeout.
    pub cluster_timeout_shortened: bool,
    /// The cluster answered 401 or 403.
    pub auth_rejected: Option<u16>,
    /// Requests denied by the egress policy, as `host:port`: the first
    /// `egress::MAX_DENIED_RECORDED` distinct ones.
    pub denied: Vec<String>,
    /// How many requests the egress policy denied.
    pub denied_count: u32,
    /// Connection material the host served from the reference (a CA, a client certificate
    /// or key) could not be used, before any connection: what and why.
    pub reference_broken: Option<String>,
    /// vigil's own resources failed a request before it reached the cluster (file
    /// descriptors, local ports, no local route, a resolver that did not answer).
    pub host_fault: Option<String>,
}

/// The cluster a call is about, as the host knows it.
#[derive(Debug, Clone)]
pub(crate) struct CallCluster {
    pub(crate) endpoint: String,
    pub(crate) reference: Reference,
    pub(crate) material: Option<Box<ConnectionMaterial>>,
    /// The plugin's parameters for this cluster: the manifest's defaults under the
    /// cluster's own, credential references unresolved.
    pub(crate) parameters: BTreeMap<String, String>,
}

/// The state of one call's store.
pub(crate) struct CallState {
    /// Built at the guest's first WASI call: most calls make none, and building one
    /// seeds its random generators.
    wasi: Option<WasiCtx>,
    wasi_http: WasiHttpCtx,
    table: ResourceTable,
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: MemoryOutputPipe,
    pub(crate) limiter: CallLimiter,
    pub(crate) plugin: Arc<str>,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) cluster: Option<CallCluster>,
    /// Where `file:///` credential parameters may lie.
    credential_dirs: Arc<[PathBuf]>,
    /// Kubeconfig contents already checked, shared by every call of the runtime.
    kubeconfigs: Arc<KnownKubeconfigs>,
    /// Where `secret://` references and parameters are read; `None` when the engine has
    /// no management cluster.
    secrets: Option<Arc<dyn SecretSource>>,
    /// Both HTTP doors (the contract's `http` and `wasi:http`) and what went through them.
    pub(crate) egress: Egress,
    pub(crate) deadline: Instant,
    /// Runs kubeconfig users' `exec` commands; `None` for calls about no cluster.
    exec: Option<Arc<ExecRunner>>,
    /// The exec credential served to this call, to forget it if the cluster refuses it.
    exec_served: Option<Served>,
    /// Whether a refusal of the exec credential was reported already: once per call.
    exec_refreshed: bool,
    log_lines: u32,
    /// Keeps the epoch ticking for as long as the store lives.
    _ticking: Ticking,
}

impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState")
            .field("plugin", &self.plugin)
            .field("egress", &self.egress)
            .finish_non_exhaustive()
    }
}

impl CallState {
    /// A fresh sandbox: no preopened directories, no environment, no arguments, no
    /// sockets; only stdout and stderr, captured to memory.
    pub(super) fn new(
        parts: super::PluginParts,
        cluster: Option<CallCluster>,
        clients: TlsClients,
        deadline: Instant,
        ticking: Ticking,
    ) -> Self {
        let super::PluginParts {
            name: plugin,
            manifest,
            credential_dirs,
            kubeconfigs,
            secrets,
            address_rule,
            exec,
        } = parts;
        let stdout = MemoryOutputPipe::new(MAX_GUEST_OUTPUT_BYTES);
        let stderr = MemoryOutputPipe::new(MAX_GUEST_OUTPUT_BYTES);
        let policy = EgressPolicy::new(&manifest.allowed_hosts, cluster.as_ref());
        let egress = Egress::new(
            Arc::clone(&plugin),
            manifest.http,
            policy,
            cluster.as_ref(),
            clients,
            deadline,
            address_rule,
        );
        Self {
            wasi: None,
            wasi_http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            stdout,
            stderr,
            limiter: CallLimiter::new(manifest.memory_bytes()),
            plugin,
            manifest,
            cluster,
            credential_dirs,
            kubeconfigs,
            secrets,
            egress,
            deadline,
            exec,
            exec_served: None,
            exec_refreshed: false,
            log_lines: 0,
            _ticking: ticking,
        }
    }

    /// What the host saw during the call, for the outcome mapping.
    pub(crate) fn record(&self) -> CallRecord {
        self.egress.record()
    }

    /// What is left of the call's budget.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Re-emits the guest's captured stdout and stderr through `tracing`, tagged with
    /// the plugin's name, one event per line, control characters escaped — only with the
    /// `log` grant, as `log.write`, and within the same count of lines per call.
    pub(crate) fn emit_guest_output(&self) {
        let mut emitted = self.log_lines;
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            if bytes.is_empty() {
                continue;
            }
            if !self.manifest.log {
                debug!(plugin = %self.plugin, stream, bytes = bytes.len(), "guest output dropped: log is not granted");
                continue;
            }
            for line in String::from_utf8_lossy(&bytes).lines() {
                emitted = emitted.saturating_add(1);
                if emitted > MAX_LOG_LINES_PER_CALL {
                    warn!(plugin = %self.plugin, stream, "guest output: more than {MAX_LOG_LINES_PER_CALL} lines in one call, dropping the rest");
                    return;
                }
                let line = escape_controls(truncate(line, MAX_LOG_MESSAGE_BYTES));
                info!(plugin = %self.plugin, stream, "{line}");
            }
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| {
                WasiCtxBuilder::new()
                    .stdout(self.stdout.clone())
                    .stderr(self.stderr.clone())
                    .allow_tcp(false)
                    .allow_udp(false)
                    .allow_ip_name_lookup(false)
                    .build()
            }),
            table: &mut self.table,
        }
    }
}

/// `wasi:http` shares the call's resource table with WASI; its hooks are the call's
/// egress, so every outgoing request meets the same policy as the contract's `http`.
impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.wasi_http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

/// `log`: the host side of the contract's interface, whatever the plugin's contract version.
impl CallState {
    /// `log.write`: the message in vigil's log, tagged with the plugin's name, if the plugin
    /// is granted `log` and the call has lines left.
    pub(crate) fn log_write(&mut self, level: LogLevel, message: &str) {
        if !self.manifest.log {
            if self.log_lines == 0 {
                debug!(plugin = %self.plugin, "log.write dropped: log is not granted");
            }
            self.log_lines = self.log_lines.saturating_add(1);
            return;
        }
        self.log_lines = self.log_lines.saturating_add(1);
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            if self.log_lines == MAX_LOG_LINES_PER_CALL + 1 {
                warn!(plugin = %self.plugin, "log.write: more than {MAX_LOG_LINES_PER_CALL} lines in one call, dropping the rest");
            }
            return;
        }
        // Escaped, so that a line of the guest's stays one line of vigil's log: a newline
        // in it cannot forge a second record, nor an escape sequence rewrite the terminal.
        let message = escape_controls(truncate(message, MAX_LOG_MESSAGE_BYTES));
        let plugin = &*self.plugin;
        match level {
            LogLevel::Trace => trace!(plugin, "{message}"),
            LogLevel::Debug => debug!(plugin, "{message}"),
            LogLevel::Info => info!(plugin, "{message}"),
            LogLevel::Warn => warn!(plugin, "{message}"),
            LogLevel::Error => error!(plugin, "{message}"),
        }
    }

    /// `log.enabled`: whether a message at `level` would be recorded now.
    pub(crate) fn log_enabled(&self, level: LogLevel) -> bool {
        self.manifest.log
            && self.log_lines < MAX_LOG_LINES_PER_CALL
            && match level {
                // The same callsite target as `log_write`'s events: the subscriber's filter
                // answers for both alike.
                LogLevel::Trace => tracing::enabled!(tracing::Level::TRACE),
                LogLevel::Debug => tracing::enabled!(tracing::Level::DEBUG),
                LogLevel::Info => tracing::enabled!(tracing::Level::INFO),
                LogLevel::Warn => tracing::enabled!(tracing::Level::WARN),
                LogLevel::Error => tracing::enabled!(tracing::Level::ERROR),
            }
    }
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` with every control character (C0, DEL, C1) and the Unicode line and paragraph
/// separators written as Rust escapes (`\n`, `\r`, `\u{1b}`…).
pub(crate) fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !text.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

type CredentialsResult = Result<Vec<u8>, CredentialsError>;

/// The context a Secret's kubeconfig selects, or why it cannot be resolved.
type SecretResolution = Result<ConnectionMaterial, (ReasonClass, String)>;

/// `credentials`: the host side of the contract's interface, whatever the plugin's contract
/// version.
impl CallState {
    /// `credentials.kubeconfig`: the kubeconfig the cluster's reference names, reduced to
    /// the context it selects.
    pub(crate) async fn credentials_kubeconfig(&mut self) -> CredentialsResult {
        self.check_credentials_grant("kubeconfig")?;
        // What the host resolved for this very probe (the file was read and parsed just
        // before the call), so the plugin reads what the egress policy was derived from.
        match self
            .serve_file_material(|material| material.served_kubeconfig.expose_secret().to_vec())?
        {
            Some(served) => Ok(served),
            None => self.secret_kubeconfig().await,
        }
    }

    /// `credentials.context`: the context the cluster's reference selects, as vigil
    /// resolved it.
    pub(crate) async fn credentials_context(&mut self) -> Result<KubeContext, CredentialsError> {
        use CredentialsError as E;
        self.check_credentials_grant("context")?;
        if let Some(context) = self.serve_file_material(kube_context)? {
            return Ok(context);
        }
        let (_, resolved) = self.read_secret_kubeconfig("credentials.context").await?;
        match resolved {
            Ok(material) => {
                self.egress.serve_material(&material);
                Ok(kube_context(&material))
            }
            Err((ReasonClass::ExecCredentials, message)) => Err(E::ExecCredentials(message)),
            Err((_, message)) => Err(E::Invalid(message)),
        }
    }

    /// `credentials.read-file`: a file the kubeconfig's selected context names.
    pub(crate) async fn credentials_read_file(&mut self, path: &str) -> CredentialsResult {
        use CredentialsError as E;
        self.check_credentials_grant("read-file")?;
        let Some(material) = self.cluster.as_ref().and_then(|c| c.material.as_ref()) else {
            if let Some(Reference::Secret { .. }) = self.cluster.as_ref().map(|c| &c.reference) {
                self.egress.refused("credentials.read-file denied: a kubeconfig from a Secret names no servable file", path);
                return Err(E::Denied(format!(
                    "{path}: a kubeconfig in a Secret must be self-contained (inline *-data fields and token); vigil serves no file for it"
                )));
            }
            return Err(E::Denied(
                "this cluster's reference names no files".to_owned(),
            ));
        };
        let Some(wanted) = resolve_against(&material.kubeconfig, Path::new(path)) else {
            return Err(E::Denied(format!(
                "{path} is not a path the kubeconfig names"
            )));
        };
        let kubeconfig = material.kubeconfig.clone();
        let file_roots: Arc<[PathBuf]> = material.file_roots.clone().into();
        // The kubeconfig file itself holds every context's credentials, so it is never
        // served, whatever name reaches it (a link, a hard link, another spelling of its
        // path): `credentials.kubeconfig` serves the selected context alone. By name here;
        // on the file actually opened in `read_checked`.
        if resolve_against(&kubeconfig, &kubeconfig).is_some_and(|own| own == wanted) {
            warn!(plugin = %self.plugin, path = %path, "credentials.read-file denied: it is the kubeconfig file itself");
            return Err(E::Denied(format!(
                "{path}: {}",
                ReadRefused::KubeconfigItself
            )));
        }
        let allowed = material
            .files()
            .iter()
            .filter(|file| **file != kubeconfig)
            .filter_map(|file| resolve_against(&kubeconfig, file))
            .any(|file| file == wanted);
        if !allowed {
            self.egress.refused(
                "credentials.read-file denied: not a file of the cluster's kubeconfig context",
                path,
            );
            return Err(E::Denied(format!(
                "{path} is not a file the kubeconfig's context names"
            )));
        }
        // Resolution found it under the kubeconfig's directory or the operator's; the file
        // opened now must lie there still (a link may have changed since).
        let rule = ReadRule {
            not_the_file: Some(kubeconfig),
            under: Some(file_roots),
            named_by_kubeconfig: true,
        };
        let bytes = match read_bounded(self.remaining(), &wanted, rule).await {
            Err(E::Denied(message)) => {
                warn!(plugin = %self.plugin, path = %path, "credentials.read-file denied: {message}");
                return Err(E::Denied(message));
            }
            other => other?,
        };
        self.egress.note_served(&bytes);
        Ok(bytes)
    }

    /// `credentials.parameter`: the value of one of the cluster's plugin parameters, a
    /// credential reference resolved now.
    /// `credentials.exec-credential`: the credential of the selected user's `exec` command,
    /// run by the host when the plugin is granted `exec-credentials` and the operator's
    /// policy admits the command; kept for later calls.
    pub(crate) async fn credentials_exec(
        &mut self,
    ) -> Result<contract::ExecCredential, CredentialsError> {
        use CredentialsError as E;
        self.check_credentials_grant("exec-credential")?;
        let material = match self.serve_file_material(|material| material.clone())? {
            Some(material) => material,
            None => {
                let (_, resolved) = self
                    .read_secret_kubeconfig("credentials.exec-credential")
                    .await?;
                match resolved {
                    Ok(material) => {
                        self.egress.serve_material(&material);
                        material
                    }
                    Err((ReasonClass::ExecCredentials, message)) => {
                        return Err(E::ExecCredentials(message));
                    }
                    Err((_, message)) => return Err(E::Invalid(message)),
                }
            }
        };
        let owner = vigil_domain::exec::owner(&material);
        let Some(spec) = material.exec.as_deref() else {
            return Err(E::NotFound(format!(
                "{owner}: the user has no exec section"
            )));
        };
        if !self.manifest.exec_credentials {
            self.egress.refused(
                "credentials.exec-credential denied: exec-credentials is not granted",
                &spec.command_name(),
            );
            return Err(E::ExecCredentials(format!(
                "{owner}: its credentials come from the exec command {:?}, and the plugin {} is not granted exec-credentials (in its NAME.toml)",
                spec.command_name(),
                self.plugin
            )));
        }
        let Some(runner) = self.exec.clone() else {
            return Err(E::NotFound("this call is about no cluster".to_owned()));
        };
        let admitted = runner
            .admit(spec)
            .map_err(|refusal| E::ExecCredentials(format!("{owner}: {refusal}")))?;
        let cluster = exec_cluster_info(&material, self.remaining()).await?;
        let key = ExecRunner::key(&self.plugin, spec, &cluster);
        let asked = spec.provide_cluster_info.then_some(cluster);
        let (credential, run) = runner
            .credential(key, spec, admitted, asked, self.remaining())
            .await
            .map_err(|why| E::ExecCredentials(format!("{owner}: {why}")))?;
        // The credential goes to the cluster's server only, as the kubeconfig's own would.
        for secret in [
            credential.token.as_deref().map(str::as_bytes),
            credential.client_key.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            self.egress.hold_exec_credential(&material, secret);
        }
        self.exec_served = Some(Served {
            key,
            credential: credential.clone(),
            run,
        });
        Ok(contract::ExecCredential {
            token: credential.token,
            client_certificate: credential.client_certificate,
            client_key: credential.client_key,
            expires_at: credential.expires_at.and_then(|at| u64::try_from(at).ok()),
        })
    }

    /// Whether `request` carries the exec credential served to this call.
    pub(crate) fn carries_exec_credential(&self, request: &contract::HttpRequest) -> bool {
        let Some(served) = &self.exec_served else {
            return false;
        };
        let token = served.credential.token.as_deref().is_some_and(|token| {
            request.headers.iter().any(|(name, value)| {
                name.eq_ignore_ascii_case("authorization") && value.contains(token)
            })
        });
        let certificate = served
            .credential
            .client_certificate
            .as_deref()
            .is_some_and(|pem| {
                request
                    .tls
                    .as_ref()
                    .and_then(|tls| tls.client_certificate_pem.as_deref())
                    == Some(pem)
            });
        token || certificate
    }

    /// The cluster answered 401 to a request carrying the exec credential: it is
    /// forgotten, so that the next `exec-credential` of this call (or of the next one)
    /// runs the command again — once per call.
    pub(crate) fn exec_credential_refused(&mut self) {
        if self.exec_refreshed {
            return;
        }
        if let (Some(runner), Some(served)) = (&self.exec, &self.exec_served) {
            runner.refused(served);
            self.exec_refreshed = true;
        }
    }

    pub(crate) async fn credentials_parameter(&mut self, name: &str) -> CredentialsResult {
        use CredentialsError as E;
        self.check_credentials_grant("parameter")?;
        let Some(value) = self
            .cluster
            .as_ref()
            .and_then(|cluster| cluster.parameters.get(name))
        else {
            return Err(E::NotFound(format!("the cluster has no parameter {name}")));
        };
        match ParameterValue::parse(value) {
            // A plain value is no secret (the plugin sees it in `cluster.parameters`);
            // serving it too lets a plugin read a header's value the same way whether
            // the operator gave it inline or as a reference.
            ParameterValue::Plain(text) => Ok(text.as_bytes().to_vec()),
            ParameterValue::File(path) => {
                if !is_under(&path, &self.credential_dirs) {
                    self.egress.refused("credentials.parameter denied: the file is outside the credential directories", name);
                    return Err(E::Denied(format!(
                        "parameter {name} names a file outside the credential directories"
                    )));
                }
                // By name the file lies inside; the file actually opened must too (a link
                // inside a credential directory may point anywhere).
                let rule = ReadRule {
                    not_the_file: None,
                    under: Some(Arc::clone(&self.credential_dirs)),
                    named_by_kubeconfig: false,
                };
                let bytes = match read_bounded(self.remaining(), &path, rule).await {
                    Err(E::Denied(message)) => {
                        self.egress.refused(
                            "credentials.parameter denied: the file opened lies outside the credential directories",
                            name,
                        );
                        return Err(E::Denied(format!("parameter {name}: {message}")));
                    }
                    other => other?,
                };
                self.egress.hold_parameter(
                    name,
                    CredentialSource::File(&path),
                    &bytes,
                    &self.manifest,
                );
                Ok(bytes)
            }
            ParameterValue::Secret(text) => {
                let Ok(Reference::Secret {
                    namespace,
                    name: secret,
                    key,
                    context: None,
                }) = Reference::parse(text)
                else {
                    return Err(E::Invalid(format!(
                        "parameter {name} is not a valid secret://NAMESPACE/NAME?key=KEY reference"
                    )));
                };
                self.check_namespace(&namespace, "credentials.parameter")?;
                let bytes = read_secret(
                    self.secrets.clone(),
                    self.remaining(),
                    &namespace,
                    &secret,
                    &key,
                )
                .await?;
                self.egress.hold_parameter(
                    name,
                    CredentialSource::Secret {
                        namespace: &namespace,
                        name: &secret,
                    },
                    bytes.expose_secret(),
                    &self.manifest,
                );
                Ok(bytes.into_exposed_secret())
            }
            ParameterValue::Invalid => Err(E::Invalid(format!(
                "parameter {name} is not a valid file:/// reference"
            ))),
        }
    }
}

impl CallState {
    /// `credentials.kubeconfig` for a `secret://` reference: the Secret's key, read now
    /// from the management cluster, if the plugin is granted the namespace and the value
    /// parses as a kubeconfig. When the context the reference selects resolves, its
    /// server becomes the cluster's for egress and the plugin is served that context
    /// alone, rendered as for a file ([`ConnectionMaterial::served_kubeconfig`]); a context
    /// that cannot be resolved (say, one naming files) adds no egress and is served as
    /// stored, so that the plugin finds and words the problem in its own reading.
    async fn secret_kubeconfig(&mut self) -> CredentialsResult {
        let (bytes, resolved) = self
            .read_secret_kubeconfig("credentials.kubeconfig")
            .await?;
        match resolved {
            Ok(material) => {
                self.egress.serve_material(&material);
                Ok(material.served_kubeconfig.into_exposed_secret())
            }
            Err((_, message)) => {
                // Served as stored: the plugin's own reading finds and words the problem.
                debug!(plugin = %self.plugin, "no egress derived from the Secret's kubeconfig: {message}");
                Ok(bytes.into_exposed_secret())
            }
        }
    }

    /// Reads the kubeconfig of the call's `secret://` reference for `call` (within the
    /// plugin's `secret-namespaces`, refused unless it parses as a kubeconfig) and resolves
    /// the context the reference selects; the error is what makes it unresolvable.
    async fn read_secret_kubeconfig(
        &mut self,
        call: &str,
    ) -> Result<(SecretBytes, SecretResolution), CredentialsError> {
        use CredentialsError as E;
        let Some(CallCluster {
            reference:
                reference @ Reference::Secret {
                    namespace,
                    name,
                    key,
                    context,
                },
            ..
        }) = &self.cluster
        else {
            return Err(E::NotFound(
                "the cluster has no secret:// reference".to_owned(),
            ));
        };
        let (label, namespace, name, key, context) = (
            reference.to_string(),
            namespace.clone(),
            name.clone(),
            key.clone(),
            context.clone(),
        );
        self.check_namespace(&namespace, call)?;
        let bytes = read_secret(
            self.secrets.clone(),
            self.remaining(),
            &namespace,
            &name,
            &key,
        )
        .await?;
        if !self.kubeconfigs.check(bytes.expose_secret()) {
            return Err(E::Invalid(format!(
                "the key {key:?} of the Secret {namespace}/{name} is not a kubeconfig"
            )));
        }
        let resolved =
            reference::resolve_secret_kubeconfig(bytes.expose_secret(), &label, context.as_deref());
        Ok((bytes, resolved))
    }

    /// `serve` applied to what the worker resolved for the call's kubeconfig file
    /// reference, whose selected server becomes the cluster's for egress (material served
    /// to this call); `None` for a `secret://` reference, whose kubeconfig is read now.
    fn serve_file_material<T>(
        &mut self,
        serve: impl FnOnce(&ConnectionMaterial) -> T,
    ) -> Result<Option<T>, CredentialsError> {
        use CredentialsError as E;
        let Some(cluster) = &self.cluster else {
            return Err(E::NotFound("this call is about no cluster".to_owned()));
        };
        let material = match (&cluster.reference, &cluster.material) {
            (Reference::File { .. }, Some(material)) => material,
            (Reference::File { path, .. }, None) => {
                return Err(E::NotFound(format!(
                    "the kubeconfig {path} could not be resolved"
                )));
            }
            (Reference::Secret { .. }, _) => return Ok(None),
            (Reference::Http { .. }, _) => {
                return Err(E::NotFound(
                    "an http(s):// reference names no kubeconfig".to_owned(),
                ));
            }
        };
        self.egress.policy.add_cluster_url(&material.server);
        Ok(Some(serve(material)))
    }

    /// Whether the plugin is granted `credentials` (`credentials.CALL` is denied, and the
    /// denial logged, otherwise).
    fn check_credentials_grant(&self, call: &str) -> Result<(), CredentialsError> {
        if self.manifest.credentials {
            return Ok(());
        }
        self.egress
            .refused("credentials denied: credentials are not granted", call);
        Err(CredentialsError::Denied(
            "credentials are not granted to this plugin".to_owned(),
        ))
    }

    /// Whether the plugin may read Secrets of `namespace` (`secret-namespaces` in its
    /// `NAME.toml`; none by default).
    fn check_namespace(&self, namespace: &str, call: &str) -> Result<(), CredentialsError> {
        if self
            .manifest
            .secret_namespaces
            .iter()
            .any(|granted| granted == namespace)
        {
            return Ok(());
        }
        self.egress.refused(
            "credentials denied: the Secret's namespace is not granted",
            &format!("{call}: {namespace}"),
        );
        Err(CredentialsError::Denied(format!(
            "the Secrets of namespace {namespace} are not granted to this plugin (secret-namespaces in its NAME.toml)"
        )))
    }
}

/// Reads one key of a Secret, bounded by what is left of the call and by
/// [`SECRET_READ_TIMEOUT`] (epochs cannot interrupt a host call). A free function for the
/// same reason as [`read_bounded`]. Only names reach the errors, never a value.
async fn read_secret(
    source: Option<Arc<dyn SecretSource>>,
    remaining: Duration,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<SecretBytes, CredentialsError> {
    use CredentialsError as E;
    let Some(source) = source else {
        return Err(E::Invalid(
            vigil_domain::secrets::Unavailable::not_configured().0,
        ));
    };
    let bound = remaining.min(SECRET_READ_TIMEOUT);
    debug!(namespace, secret = name, key, "reading a Secret key");
    match tokio::time::timeout(bound, source.read(namespace, name, key)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(error @ (SecretError::SecretNotFound { .. } | SecretError::KeyNotFound { .. }))) => {
            Err(E::NotFound(error.to_string()))
        }
        Ok(Err(error @ SecretError::Forbidden { .. })) => Err(E::Denied(error.to_string())),
        Ok(Err(error)) => Err(E::Invalid(error.to_string())),
        Err(_) => Err(E::Invalid(
            SecretError::Timeout {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                after: bound,
            }
            .to_string(),
        )),
    }
}

/// A parameter's value as the contract reads it: a credential given as a
/// reference, resolved by the host only when the plugin asks for it, or a plain value.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ParameterValue<'a> {
    /// A value given inline.
    Plain(&'a str),
    /// `file:///ABS/PATH`: the file's bytes, lexically normalised.
    File(PathBuf),
    /// `secret://NAMESPACE/NAME?key=KEY`: a key of a Kubernetes Secret (the text, parsed
    /// when the plugin asks for it).
    Secret(&'a str),
    /// A `file:` value that names no absolute local path.
    Invalid,
}

impl<'a> ParameterValue<'a> {
    pub(crate) fn parse(value: &'a str) -> Self {
        if value.starts_with("secret://") {
            return Self::Secret(value);
        }
        let Some(rest) = value.strip_prefix("file://") else {
            return Self::Plain(value);
        };
        // `file:///p` and `file://localhost/p` name local files; any other host does not.
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        if !rest.starts_with('/') {
            return Self::Invalid;
        }
        match percent_decode(rest) {
            Some(path) => {
                resolve_against(Path::new("/"), Path::new(&path)).map_or(Self::Invalid, Self::File)
            }
            None => Self::Invalid,
        }
    }
}

/// `%XX` escapes of a URL path decoded; `None` when one is malformed or the result is
/// not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// Whether `path` (already normalised) is one of `roots` or lies under one of them. The
/// comparison is on names, as discovery's (paths are not canonicalised, so that Secret
/// volumes' `..data` links keep working).
fn is_under(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| {
        resolve_against(Path::new("/"), root).is_some_and(|root| path.starts_with(root))
    })
}

#[cfg(unix)]
fn same_identity(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_identity(_a: &std::fs::Metadata, _b: &std::fs::Metadata) -> bool {
    false
}

/// The cluster as the command is told about it (`provideClusterInfo`), the CA read
/// from its file when the kubeconfig names one.
async fn exec_cluster_info(
    material: &ConnectionMaterial,
    remaining: Duration,
) -> Result<ClusterInfo, CredentialsError> {
    let certificate_authority_data = match &material.ca {
        None => None,
        Some(Material::Inline(bytes)) => Some(bytes.expose_secret().to_vec()),
        Some(Material::File(path)) => {
            let rule = ReadRule {
                not_the_file: Some(material.kubeconfig.clone()),
                under: Some(material.file_roots.clone().into()),
                named_by_kubeconfig: true,
            };
            Some(read_bounded(remaining, path, rule).await?)
        }
    };
    Ok(ClusterInfo {
        server: material.server.clone(),
        tls_server_name: material.tls_server_name.clone(),
        insecure_skip_tls_verify: material.insecure_skip_tls_verify,
        certificate_authority_data,
    })
}

/// What a credential file read checks on the file it opened, before reading a byte.
#[derive(Debug, Default)]
struct ReadRule {
    /// The opened file must not be this one (the kubeconfig, for `read-file`).
    not_the_file: Option<PathBuf>,
    /// The opened file's real path must lie under one of these (the credential directories
    /// for `file:///` parameters; for a file a kubeconfig names, its directory and the
    /// operator's).
    under: Option<Arc<[PathBuf]>>,
    /// Whether the file is one a kubeconfig names (the refusal then says how to allow it).
    named_by_kubeconfig: bool,
}

/// Why a credential file read refused the file it opened; carried in an `io::Error`.
#[derive(Debug, thiserror::Error)]
enum ReadRefused {
    /// The file opened is the kubeconfig.
    #[error(
        "the file is the kubeconfig file itself, which may hold other contexts' credentials; credentials.kubeconfig serves the selected context"
    )]
    KubeconfigItself,
    /// The file opened really lies outside the credential directories.
    #[error("the file really lies (after symbolic links) outside the credential directories")]
    Outside,
    /// The file opened, named by a kubeconfig, really lies outside the kubeconfig's
    /// directory and the operator's directories for such files.
    #[error(
        "the file really lies (after symbolic links) outside the kubeconfig's directory and VIGIL_KUBECONFIG_CREDENTIAL_DIRS"
    )]
    OutsideKubeconfigDirs,
    /// Not a regular file.
    #[error("{0}")]
    NotRegular(String),
}

/// Reads a credential file, bounded in size and in time (host calls are not interrupted
/// by epochs), after `rule`'s checks on the file opened. A free function: the store
/// state is not `Sync`, so the future must not hold a reference to it.
///
/// Opening, sizing and reading happen in one blocking task: each hand-off to tokio's
/// blocking pool wakes a thread, which is most of what reading a small file costs.
async fn read_bounded(remaining: Duration, path: &Path, rule: ReadRule) -> CredentialsResult {
    use CredentialsError as E;
    let bound = remaining.min(CREDENTIAL_READ_TIMEOUT);
    let owned = path.to_path_buf();
    let read = tokio::task::spawn_blocking(move || read_checked(&owned, &rule));
    match tokio::time::timeout(bound, read).await {
        Ok(Ok(Ok(bytes))) => Ok(bytes),
        Ok(Ok(Err(error))) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(E::NotFound(format!("{} does not exist", path.display())))
        }
        Ok(Ok(Err(error))) => {
            let refused = error
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<ReadRefused>());
            let shown = path.display();
            Err(match refused {
                Some(ReadRefused::NotRegular(why)) => E::Invalid(format!("{shown}: {why}")),
                Some(refused) => E::Denied(format!("{shown}: {refused}")),
                None => E::Invalid(format!("cannot read {shown}: {error}")),
            })
        }
        Ok(Err(_)) => Err(E::Invalid(format!(
            "reading {} failed in the host",
            path.display()
        ))),
        Err(_) => Err(E::Invalid(format!(
            "reading {} took longer than {} ms",
            path.display(),
            bound.as_millis()
        ))),
    }
}

/// [`read_capped`] after `rule`'s checks on the file opened. Blocking.
fn read_checked(path: &Path, rule: &ReadRule) -> std::io::Result<Vec<u8>> {
    let file = open_credential_file(path)?;
    if let Some(kubeconfig) = &rule.not_the_file {
        let opened = file.metadata()?;
        let is_kubeconfig = std::fs::metadata(kubeconfig)
            .is_ok_and(|kubeconfig| same_identity(&opened, &kubeconfig))
            || reference::real_path_of(&file, path)
                .is_ok_and(|real| std::fs::canonicalize(kubeconfig).is_ok_and(|k| k == real));
        if is_kubeconfig {
            return Err(std::io::Error::other(ReadRefused::KubeconfigItself));
        }
    }
    if let Some(roots) = &rule.under
        && !reference::opened_under(&file, path, roots)
    {
        return Err(std::io::Error::other(if rule.named_by_kubeconfig {
            ReadRefused::OutsideKubeconfigDirs
        } else {
            ReadRefused::Outside
        }));
    }
    read_opened(file)
}

/// Opens a credential file without blocking, refusing a FIFO, a device, a socket or a
/// directory before any read.
fn open_credential_file(path: &Path) -> std::io::Result<std::fs::File> {
    reference::open_regular(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::Other => {
            std::io::Error::other(ReadRefused::NotRegular(error.to_string()))
        }
        _ => error,
    })
}

/// A file's bytes, refused when larger than [`MAX_CREDENTIAL_FILE_BYTES`] (also when it
/// grows past it while being read), or when it is not a regular file. Blocking.
#[cfg(test)]
fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    read_opened(open_credential_file(path)?)
}

/// An opened file's bytes, capped at [`MAX_CREDENTIAL_FILE_BYTES`]. Blocking.
fn read_opened(file: std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let too_large = || std::io::Error::other("too large");
    let size = file.metadata()?.len();
    if size > MAX_CREDENTIAL_FILE_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_CREDENTIAL_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CREDENTIAL_FILE_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

/// How many kubeconfig contents [`KnownKubeconfigs`] remembers (32-byte digests).
pub const KNOWN_KUBECONFIGS: usize = 4096;

/// Digests of kubeconfig contents that parsed as kubeconfigs, shared by every call.
///
/// `credentials.kubeconfig` serves a Secret's value only if it parses as a kubeconfig (a
/// file reference's kubeconfig was parsed by the resolution before the call). The Secret
/// is read at every call (it may have been rotated), but the same bytes parse the same
/// way, so a content already checked is recognised by its sha256 instead of being parsed
/// again: a few microseconds instead of the parse. Only successes are remembered; the least
/// recently used digest goes first when [`KNOWN_KUBECONFIGS`] are held.
#[derive(Debug, Default)]
pub(crate) struct KnownKubeconfigs {
    digests: Mutex<(HashMap<[u8; 32], u64>, u64)>,
}

impl KnownKubeconfigs {
    /// Whether `bytes` are a kubeconfig: text that the host's reader (kube's) accepts.
    pub(crate) fn check(&self, bytes: &[u8]) -> bool {
        let digest: [u8; 32] = sha2::Sha256::digest(bytes).into();
        {
            let mut guard = self.digests.lock().unwrap_or_else(PoisonError::into_inner);
            let (known, clock) = &mut *guard;
            *clock += 1;
            if let Some(used) = known.get_mut(&digest) {
                *used = *clock;
                return true;
            }
        }
        let parses = std::str::from_utf8(bytes)
            .ok()
            .is_some_and(|text| kube::config::Kubeconfig::from_yaml(text).is_ok());
        if parses {
            let mut guard = self.digests.lock().unwrap_or_else(PoisonError::into_inner);
            let (known, clock) = &mut *guard;
            if known.len() >= KNOWN_KUBECONFIGS {
                let oldest = known.iter().min_by_key(|(_, used)| **used).map(|(d, _)| *d);
                if let Some(oldest) = oldest {
                    known.remove(&oldest);
                }
            }
            *clock += 1;
            known.insert(digest, *clock);
        }
        parses
    }
}

/// The contract's form of what the host resolved for a kubeconfig context.
fn kube_context(material: &ConnectionMaterial) -> KubeContext {
    let served = |material: &Option<Material>| {
        material.as_ref().map(|material| match material {
            Material::Inline(bytes) => contract::Material::Data(bytes.expose_secret().to_vec()),
            Material::File(path) => contract::Material::File(path.to_string_lossy().into_owned()),
        })
    };
    KubeContext {
        context: material.context.clone(),
        cluster: material.cluster.clone(),
        user: material.user.clone(),
        server: material.server.clone(),
        tls_server_name: material.tls_server_name.clone(),
        insecure_skip_tls_verify: material.insecure_skip_tls_verify,
        certificate_authority: served(&material.ca),
        client_certificate: served(&material.client_certificate),
        client_key: served(&material.client_key),
        token: served(&material.token),
    }
}

/// `path` as kubectl reads a path written in the kubeconfig at `kubeconfig`: relative
/// paths against the kubeconfig's directory, then `.` and `..` removed lexically (the
/// comparison is on names, never following the guest into other directories).
fn resolve_against(kubeconfig: &Path, path: &Path) -> Option<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        kubeconfig.parent()?.join(path)
    };
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    return None;
                }
            }
            other => normal.push(other.as_os_str()),
        }
    }
    Some(normal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_domain::parameter::is_credential_reference;

    #[test]
    fn parameter_values_are_read_as_the_contract_says() {
        let check = |value: &str, expected: ParameterValue<'_>| {
            assert_eq!(ParameterValue::parse(value), expected, "{value}");
        };
        check("Bearer abc", ParameterValue::Plain("Bearer abc"));
        check("", ParameterValue::Plain(""));
        check("https://x/y", ParameterValue::Plain("https://x/y"));
        check(
            "secret://ns/name?key=token",
            ParameterValue::Secret("secret://ns/name?key=token"),
        );
        check(
            "file:///etc/vigil/token",
            ParameterValue::File("/etc/vigil/token".into()),
        );
        check(
            "file://localhost/etc/vigil/token",
            ParameterValue::File("/etc/vigil/token".into()),
        );
        check(
            "file:///etc/vigil/a%20b",
            ParameterValue::File("/etc/vigil/a b".into()),
        );
        check(
            "file:///etc/vigil/./x/../token",
            ParameterValue::File("/etc/vigil/token".into()),
        );
        check("file:///../../etc/shadow", ParameterValue::Invalid);
        check("file://other-host/etc/token", ParameterValue::Invalid);
        check("file://relative", ParameterValue::Invalid);
        check("file:///bad%zz", ParameterValue::Invalid);
        assert!(is_credential_reference("file:///x"));
        assert!(is_credential_reference("secret://ns/n"));
        assert!(!is_credential_reference("x"));
    }

    #[test]
    fn control_characters_in_guest_lines_are_escaped() {
        let check = |text: &str, expected: &str| {
            assert_eq!(escape_controls(text), expected, "{text:?}");
        };
        check("plain text, ünïcode", "plain text, ünïcode");
        check(
            "ok\n2026-01-01T00:00:00Z  INFO vigil: forged",
            "ok\\n2026-01-01T00:00:00Z  INFO vigil: forged",
        );
        check("a\rb\tc", "a\\rb\\tc");
        check("\u{1b}[2Jcleared", "\\u{1b}[2Jcleared");
        check("x\u{85}y\u{2028}z", "x\\u{85}y\\u{2028}z");
    }

    #[test]
    fn credential_files_that_are_not_regular_are_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        // A plain open of a FIFO waits for a writer: in a thread of its own, so that a
        // read that blocked fails the test instead of hanging it.
        let (done, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(read_capped(&fifo).map_err(|error| error.to_string()));
        });
        let error = answer
            .recv_timeout(Duration::from_secs(30))
            .expect("the read returned")
            .expect_err("a FIFO is refused");
        assert!(error.contains("not a regular file"), "{error}");
        let error = read_capped(dir.path()).expect_err("a directory is refused");
        assert!(error.to_string().contains("directory"), "{error}");
    }

    fn refusal(result: std::io::Result<Vec<u8>>) -> Option<String> {
        match result {
            Ok(_) => None,
            Err(error) => Some(
                error
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<ReadRefused>())
                    .map_or_else(|| format!("io: {error}"), ToString::to_string),
            ),
        }
    }

    #[test]
    fn the_kubeconfig_file_itself_is_never_read_whatever_the_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, b"kind: Config\n").expect("write");
        std::fs::write(dir.path().join("ca.crt"), b"pem").expect("write");
        std::os::unix::fs::symlink(&kubeconfig, dir.path().join("link")).expect("symlink");
        std::fs::hard_link(&kubeconfig, dir.path().join("hard")).expect("hard link");
        let rule = ReadRule {
            not_the_file: Some(kubeconfig),
            under: None,
            named_by_kubeconfig: true,
        };
        let read = |name: &str| read_checked(&dir.path().join(name), &rule);
        assert_eq!(read("ca.crt").expect("another file is read"), b"pem");
        for name in ["config", "link", "hard", "./config"] {
            let refused = refusal(read(name)).expect("refused");
            assert!(
                refused.contains("kubeconfig file itself"),
                "{name}: {refused}"
            );
        }
    }

    #[test]
    fn a_parameter_file_is_read_only_where_it_really_lies() {
        let temp = tempfile::tempdir().expect("tempdir");
        let volume = temp.path().join("volume");
        let outside = temp.path().join("outside");
        std::fs::create_dir_all(volume.join("..2026_a")).expect("dirs");
        std::fs::create_dir_all(volume.join("..2026_b")).expect("dirs");
        std::fs::create_dir_all(&outside).expect("dirs");
        std::fs::write(volume.join("..2026_a/token"), b"first").expect("write");
        std::fs::write(volume.join("..2026_b/token"), b"second").expect("write");
        std::fs::write(outside.join("secret"), b"not yours").expect("write");
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, volume.join(name)).expect("symlink");
        };
        link("..2026_a", "..data");
        link("..data/token", "token");
        link(&outside.join("secret").to_string_lossy(), "escape");
        let rule = ReadRule {
            not_the_file: None,
            under: Some(Arc::from([volume.clone()])),
            named_by_kubeconfig: false,
        };
        let token = volume.join("token");
        assert_eq!(read_checked(&token, &rule).expect("read"), b"first");
        // The kubelet's rotation: a new `..data` link renamed over the old one.
        link("..2026_b", "..data_tmp");
        std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("rotate");
        assert_eq!(read_checked(&token, &rule).expect("read"), b"second");
        let refused = refusal(read_checked(&volume.join("escape"), &rule)).expect("refused");
        assert!(
            refused.contains("outside the credential directories"),
            "{refused}"
        );
    }

    #[test]
    fn a_file_a_kubeconfig_names_is_read_only_under_its_roots_when_opened() {
        let temp = tempfile::tempdir().expect("tempdir");
        let kubeconfigs = temp.path().join("kubeconfigs");
        let outside = temp.path().join("outside");
        std::fs::create_dir_all(&kubeconfigs).expect("dirs");
        std::fs::create_dir_all(&outside).expect("dirs");
        std::fs::write(kubeconfigs.join("token"), b"mine").expect("write");
        std::fs::write(outside.join("secret"), b"not yours").expect("write");
        // Resolution saw a file inside; a link put in its place later points outside.
        std::os::unix::fs::symlink(outside.join("secret"), kubeconfigs.join("swapped"))
            .expect("symlink");
        let rule = ReadRule {
            not_the_file: Some(kubeconfigs.join("config")),
            under: Some(Arc::from([kubeconfigs.clone()])),
            named_by_kubeconfig: true,
        };
        assert_eq!(
            read_checked(&kubeconfigs.join("token"), &rule).expect("read"),
            b"mine"
        );
        let refused = refusal(read_checked(&kubeconfigs.join("swapped"), &rule)).expect("refused");
        assert!(
            refused.contains("VIGIL_KUBECONFIG_CREDENTIAL_DIRS"),
            "{refused}"
        );
    }

    #[test]
    fn kubeconfig_contents_are_checked_once_and_only_successes_remembered() {
        let known = KnownKubeconfigs::default();
        let remembered = || known.digests.lock().expect("lock").0.len();
        let good = b"apiVersion: v1\nkind: Config\nclusters: []\ncurrent-context: x\n";
        assert!(known.check(good));
        assert!(known.check(good));
        assert_eq!(remembered(), 1);
        for bad in [
            &b"kind: Config\nclusters: {not: a list}\n"[..],
            b"\xff\xfe\x00",
            b"[",
        ] {
            assert!(!known.check(bad), "{bad:?}");
            assert!(
                !known.check(bad),
                "refused again, never remembered: {bad:?}"
            );
        }
        assert_eq!(remembered(), 1);
        // A changed file is a new content, checked again.
        let mut changed = good.to_vec();
        changed.extend_from_slice(b"users: 3\n");
        assert!(!known.check(&changed));
    }

    #[test]
    fn credential_files_are_read_within_the_size_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let small = dir.path().join("small");
        std::fs::write(&small, b"token").expect("write");
        assert_eq!(read_capped(&small).expect("read"), b"token");
        let large = dir.path().join("large");
        let size = usize::try_from(MAX_CREDENTIAL_FILE_BYTES).expect("fits") + 1;
        std::fs::write(&large, vec![b'x'; size]).expect("write");
        assert_eq!(
            read_capped(&large).expect_err("too large").to_string(),
            "too large"
        );
        assert_eq!(
            read_capped(&dir.path().join("missing"))
                .expect_err("missing")
                .kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn files_must_lie_under_a_credential_directory() {
        let roots = [
            PathBuf::from("/etc/vigil"),
            PathBuf::from("/home/u/.kube/config"),
        ];
        let check = |path: &str, expected: bool| {
            assert_eq!(is_under(Path::new(path), &roots), expected, "{path}");
        };
        check("/etc/vigil/token", true);
        check("/etc/vigil/sub/token", true);
        check("/etc/vigil", true);
        check("/home/u/.kube/config", true);
        check("/etc/vigil2/token", false);
        check("/etc/shadow", false);
        check("/home/u/.kube/other", false);
        assert!(!is_under(Path::new("/etc/vigil/token"), &[]));
        assert!(!is_under(
            Path::new("/etc/vigil/token"),
            &[PathBuf::from("relative")]
        ));
    }
}
