//! The host domain of vigil: what the engine, the plugin runtime, the API and the command
//! line share without knowing SQL, WebAssembly or HTTP serving.
//!
//! - [`reference`]: the `kubeconfig_secret_ref` of a cluster, parsed and resolved into the
//!   connection material a probe needs;
//! - [`discovery`]: the kubeconfig sources, read into one cluster per context, and watched;
//! - [`exec`]: kubeconfig users whose credentials come from an `exec` command, and the
//!   operator's rules for running one;
//! - [`secrets`]: Secrets read from the management cluster for `secret://` references;
//! - [`tls`]: the TLS client configurations probes and the API client use;
//! - [`address_rule`]: where registered clusters may point vigil;
//! - [`parameter`]: plugin parameters, and which of them are credential references;
//! - [`probe`]: what a probe is, seen from the engine ([`probe::Prober`]).

#![forbid(unsafe_code)]

pub mod address_rule;
pub mod discovery;
pub mod exec;
pub mod parameter;
pub mod probe;
pub mod reference;
pub mod secrets;
pub mod tls;
pub mod trust;
