//! vigil, the cluster health engine: the command line and the composition of its crates.
//!
//! - [`cli`]: the command line (clap) and how it becomes the configuration;
//! - [`serve`]: `vigil serve`, the engine of [`vigil_engine`] with the plugin runtime of
//!   [`vigil_plugin_host`] and the REST API of [`vigil_api`];
//! - [`client`]: the API client of `vigil status` and `vigil probe --apply`;
//! - [`audit_cli`]: `vigil audit -f`, the drain rules on manifest files;
//! - [`build_info`]: the plugins built into the binary, and `vigil --version`;
//! - [`plugin_check`]: `vigil plugin check`;
//! - [`open_files`]: the open-files limit `vigil serve` needs;
//! - [`backup_cli`]: `vigil backup`, a copy of the SQLite store while it runs;
//! - [`healthcheck`]: `vigil healthcheck`, the probes of a local vigil without curl.

#![forbid(unsafe_code)]

pub mod audit_cli;
pub mod backup_cli;
pub mod build_info;
pub mod cli;
pub mod client;
pub mod config;
pub mod healthcheck;
pub mod open_files;
pub mod output;
pub mod plugin_check;
pub mod serve;
