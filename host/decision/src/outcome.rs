use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a probe did not end `healthy`, as a stable string shared by the API, the
/// metrics and the plugin contract (`reason-class` in the WIT package).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonClass {
    /// The connection was refused.
    Refused,
    /// The cluster did not answer within the probe's budget.
    Timeout,
    /// The TLS handshake failed (unknown CA, bad certificate, wrong server name).
    Tls,
    /// The API server's name could not be resolved.
    Dns,
    /// The API server answered with a 5xx status.
    ServerError,
    /// The API server answered, but not with what a healthy server sends.
    BadResponse,
    /// The API server refused our credentials (401 or 403).
    Unauthorized,
    /// The reference could not be resolved: file, context, Secret or key missing, or unparsable.
    ReferenceBroken,
    /// The kubeconfig user needs an exec or auth-provider credential plugin.
    ExecCredentials,
    /// No plugin accepts the cluster's reference.
    NoPlugin,
    /// The plugin failed: trap, CPU deadline, memory limit or malformed result.
    PluginFault,
    /// The plugin asked for something its grants do not allow.
    Denied,
    /// vigil itself could not carry the probe out, before any connection to the cluster:
    /// its own resource limits (file descriptors, local ports, the plugin instance pool),
    /// no local route, a resolver that did not answer. Neither the cluster's fault nor
    /// the plugin's.
    HostFault,
}

impl ReasonClass {
    /// Every reason class, in declaration order.
    pub const ALL: [ReasonClass; 13] = [
        Self::Refused,
        Self::Timeout,
        Self::Tls,
        Self::Dns,
        Self::ServerError,
        Self::BadResponse,
        Self::Unauthorized,
        Self::ReferenceBroken,
        Self::ExecCredentials,
        Self::NoPlugin,
        Self::PluginFault,
        Self::Denied,
        Self::HostFault,
    ];

    /// The stable kebab-case name, e.g. `server-error`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Timeout => "timeout",
            Self::Tls => "tls",
            Self::Dns => "dns",
            Self::ServerError => "server-error",
            Self::BadResponse => "bad-response",
            Self::Unauthorized => "unauthorized",
            Self::ReferenceBroken => "reference-broken",
            Self::ExecCredentials => "exec-credentials",
            Self::NoPlugin => "no-plugin",
            Self::PluginFault => "plugin-fault",
            Self::Denied => "denied",
            Self::HostFault => "host-fault",
        }
    }
}

impl fmt::Display for ReasonClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`ReasonClass`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownReasonClass(pub String);

impl fmt::Display for UnknownReasonClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown reason class `{}`", self.0)
    }
}

impl std::error::Error for UnknownReasonClass {}

impl FromStr for ReasonClass {
    type Err = UnknownReasonClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|class| class.as_str() == s)
            .ok_or_else(|| UnknownReasonClass(s.to_owned()))
    }
}

/// The result of one probe of one cluster (docs/rules.md#outcomes). Exactly one per probe.
///
/// Messages are for operators and must never carry secret material.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum ProbeOutcome {
    /// The cluster answered correctly.
    Healthy,
    /// The cluster was contacted and did not answer correctly. Counts toward the
    /// failure threshold.
    Unhealthy {
        /// What went wrong, as a stable class.
        class: ReasonClass,
        /// A human-readable explanation.
        message: String,
    },
    /// The cluster is up but refuses our credentials (401/403). Not a failure
    /// unless the cluster's policy says `count_auth_failures`.
    CredentialsRejected {
        /// A human-readable explanation.
        message: String,
    },
    /// The cluster cannot be probed: no plugin accepts it, or its reference
    /// cannot be resolved. Never a failure.
    NotProbeable {
        /// `reference-broken`, `exec-credentials`, `no-plugin`, …
        class: ReasonClass,
        /// A human-readable explanation.
        message: String,
    },
    /// The probe itself failed, not the cluster: plugin trap, deadline, memory
    /// limit, malformed result. Never changes the cluster.
    Inconclusive {
        /// Usually `plugin-fault`.
        class: ReasonClass,
        /// A human-readable explanation.
        message: String,
    },
}

impl ProbeOutcome {
    /// A short stable label: `healthy`, `unhealthy`, `credentials-rejected`,
    /// `not-probeable` or `inconclusive`.
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy { .. } => "unhealthy",
            Self::CredentialsRejected { .. } => "credentials-rejected",
            Self::NotProbeable { .. } => "not-probeable",
            Self::Inconclusive { .. } => "inconclusive",
        }
    }

    /// The reason class of a non-healthy outcome.
    pub const fn class(&self) -> Option<ReasonClass> {
        match self {
            Self::Healthy => None,
            Self::CredentialsRejected { .. } => Some(ReasonClass::Unauthorized),
            Self::Unhealthy { class, .. }
            | Self::NotProbeable { class, .. }
            | Self::Inconclusive { class, .. } => Some(*class),
        }
    }

    /// The operator-facing message of a non-healthy outcome.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::Healthy => None,
            Self::Unhealthy { message, .. }
            | Self::CredentialsRejected { message }
            | Self::NotProbeable { message, .. }
            | Self::Inconclusive { message, .. } => Some(message),
        }
    }

    /// Whether the outcome tells something about the cluster itself (it answered,
    /// or was contacted and failed). Only conclusive outcomes feed the brake.
    pub const fn is_conclusive(&self) -> bool {
        matches!(
            self,
            Self::Healthy | Self::Unhealthy { .. } | Self::CredentialsRejected { .. }
        )
    }
}

/// The plugin, and the generation of it, that produced an outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbedBy {
    /// The plugin's name.
    pub plugin: String,
    /// Its generation (each replacement of the plugin is a new one).
    pub generation: u64,
}
