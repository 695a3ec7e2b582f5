//! The trait a probe plugin implements, and the adapter [`crate::register!`] exports.

use std::marker::PhantomData;

use crate::bindings::exports::vigil::plugin::prober::Guest;
use crate::reference::Reference;
use crate::{Cluster, PluginInfo, ProbeError, ProbeReport, ProbeRequest};

/// A probe plugin: tells whether clusters are up.
///
/// Implement it on a type of your own (a unit struct is enough) and export it with
/// [`crate::register!`]. vigil calls each function in a fresh instance of the plugin, so
/// nothing carries over from one call to the next: there is no `self`.
///
/// What to return from [`ProbePlugin::probe`], in short (the contract says it in full):
///
/// | what happened | return |
/// |---|---|
/// | the cluster answered correctly | [`ProbeReport::healthy`] |
/// | the cluster was contacted and answered wrongly, or not at all (refused, timeout, TLS, 5xx) | [`ProbeReport::unhealthy`] |
/// | the cluster refused the credentials (401/403) | [`ProbeReport::credentials_rejected`] |
/// | the reference or its credentials cannot be used | [`ProbeError::not_probeable`] |
/// | the plugin could not tell (its own fault, or a denied host call) | [`ProbeError::inconclusive`] |
///
/// vigil accepts `unhealthy` only from a call that actually sent a request to the cluster:
/// a plugin cannot call a cluster down without having talked to it.
pub trait ProbePlugin {
    /// Who the plugin is: name, version, the reference schemes it handles and one line of
    /// description. Called when vigil loads the plugin; it must answer quickly and must not
    /// call the host.
    fn info() -> PluginInfo;

    /// Whether the plugin can probe this cluster. vigil asks when it routes a probe and has
    /// no answer yet, not before every probe: an answer is remembered for the cluster, this
    /// generation of the plugin and what the plugin is shown of the cluster. A call that
    /// traps or overruns its deadline is no answer: it counts against the plugin and is
    /// asked again at the next probe.
    ///
    /// The default accepts a cluster whose reference parses (see [`Reference::parse`]) and
    /// whose scheme ([`Reference::scheme`]: `file`, `secret`, `http` or `https`) is one of the
    /// schemes listed by [`ProbePlugin::info`].
    fn accepts(cluster: &Cluster) -> bool {
        Reference::parse(&cluster.reference)
            .is_ok_and(|reference| Self::info().schemes.iter().any(|s| s == reference.scheme()))
    }

    /// Probes the cluster once, within `request.timeout_ms`. Every host call is bounded by
    /// what is left of that budget, so a plugin need not time itself.
    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError>;
}

/// Adapts a [`ProbePlugin`] to the trait that `wit-bindgen` generated for the `prober`
/// export. Used by [`crate::register!`] only.
#[derive(Debug)]
pub struct ProbeExport<T>(PhantomData<T>);

impl<T: ProbePlugin> Guest for ProbeExport<T> {
    fn info() -> PluginInfo {
        T::info()
    }

    fn accepts(cluster: Cluster) -> bool {
        T::accepts(&cluster)
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        T::probe(request)
    }
}
