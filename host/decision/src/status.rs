use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// A name that is not one of the expected values of an enumeration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being parsed, e.g. `cluster status`.
    pub what: &'static str,
    /// The offending text.
    pub value: String,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} `{}`", self.what, self.value)
    }
}

impl std::error::Error for UnknownName {}

/// Declares a fieldless enum with a stable text form used in the database, the
/// API and logs, with `as_str`, `Display`, `FromStr` and an `ALL` list.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable text form.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownName { what: $what, value: s.to_owned() }),
                }
            }
        }
    };
}

named_enum! {
    /// The last *confirmed* state of a cluster (docs/rules.md#statuses). Only the status drives
    /// cascades and deployment guards.
    pub enum ClusterStatus as "cluster status" {
        /// The cluster answered its last conclusive probes.
        Online => "ONLINE",
        /// An outage confirmed by the failure threshold.
        Offline => "OFFLINE",
        /// Never conclusively probed. A confirmed cluster never returns here.
        Unknown => "UNKNOWN",
    }
}

named_enum! {
    /// What a [`Condition`] is about. Conditions inform; they never drive cascades.
    pub enum ConditionType as "condition type" {
        /// The reference cannot be resolved (file, context, Secret or key missing, unparsable).
        ReferenceBroken => "reference-broken",
        /// The cluster cannot be probed for another reason (no plugin, exec credentials).
        NotProbeable => "not-probeable",
        /// The cluster refuses our credentials (401/403).
        CredentialsRejected => "credentials-rejected",
        /// The last probes were all inconclusive: the status may be stale.
        ProbeStale => "probe-stale",
        /// Probing is disabled by the cluster's policy.
        ProbingDisabled => "probing-disabled",
        /// A drain-readiness audit found something that blocks node drains.
        DrainBlocked => "drain-blocked",
    }
}

named_enum! {
    /// The status of an app deployed on a cluster.
    pub enum AppStatus as "app status" {
        /// Registered, not yet deployed.
        Pending => "PENDING",
        /// Deployed and believed to run.
        Deployed => "DEPLOYED",
        /// Degraded, by a cluster outage (with a marker) or by the platform.
        Degraded => "DEGRADED",
        /// The deployment failed.
        Failed => "FAILED",
    }
}

/// A condition on a cluster, Kubernetes style.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// What the condition is about.
    #[serde(rename = "type")]
    pub kind: ConditionType,
    /// A short machine-readable reason, usually a [`crate::ReasonClass`] name.
    pub reason: String,
    /// A human-readable explanation (never secret material).
    pub message: String,
    /// When the condition was first set with this reason.
    pub since: Timestamp,
}

/// The database id of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClusterId(pub i64);

/// The database id of an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AppId(pub i64);

/// The database id of an outage (one confirmed ONLINE→OFFLINE episode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OutageId(pub i64);

/// What the decision needs to know of an app: where it is, its status, and
/// which outage (if any) degraded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppView {
    /// The app.
    pub id: AppId,
    /// The cluster the app is assigned to.
    pub cluster: ClusterId,
    /// Its current status.
    pub status: AppStatus,
    /// The outage that degraded it, set only by this engine's cascade.
    pub degraded_by: Option<OutageId>,
}

/// Everything the transition function reads and writes about one cluster's
/// health. The store persists all of it, so a restart loses nothing
/// (docs/rules.md#restart-loses-nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterHealth {
    /// The last confirmed status.
    pub status: ClusterStatus,
    /// Current conditions, at most one per [`ConditionType`], sorted by type.
    pub conditions: Vec<Condition>,
    /// Consecutive counted failures since the last healthy probe.
    pub consecutive_failures: u32,
    /// Consecutive healthy probes while OFFLINE (toward `success_threshold`).
    pub consecutive_successes: u32,
    /// Consecutive inconclusive probes (3 in a row set `probe-stale`).
    pub consecutive_inconclusive: u32,
    /// When the last failure was counted (for the failure spacing).
    pub last_counted_failure: Option<Timestamp>,
    /// When the cluster was first registered (start period).
    pub first_seen: Timestamp,
    /// When the cluster was last probed (any outcome).
    pub last_probe: Option<Timestamp>,
    /// When the cluster last answered healthy.
    pub last_success: Option<Timestamp>,
    /// The outage opened by the last ONLINE→OFFLINE transition, while it lasts.
    pub open_outage: Option<OutageId>,
}

impl ClusterHealth {
    /// The health of a cluster registered at `first_seen`: UNKNOWN, no history.
    pub fn new(first_seen: Timestamp) -> Self {
        Self {
            status: ClusterStatus::Unknown,
            conditions: Vec::new(),
            consecutive_failures: 0,
            consecutive_successes: 0,
            consecutive_inconclusive: 0,
            last_counted_failure: None,
            first_seen,
            last_probe: None,
            last_success: None,
            open_outage: None,
        }
    }

    /// The condition of the given type, if set.
    pub fn condition(&self, kind: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// Whether a condition of the given type is set.
    pub fn has_condition(&self, kind: ConditionType) -> bool {
        self.condition(kind).is_some()
    }
}
