//! The `vigil` binary's integration tests: `vigil serve` and the other commands run as
//! processes (one shared harness, [`process`]), end to end with the first-party plugins and
//! the fake Kubernetes API server.

#![forbid(unsafe_code)]

mod api_bounds;
mod api_guard;
mod audit_plugin;
mod backup;
mod bounds;
mod cli_audit;
mod cli_client;
mod cli_discover;
mod cli_plugin_check;
mod demo;
mod embedded;
mod exec_confinement;
mod exec_credentials;
mod healthcheck;
mod http_plugin;
mod install;
#[cfg(feature = "system-tests")]
mod js_plugin;
mod least_privilege;
#[cfg(feature = "system-tests")]
mod migrate;
#[cfg(feature = "system-tests")]
mod notify;
mod plugins_doc;
mod plugins_e2e;
mod plugins_live;
mod process;
#[cfg(feature = "system-tests")]
mod python_plugin;
mod reload;
#[cfg(feature = "system-tests")]
mod replicas;
mod retention;
mod serve;
mod ssrf;
