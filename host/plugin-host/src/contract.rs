//! The plugin contract (`vigil:plugin`) as the rest of the crate sees it: plain Rust types
//! mirroring what the contract carries, which version it is, and the worlds of every
//! version this host runs behind enums that dispatch to that version's bindings.
//!
//! The generated bindings of each released version live in a module of their own
//! (`since_v0_1_0` for `wit/since_v0.1.0`), beside the conversions between its types and
//! these and the adapters of its host interfaces; no other module names a generated type.
//! The runtime, the sandbox and the outcome rules work with the types below, so a version
//! added later is one new module, a variant of each of [`Version`], [`ProbePre`], [`Probe`],
//! [`AuditPre`] and [`Audit`], and its line in [`add_to_linker`]; the rest of the crate does
//! not change.

mod since_v0_1_0;

use vigil_decision::ReasonClass;
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Engine, Store};

use super::Refusal;
use super::sandbox::CallState;

/// The contract's package name, without version.
const PACKAGE: &str = "vigil:plugin";

/// A version of the contract this host runs: a plugin built against any of them loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// `vigil:plugin@0.1.0` (`wit/since_v0.1.0`).
    V0_1_0,
}

impl Version {
    /// The version an export name carries after its `@`, if this host runs it.
    fn parse(version: &str) -> Option<Self> {
        match version {
            since_v0_1_0::VERSION => Some(Self::V0_1_0),
            _ => None,
        }
    }
}

/// The world a component targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum World {
    /// `probe`: it exports `prober`.
    Probe,
    /// `audit`: it exports `auditor`.
    Audit,
}

/// Checks the component targets a world of a contract version this host runs, by its
/// export names (`vigil:plugin/prober@0.1.0` or `vigil:plugin/auditor@0.1.0`): the world
/// and the version it was built against, or its refusal naming the version it targets.
pub(crate) fn check_world(
    engine: &Engine,
    component: &Component,
) -> Result<(World, Version), Refusal> {
    let ty = component.component_type();
    let names: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let mut audit = None;
    for name in &names {
        let Some(rest) = name.strip_prefix(PACKAGE).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
        let Some(known) = Version::parse(version) else {
            return Err(Refusal::UnsupportedVersion {
                package: PACKAGE.to_owned(),
                version: if version.is_empty() {
                    "(no version)".to_owned()
                } else {
                    version.to_owned()
                },
            });
        };
        match interface {
            "prober" => return Ok((World::Probe, known)),
            "auditor" => audit = Some(known),
            _ => {}
        }
    }
    if let Some(version) = audit {
        return Ok((World::Audit, version));
    }
    Err(Refusal::WrongWorld {
        exports: if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        },
    })
}

/// Adds the host interfaces of every contract version (`types`, `log`, `credentials`,
/// `http`) to `linker`, so that one linker serves plugins of any version and world.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    since_v0_1_0::add_to_linker(linker)
}

/// A probe plugin ready to instantiate, for the contract version it was built against.
pub(crate) enum ProbePre {
    /// Built against `vigil:plugin@0.1.0`.
    V0_1_0(since_v0_1_0::ProbePre<CallState>),
}

impl ProbePre {
    /// Checks that the linked component exports the probe world of `version`.
    pub(crate) fn new(version: Version, pre: InstancePre<CallState>) -> wasmtime::Result<Self> {
        match version {
            Version::V0_1_0 => since_v0_1_0::ProbePre::new(pre).map(Self::V0_1_0),
        }
    }

    /// A fresh instance in `store`, for one call.
    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<Probe> {
        match self {
            Self::V0_1_0(pre) => pre.instantiate_async(store).await.map(Probe::V0_1_0),
        }
    }
}

/// An instance of a probe plugin: the calls of its `prober` export, in the types above.
pub(crate) enum Probe {
    /// Built against `vigil:plugin@0.1.0`.
    V0_1_0(since_v0_1_0::Probe),
}

impl Probe {
    /// `info()`: who the plugin is.
    pub(crate) async fn info(&self, store: &mut Store<CallState>) -> wasmtime::Result<PluginInfo> {
        match self {
            Self::V0_1_0(instance) => since_v0_1_0::prober_info(instance, store).await,
        }
    }

    /// `accepts(cluster)`: whether the plugin can probe `cluster`.
    pub(crate) async fn accepts(
        &self,
        store: &mut Store<CallState>,
        cluster: Cluster,
    ) -> wasmtime::Result<bool> {
        match self {
            Self::V0_1_0(instance) => since_v0_1_0::prober_accepts(instance, store, cluster).await,
        }
    }

    /// `probe(request)`: one probe; the outer error is a trap, the inner one the plugin's
    /// answer that it reached no verdict.
    pub(crate) async fn probe(
        &self,
        store: &mut Store<CallState>,
        request: ProbeRequest,
    ) -> wasmtime::Result<Result<ProbeReport, ProbeError>> {
        match self {
            Self::V0_1_0(instance) => since_v0_1_0::prober_probe(instance, store, request).await,
        }
    }
}

/// An audit plugin ready to instantiate, for the contract version it was built against.
pub(crate) enum AuditPre {
    /// Built against `vigil:plugin@0.1.0`.
    V0_1_0(since_v0_1_0::AuditPre<CallState>),
}

impl AuditPre {
    /// Checks that the linked component exports the audit world of `version`.
    pub(crate) fn new(version: Version, pre: InstancePre<CallState>) -> wasmtime::Result<Self> {
        match version {
            Version::V0_1_0 => since_v0_1_0::AuditPre::new(pre).map(Self::V0_1_0),
        }
    }

    /// A fresh instance in `store`, for one call.
    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<Audit> {
        match self {
            Self::V0_1_0(pre) => pre.instantiate_async(store).await.map(Audit::V0_1_0),
        }
    }
}

/// An instance of an audit plugin: the calls of its `auditor` export, in the types above.
pub(crate) enum Audit {
    /// Built against `vigil:plugin@0.1.0`.
    V0_1_0(since_v0_1_0::Audit),
}

impl Audit {
    /// `info()`: who the plugin is.
    pub(crate) async fn info(&self, store: &mut Store<CallState>) -> wasmtime::Result<PluginInfo> {
        match self {
            Self::V0_1_0(instance) => since_v0_1_0::auditor_info(instance, store).await,
        }
    }

    /// `accepts(cluster)`: whether the plugin can audit `cluster`.
    pub(crate) async fn accepts(
        &self,
        store: &mut Store<CallState>,
        cluster: Cluster,
    ) -> wasmtime::Result<bool> {
        match self {
            Self::V0_1_0(instance) => since_v0_1_0::auditor_accepts(instance, store, cluster).await,
        }
    }

    /// `audit(cluster)`: one audit; the outer error is a trap, the inner one the plugin's
    /// answer that it could not read what it needed.
    pub(crate) async fn audit(
        &self,
        store: &mut Store<CallState>,
        cluster: Cluster,
    ) -> wasmtime::Result<Result<AuditReport, AuditError>> {
        match self {
            Self::V0_1_0(instance) => since_v0_1_0::auditor_audit(instance, store, cluster).await,
        }
    }
}

/// A cluster as vigil hands it to a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cluster {
    /// The cluster's unique name in vigil.
    pub(crate) name: String,
    /// The API server address vigil recorded.
    pub(crate) endpoint: String,
    /// Where the cluster's credentials are, as the reference is written.
    pub(crate) reference: String,
    /// The cluster's labels.
    pub(crate) labels: Vec<(String, String)>,
    /// The plugin's plain parameters for the cluster (credential references left out).
    pub(crate) parameters: Vec<(String, String)>,
}

/// One probe to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeRequest {
    /// The cluster to probe.
    pub(crate) cluster: Cluster,
    /// The whole budget of the call, in milliseconds.
    pub(crate) timeout_ms: u32,
}

/// What a probe found, when it reached a conclusion about the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The cluster answered correctly.
    Healthy,
    /// The cluster was contacted and did not answer correctly.
    Unhealthy,
    /// The cluster is up but refused the credentials (401/403).
    CredentialsRejected,
}

/// The result of a probe that reached a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeReport {
    /// The verdict.
    pub(crate) verdict: Verdict,
    /// Why, for a verdict other than `healthy`.
    pub(crate) reason: Option<ReasonClass>,
    /// A one-line explanation for operators.
    pub(crate) message: String,
    /// How long the decisive request took, in milliseconds.
    pub(crate) latency_ms: u32,
    /// The server's version, when the plugin learned it cheaply.
    pub(crate) server_version: Option<String>,
    /// Extra facts worth showing.
    pub(crate) details: Vec<(String, String)>,
}

/// Why a probe or an audit reached no verdict about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The reason class.
    pub(crate) class: ReasonClass,
    /// A one-line explanation for operators.
    pub(crate) message: String,
}

/// A probe that reached no verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// The cluster cannot be probed by this plugin.
    NotProbeable(Failure),
    /// The plugin could not tell.
    Inconclusive(Failure),
}

/// Who a plugin is, as its `info()` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginInfo {
    /// The plugin's name for itself.
    pub(crate) name: String,
    /// The plugin's own version.
    pub(crate) version: String,
    /// The reference schemes it handles.
    pub(crate) schemes: Vec<String>,
    /// One line saying what it does.
    pub(crate) description: String,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// It blocks node drains now.
    Blocking,
    /// It will likely cause trouble.
    Warning,
    /// Worth knowing.
    Info,
}

/// A Kubernetes object named by a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectRef {
    /// Its kind.
    pub(crate) kind: String,
    /// Its namespace, for namespaced kinds.
    pub(crate) namespace: Option<String>,
    /// Its name.
    pub(crate) name: String,
}

/// One thing an audit found, as the plugin reported it (unchecked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// A stable code.
    pub(crate) code: String,
    /// How much it matters.
    pub(crate) severity: Severity,
    /// The objects involved.
    pub(crate) objects: Vec<ObjectRef>,
    /// One line saying what is wrong.
    pub(crate) message: String,
    /// One line saying how to fix it.
    pub(crate) fix: String,
}

/// The result of an audit that could read everything it needed, as the plugin reported it
/// (unchecked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditReport {
    /// What it found.
    pub(crate) findings: Vec<Finding>,
    /// The kinds it read.
    pub(crate) kinds_read: Vec<String>,
}

/// An audit that could not read something it needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditError {
    /// The kind it could not read, if that is the cause.
    pub(crate) kind: Option<String>,
    /// Why.
    pub(crate) failure: Failure,
}

/// How important a `log.write` message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Useful when debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something looks wrong.
    Warn,
    /// Something failed.
    Error,
}

/// Why a `credentials` read was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CredentialsError {
    /// The grant does not allow it, or the path is not one the reference names.
    Denied(String),
    /// The file, Secret or key does not exist.
    NotFound(String),
    /// It exists but is not usable.
    Invalid(String),
    /// The selected context's user needs an `exec` or `auth-provider` plugin.
    ExecCredentials(String),
}

/// What a kubeconfig user's `exec` command gave, as `credentials.exec-credential` serves
/// it. No `Debug`: it holds a token or a key.
#[derive(Clone)]
pub(crate) struct ExecCredential {
    /// The bearer token.
    pub(crate) token: Option<String>,
    /// The client certificate (PEM).
    pub(crate) client_certificate: Option<Vec<u8>>,
    /// The client certificate's private key (PEM).
    pub(crate) client_key: Option<Vec<u8>>,
    /// When it expires, in seconds since the Unix epoch.
    pub(crate) expires_at: Option<u64>,
}

/// Where one piece of a served context's credentials is. No `Debug`: it may hold a key or
/// a token, which must never reach a log line by accident.
pub(crate) enum Material {
    /// The bytes themselves.
    Data(Vec<u8>),
    /// An absolute path, to read with `credentials.read-file`.
    File(String),
}

/// A kubeconfig context as vigil resolved it and serves it to `credentials.context`. No
/// `Debug`, for the same reason as [`Material`].
pub(crate) struct KubeContext {
    /// The context's name.
    pub(crate) context: String,
    /// The name of the context's cluster entry.
    pub(crate) cluster: String,
    /// The name of the context's user entry, if any.
    pub(crate) user: Option<String>,
    /// The API server URL.
    pub(crate) server: String,
    /// The name to verify the server's certificate against, when not the URL's host.
    pub(crate) tls_server_name: Option<String>,
    /// Whether the server's certificate is not verified at all.
    pub(crate) insecure_skip_tls_verify: bool,
    /// The certificate authority to trust.
    pub(crate) certificate_authority: Option<Material>,
    /// The client certificate, for mutual TLS.
    pub(crate) client_certificate: Option<Material>,
    /// The client certificate's private key.
    pub(crate) client_key: Option<Material>,
    /// The bearer token.
    pub(crate) token: Option<Material>,
}

/// TLS settings of one `http.send` request. No `Debug`: it may carry a private key.
pub(crate) struct TlsOptions {
    /// CA certificates to trust (PEM); none means the system roots.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// Client certificate chain (PEM), for mutual TLS.
    pub(crate) client_certificate_pem: Option<Vec<u8>>,
    /// The client certificate's private key (PEM).
    pub(crate) client_key_pem: Option<Vec<u8>>,
    /// The name to verify the server's certificate against.
    pub(crate) server_name: Option<String>,
    /// Accept any server certificate.
    pub(crate) insecure_skip_verify: bool,
}

/// One `http.send` request. No `Debug`: its headers and body may carry credentials.
pub(crate) struct HttpRequest {
    /// `GET`, `HEAD`, `POST`, …
    pub(crate) method: String,
    /// The absolute URL.
    pub(crate) url: String,
    /// Request headers.
    pub(crate) headers: Vec<(String, String)>,
    /// The body, if any.
    pub(crate) body: Option<Vec<u8>>,
    /// TLS settings, for `https` URLs.
    pub(crate) tls: Option<TlsOptions>,
    /// A tighter bound than what is left of the call's budget, if wanted.
    pub(crate) timeout_ms: Option<u32>,
}

/// The answer to an `http.send` request. No `Debug`: its body may carry credentials.
pub(crate) struct HttpResponse {
    /// The HTTP status.
    pub(crate) status: u16,
    /// Response headers.
    pub(crate) headers: Vec<(String, String)>,
    /// The body, capped by the host.
    pub(crate) body: Vec<u8>,
    /// How long the request took, in milliseconds.
    pub(crate) latency_ms: u32,
}

/// Why an `http.send` request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HttpError {
    /// Egress to this host is not allowed.
    Denied(String),
    /// No answer within the budget.
    Timeout,
    /// The connection was refused.
    Refused(String),
    /// The TLS handshake failed.
    Tls(String),
    /// The host name could not be resolved.
    Dns(String),
    /// Anything else on the wire.
    Protocol(String),
    /// The response body exceeded the host's limit.
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supported_contract_is_a_version_this_host_runs() {
        let (package, version) = crate::SUPPORTED_CONTRACT
            .split_once('@')
            .expect("package@version");
        assert_eq!(package, PACKAGE);
        assert_eq!(Version::parse(version), Some(Version::V0_1_0));
        assert_eq!(Version::parse("0.9.0"), None);
        assert_eq!(Version::parse(""), None);
    }
}
