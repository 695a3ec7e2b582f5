//! The health engine of vigil, around the pure decisions of [`vigil_decision`] and the
//! store of [`vigil_store`]:
//!
//! - [`worker`]: probes each cluster when it is due, under a concurrency bound, through
//!   any [`vigil_domain::probe::Prober`], and applies every result whole, alone (results
//!   that arrive together share a commit, each in its own savepoint);
//! - [`discovery`]: what the kubeconfig sources define, upserted into the store;
//!   [`discovery_preview`]: the same, planned and never written;
//! - [`auditing`]: drain-readiness audits of the ONLINE clusters, through an [`auditing::Auditor`];
//! - [`retention`]: the history pruned on a schedule;
//! - [`sharing`]: work with one owner among replicas sharing a database;
//! - [`metrics`]: the Prometheus metrics.
//!
//! The engine knows neither WebAssembly nor HTTP serving: the plugin runtime and the
//! REST API are put around it by the `vigil` binary.

#![forbid(unsafe_code)]

pub mod auditing;
pub mod discovery;
pub mod discovery_preview;
pub mod metrics;
pub mod retention;
pub mod sharing;
pub mod worker;
