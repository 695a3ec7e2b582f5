//! Constructors and names for the contract's result types.

use std::fmt;

use crate::{Failure, PluginInfo, ProbeError, ProbeReport, ReasonClass, Verdict};

impl PluginInfo {
    /// Builds a plugin's description: its name (normally the `.wasm` file name without the
    /// extension), its own version, the reference schemes it handles (`file`, `secret`,
    /// `http`, `https`) and one line saying what it does.
    pub fn new<S: Into<String>>(
        name: impl Into<String>,
        version: impl Into<String>,
        schemes: impl IntoIterator<Item = S>,
        description: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            schemes: schemes.into_iter().map(Into::into).collect(),
            description: description.into(),
        }
    }
}

impl ProbeReport {
    /// The cluster answered correctly; `latency_ms` is how long the decisive request took.
    pub fn healthy(latency_ms: u32) -> Self {
        Self {
            verdict: Verdict::Healthy,
            reason: None,
            message: "the cluster answered".to_owned(),
            latency_ms,
            server_version: None,
            details: Vec::new(),
        }
    }

    /// The cluster was contacted and did not answer correctly, for `reason` (e.g.
    /// [`ReasonClass::Refused`], [`ReasonClass::Timeout`], [`ReasonClass::ServerError`]).
    ///
    /// vigil accepts this verdict only from a call that sent at least one request to the
    /// cluster; otherwise it treats the probe as inconclusive.
    pub fn unhealthy(reason: ReasonClass, message: impl Into<String>, latency_ms: u32) -> Self {
        Self {
            verdict: Verdict::Unhealthy,
            reason: Some(reason),
            message: message.into(),
            latency_ms,
            server_version: None,
            details: Vec::new(),
        }
    }

    /// The cluster is up but refused the credentials (HTTP 401 or 403).
    pub fn credentials_rejected(message: impl Into<String>, latency_ms: u32) -> Self {
        Self {
            verdict: Verdict::CredentialsRejected,
            reason: Some(ReasonClass::Unauthorized),
            message: message.into(),
            latency_ms,
            server_version: None,
            details: Vec::new(),
        }
    }

    /// Replaces the one-line message. Never put secret material in it.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Records the server's version, when the plugin learned it cheaply.
    pub fn with_server_version(mut self, version: impl Into<String>) -> Self {
        self.server_version = Some(version.into());
        self
    }

    /// Adds one fact worth showing (e.g. a failed condition and the value seen).
    pub fn with_detail(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.details.push((key.into(), value.into()));
        self
    }
}

impl ProbeError {
    /// The cluster cannot be probed by this plugin: the reference cannot be resolved
    /// ([`ReasonClass::ReferenceBroken`]) or its credentials are of a kind the plugin cannot
    /// use ([`ReasonClass::ExecCredentials`]). Never counted against the cluster.
    pub fn not_probeable(class: ReasonClass, message: impl Into<String>) -> Self {
        Self::NotProbeable(Failure {
            class,
            message: message.into(),
        })
    }

    /// The plugin could not tell, through its own fault or the environment's (e.g.
    /// [`ReasonClass::Denied`] when a grant is missing, [`ReasonClass::PluginFault`]). Never
    /// counted against the cluster; counted against the plugin.
    pub fn inconclusive(class: ReasonClass, message: impl Into<String>) -> Self {
        Self::Inconclusive(Failure {
            class,
            message: message.into(),
        })
    }

    /// The failure inside, whichever the case.
    pub fn failure(&self) -> &Failure {
        match self {
            Self::NotProbeable(failure) | Self::Inconclusive(failure) => failure,
        }
    }
}

impl ReasonClass {
    /// The stable name of the class, as in the WIT and in vigil's API and metrics
    /// (`refused`, `timeout`, `tls`, …).
    pub fn as_str(self) -> &'static str {
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
        }
    }
}

impl fmt::Display for ReasonClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Verdict {
    /// The verdict's name as in the WIT: `healthy`, `unhealthy`, `credentials-rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
            Self::CredentialsRejected => "credentials-rejected",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_fill_the_reason_the_contract_expects() {
        assert_eq!(ProbeReport::healthy(7).reason, None);
        assert_eq!(
            ProbeReport::credentials_rejected("401", 3).reason,
            Some(ReasonClass::Unauthorized)
        );
        let report = ProbeReport::unhealthy(ReasonClass::Timeout, "slow", 0).with_detail("k", "v");
        assert_eq!(report.verdict, Verdict::Unhealthy);
        assert_eq!(report.details, [("k".to_owned(), "v".to_owned())]);
        let error = ProbeError::not_probeable(ReasonClass::ReferenceBroken, "gone");
        assert_eq!(error.failure().class.as_str(), "reference-broken");
    }
}
