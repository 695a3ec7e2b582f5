//! What blocks node drains: Kubernetes' disruption-budget arithmetic, its validation and
//! eviction rules, and vigil's drain-readiness findings, written once for the `pdb-audit`
//! plugin (live clusters, compiled to `wasm32-wasip2`) and for `vigil audit` (manifest
//! files, on the host).
//!
//! A PodDisruptionBudget only governs *voluntary* evictions (the eviction API: `kubectl
//! drain`, node-pool upgrades, the cluster autoscaler). One that allows no eviction keeps a
//! drain waiting forever on its pods. This crate reproduces exactly what Kubernetes computes,
//! each rule naming the Kubernetes source file and function it mirrors:
//!
//! - [`intstr`]: `minAvailable`/`maxUnavailable` values and their rounding;
//! - [`selector`]: label selectors (a nil selector matches nothing, an empty one the whole
//!   namespace);
//! - [`disruption`]: the disruption controller's expected pods, desired and current healthy
//!   pods, and allowed disruptions;
//! - [`validation`]: what the API server refuses in a budget;
//! - [`eviction`]: what the eviction API answers for a pod;
//! - [`findings`]: the findings ([`audit`]), with stable [`codes`];
//! - [`manifest`]: multi-document manifest files as Helm renders them.
//!
//! Pure: no I/O, no clock, no bindings. Objects are read into the small serde types of
//! [`model`], from the API's JSON or from YAML.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod disruption;
pub mod eviction;
pub mod findings;
pub mod intstr;
pub mod manifest;
pub mod model;
pub mod selector;
pub mod validation;

pub use findings::{
    BudgetNumbers, ExpectedPods, Finding, NumbersFrom, ObjectRef, Severity, Source,
    WorkloadReplicas, audit, codes,
};
pub use intstr::IntOrString;
pub use manifest::Manifests;
pub use model::ClusterObjects;
