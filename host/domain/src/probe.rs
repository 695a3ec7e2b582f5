//! What a probe is, seen from the engine: one cluster to probe ([`ProbeTarget`]), a way
//! to probe it ([`Prober`]), and what came back ([`Probed`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vigil_decision::{ClusterId, ProbeOutcome, ProbedBy, ReasonClass, Timestamp};

use crate::reference::{self, ConnectionMaterial, Reference};

/// The current wall-clock time. The only place the engine reads the clock for
/// health decisions, so that every decision of one probe uses one instant.
pub fn wall_clock() -> Timestamp {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp(millis)
}

/// One cluster to probe, as handed to a [`Prober`].
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    /// The cluster's id.
    pub cluster: ClusterId,
    /// The cluster's name.
    pub name: String,
    /// The recorded API server address.
    pub endpoint: String,
    /// The parsed reference.
    pub reference: Reference,
    /// The connection material, when the host resolved a file reference.
    pub connection: Option<Box<ConnectionMaterial>>,
    /// The plugin explicitly chosen for the cluster, if any.
    pub plugin: Option<String>,
    /// How long the probe may take; past it the cluster has timed out.
    pub timeout: Duration,
    /// The cluster's labels.
    pub labels: BTreeMap<String, String>,
    /// The cluster's own plugin parameters (a plugin's defaults go under them). Credential
    /// values are references (`file:///…`, `secret://…`), resolved only by the plugin
    /// runtime, and only when the plugin asks.
    pub parameters: BTreeMap<String, String>,
}

/// A way to probe a cluster. It must answer within `target.timeout`; the
/// worker gives it a grace period more and then abandons it as inconclusive.
pub trait Prober: Send + Sync + 'static {
    /// Probes one cluster once.
    fn probe(&self, target: &ProbeTarget) -> impl Future<Output = ProbeOutcome> + Send;

    /// Probes one cluster once, saying which plugin generation produced the outcome.
    /// The default says nothing: only the plugin runtime routes to plugins.
    fn probe_attributed(&self, target: &ProbeTarget) -> impl Future<Output = Probed> + Send {
        async move {
            Probed {
                outcome: self.probe(target).await,
                by: None,
            }
        }
    }

    /// Where the files of file references may really lie: the kubeconfig files, and the
    /// files they name; every file the host opens for one is checked on its real path
    /// ([`reference::resolve_bounded`]). The default bounds no kubeconfig file (only the
    /// plugin runtime serves files to plugins) and allows named files only in their
    /// kubeconfig's own directory.
    fn file_bounds(&self) -> reference::FileBounds {
        reference::FileBounds::default()
    }
}

/// An outcome and the plugin generation that produced it, if a plugin answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    /// The outcome.
    pub outcome: ProbeOutcome,
    /// The plugin generation that produced it.
    pub by: Option<ProbedBy>,
}

impl Probed {
    /// An outcome no plugin produced (the host's own: unresolvable reference, timeout).
    pub fn host(outcome: ProbeOutcome) -> Self {
        Self { outcome, by: None }
    }
}

/// The prober of an engine with no probe plugin loaded: every reference the
/// host resolved is not probeable for want of a plugin, never a failure.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPlugins;

impl Prober for NoPlugins {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::NoPlugin,
            message: format!(
                "no probe plugin is loaded for {} references",
                match target.reference {
                    Reference::File { .. } => "kubeconfig file",
                    Reference::Secret { .. } => "secret://",
                    Reference::Http { .. } => "http(s)://",
                }
            ),
        }
    }
}

/// An error and its sources on one line.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
