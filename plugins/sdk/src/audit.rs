//! The trait an audit plugin implements, the adapter [`crate::register_audit!`] exports, and
//! constructors for audit results.

use std::marker::PhantomData;

use crate::bindings::audit::exports::vigil::plugin::auditor::Guest;
use crate::reference::Reference;
use crate::{
    AuditError, AuditReport, Cluster, Failure, Finding, ObjectRef, PluginInfo, ReasonClass,
    Severity,
};

/// An audit plugin: reports what in a cluster would block node drains.
///
/// Implement it on a type of your own (a unit struct is enough) and export it with
/// [`crate::register_audit!`]. vigil calls each function in a fresh instance of the plugin,
/// so nothing carries over from one call to the next: there is no `self`.
///
/// What to return from [`AuditPlugin::audit`]:
///
/// | what happened | return |
/// |---|---|
/// | every kind needed was read | [`AuditReport::new`] with the findings (none when all is well) and the kinds read |
/// | a kind could not be read (403, timeout, …) | [`AuditError::unreadable`] naming the kind |
/// | the reference or its credentials cannot be used | [`AuditError::failure`] |
///
/// vigil keeps a cluster's previous findings when an audit fails, so an error never clears
/// a finding that may still be true.
pub trait AuditPlugin {
    /// Who the plugin is: name, version, the reference schemes it handles and one line of
    /// description. Called when vigil loads the plugin; it must answer quickly and must not
    /// call the host.
    fn info() -> PluginInfo;

    /// Whether the plugin can audit this cluster.
    ///
    /// The default accepts a cluster whose reference parses and whose scheme is one of the
    /// schemes listed by [`AuditPlugin::info`].
    fn accepts(cluster: &Cluster) -> bool {
        Reference::parse(&cluster.reference)
            .is_ok_and(|reference| Self::info().schemes.iter().any(|s| s == reference.scheme()))
    }

    /// Audits the cluster once. Every host call is bounded by what is left of the call's
    /// budget.
    fn audit(cluster: Cluster) -> Result<AuditReport, AuditError>;
}

/// Adapts an [`AuditPlugin`] to the trait that `wit-bindgen` generated for the `auditor`
/// export. Used by [`crate::register_audit!`] only.
#[derive(Debug)]
pub struct AuditExport<T>(PhantomData<T>);

impl<T: AuditPlugin> Guest for AuditExport<T> {
    fn info() -> PluginInfo {
        T::info()
    }

    fn accepts(cluster: Cluster) -> bool {
        T::accepts(&cluster)
    }

    fn audit(cluster: Cluster) -> Result<AuditReport, AuditError> {
        T::audit(cluster)
    }
}

impl AuditReport {
    /// A successful audit: what it found and the kinds it read (e.g. `pods`).
    pub fn new<S: Into<String>>(
        findings: Vec<Finding>,
        kinds_read: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            findings,
            kinds_read: kinds_read.into_iter().map(Into::into).collect(),
        }
    }
}

impl AuditError {
    /// The audit could not read `kind` (e.g. `pods`), for `class` (e.g.
    /// [`ReasonClass::Unauthorized`] for a 403).
    pub fn unreadable(
        kind: impl Into<String>,
        class: ReasonClass,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind: Some(kind.into()),
            failure: Failure {
                class,
                message: message.into(),
            },
        }
    }

    /// The audit failed for a reason that is not one kind's (a broken reference, a denied
    /// host call).
    pub fn failure(class: ReasonClass, message: impl Into<String>) -> Self {
        Self {
            kind: None,
            failure: Failure {
                class,
                message: message.into(),
            },
        }
    }
}

impl Finding {
    /// A finding: its stable code, severity, the objects involved, one line of explanation
    /// and one line of fix.
    pub fn new(
        code: impl Into<String>,
        severity: Severity,
        objects: Vec<ObjectRef>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            code: code.into(),
            severity,
            objects,
            message: message.into(),
            fix: fix.into(),
        }
    }
}
