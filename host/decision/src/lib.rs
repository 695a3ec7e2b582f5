//! The pure health decisions of vigil.
//!
//! This crate owns the rules of `docs/rules.md`: a cluster's confirmed
//! [`ClusterStatus`], its [`Condition`]s, the [`ProbeOutcome`] of one probe, the
//! per-cluster [`HealthPolicy`], the transition function [`decide`] and the
//! mass-failure brake [`brake::evaluate`].
//!
//! Nothing here does I/O, reads a clock, spawns a task or can fail: time is an
//! input ([`Timestamp`]), and the caller (the engine's worker and store) persists
//! what [`decide`] returns. The crate depends on `serde` only, so that its plain
//! data can be stored and served as JSON by the layers around it.

#![forbid(unsafe_code)]

pub mod brake;
mod outcome;
mod policy;
mod status;
mod time;
mod transition;

pub use brake::{BrakeConfig, BrakeVerdict};
pub use outcome::{ProbeOutcome, ProbedBy, ReasonClass, UnknownReasonClass};
pub use policy::{HealthPolicy, PolicyOverrides};
pub use status::{
    AppId, AppStatus, AppView, ClusterHealth, ClusterId, ClusterStatus, Condition, ConditionType,
    OutageId, UnknownName,
};
pub use time::Timestamp;
pub use transition::{
    Cascade, Decision, HealthEvent, NotCounted, PROBE_STALE_AFTER, ProbeInput, ReplicaView,
    SecondOpinion, counts_as_failure, decide, set_drain_blocked, set_probing_disabled,
};
