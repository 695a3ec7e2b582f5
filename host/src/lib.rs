//! vigil, the cluster health engine: discovery, store, health worker and the
//! command line around the pure decisions of [`vigil_decision`].

pub mod address_rule;
pub mod api;
pub mod audit_cli;
pub mod auditing;
pub mod cli;
pub mod client;
pub mod discovery;
pub mod discovery_preview;
pub mod lock;
pub mod metrics;
pub mod open_files;
pub mod plugin_check;
pub mod plugin_watch;
pub mod reference;
pub mod retention;
pub mod runtime;
pub mod secrets;
pub mod serve;
pub mod tls;
pub mod worker;
