//! Write [vigil](https://example.invalid/vigil) probe and audit plugins in Rust.
//!
//! A vigil plugin is a WebAssembly component, built with
//! `cargo build --release --target wasm32-wasip2`, that vigil loads from its plugin directory
//! and calls once per probe in a fresh sandbox. This crate is everything a plugin needs:
//!
//! - the bindings of the contract (`wit/since_v0.1.0/plugin.wit`, package
//!   `vigil:plugin@0.1.0`), re-exported under friendly names ([`Cluster`], [`ProbeRequest`],
//!   [`ProbeReport`], [`ProbeError`], …) with constructors for the common results;
//! - the [`ProbePlugin`] trait and the [`register!`] macro that exports it, and for the
//!   `audit` world (what blocks node drains) the [`AuditPlugin`] trait and
//!   [`register_audit!`];
//! - [`kubeconfig`]: typed kubeconfig structs and [`kubeconfig::select`], which picks the
//!   context, cluster, user, server and TLS material exactly as vigil's host does;
//! - [`reference`](mod@reference): parsing of cluster references (`/path/config#context`, `secret://…`,
//!   `http(s)://…`);
//! - host calls: [`log`] (and the [`info!`]-style macros), [`credentials`], [`http`], and
//!   [`apiserver`], which turns a kubeconfig selection into ready-to-send requests and lists
//!   large collections page by page ([`apiserver::ApiServer::list`]).
//!
//! # A complete plugin
//!
//! ```no_run
//! use vigil_plugin_sdk::{
//!     PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass, http,
//! };
//!
//! /// Says a health URL is healthy when it answers 200.
//! struct Ping;
//!
//! impl ProbePlugin for Ping {
//!     fn info() -> PluginInfo {
//!         PluginInfo::new("ping", env!("CARGO_PKG_VERSION"), ["https"], "GETs a health URL")
//!     }
//!
//!     // `accepts` defaults to the schemes listed by `info`: `https://…` references.
//!
//!     fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
//!         match http::get(&request.cluster.reference, None, &[]) {
//!             Ok(response) if response.status == 200 => {
//!                 Ok(ProbeReport::healthy(response.latency_ms))
//!             }
//!             Ok(response) => Ok(ProbeReport::unhealthy(
//!                 ReasonClass::BadResponse,
//!                 format!("status {}", response.status),
//!                 response.latency_ms,
//!             )),
//!             // Refused, timeout, TLS, DNS: unhealthy; denied by vigil: inconclusive.
//!             Err(error) => error.probe_result(),
//!         }
//!     }
//! }
//!
//! vigil_plugin_sdk::register!(Ping);
//! ```
//!
//! The crate needs `crate-type = ["cdylib"]` in its `[lib]` section; vigil also wants a
//! `NAME.toml` beside `NAME.wasm` granting the host interfaces the plugin calls
//! (`log = true`, `credentials = true`, `http = true`): every grant is denied by default.
//!
//! # Getting started
//!
//! `examples/plugin-template` in vigil's repository is a complete plugin to copy: a crate
//! of its own that depends on this one by path and builds with plain
//! `cargo build --release --target wasm32-wasip2`. `PLUGINS.md` at the repository's root
//! walks through writing, building, checking (`vigil plugin check FILE.wasm`) and
//! installing a plugin, and lists every key of `NAME.toml`.
//!
//! # What a probe returns
//!
//! One outcome per probe, chosen by whose fault it is (the table on [`ProbePlugin`] says it
//! in full): [`ProbeReport::healthy`]; [`ProbeReport::unhealthy`] when the cluster was
//! contacted and answered wrongly or not at all (vigil believes it only from a call that
//! sent a request to the cluster); [`ProbeReport::credentials_rejected`] on 401/403;
//! [`ProbeError::not_probeable`] when the reference or its settings cannot be used (never a
//! failure); [`ProbeError::inconclusive`] when the plugin itself could not tell. The
//! helpers [`http::HttpError::probe_result`] and
//! [`credentials::CredentialsError::probe_error`] pick the right one for a failed host call.
//!
//! # Parameters and credentials
//!
//! Operators set per-cluster parameters through vigil's REST API, over the defaults of the
//! plugin's `NAME.toml`; plain ones arrive in [`Cluster::parameters`]. A parameter that is a
//! credential is given as a reference (`file:///ABS/PATH` or
//! `secret://NAMESPACE/NAME?key=KEY`), kept out of [`Cluster::parameters`], and read by
//! name with [`credentials::parameter`], which vigil resolves at call time. Secrets come
//! back as [`SecretBytes`], which never prints itself: never log them or put them in a
//! report.
//!
//! # Native builds
//!
//! Everything compiles for the host target too, so that a plugin's pure logic (and this
//! crate's kubeconfig selection) can be unit-tested with a plain `cargo test`. Outside a
//! WebAssembly component the host calls do not exist: [`log`] then writes to standard error,
//! and [`credentials`] and [`http`] calls panic.

#![warn(missing_docs)]

pub mod apiserver;
mod audit;
pub mod bindings;
pub mod credentials;
pub mod http;
pub mod kubeconfig;
pub mod log;
mod plugin;
pub mod reference;
mod report;
mod secret;

pub use audit::AuditPlugin;
pub use bindings::vigil::plugin::types::{
    AuditError, AuditReport, Cluster, Failure, Finding, ObjectRef, PluginInfo, ProbeError,
    ProbeReport, ProbeRequest, ReasonClass, Severity, Verdict,
};
pub use plugin::ProbePlugin;
pub use secret::{SecretBytes, SecretString};

/// What [`register!`] expands to needs; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::audit::AuditExport;
    pub use crate::plugin::ProbeExport;
}

/// Exports a [`ProbePlugin`] as the plugin's `vigil:plugin/prober@0.1.0` interface.
///
/// Call it once, at the top level of the plugin crate (a `cdylib`), with the type that
/// implements [`ProbePlugin`]:
///
/// ```no_run
/// # use vigil_plugin_sdk::{PluginInfo, ProbePlugin, ProbeError, ProbeReport, ProbeRequest};
/// struct MyPlugin;
/// # impl ProbePlugin for MyPlugin {
/// #     fn info() -> PluginInfo { PluginInfo::new("my-plugin", "0.1.0", ["file"], "…") }
/// #     fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> { Ok(ProbeReport::healthy(0)) }
/// # }
/// vigil_plugin_sdk::register!(MyPlugin);
/// ```
///
/// It expands to the component's export functions and to the custom section that tells the
/// component linker which world the plugin implements (`vigil:plugin/probe@0.1.0`), so a
/// crate must call it exactly once.
#[macro_export]
macro_rules! register {
    ($plugin:ty) => {
        const _: () = {
            // The generated export macro takes a plain identifier; the alias gives it one.
            type VigilProbeExport = $crate::__private::ProbeExport<$plugin>;
    $crate::bindings::export!(VigilProbeExport with_types_in $crate::bindings);
        };
    };
}

/// Exports an [`AuditPlugin`] as the plugin's `vigil:plugin/auditor@0.1.0` interface: the
/// [`register!`] of the `audit` world.
///
/// Call it once, at the top level of the plugin crate (a `cdylib`), with the type that
/// implements [`AuditPlugin`]:
///
/// ```no_run
/// # use vigil_plugin_sdk::{AuditError, AuditPlugin, AuditReport, Cluster, Finding, PluginInfo};
/// struct MyAudit;
/// # impl AuditPlugin for MyAudit {
/// #     fn info() -> PluginInfo { PluginInfo::new("my-audit", "0.1.0", ["file"], "…") }
/// #     fn audit(_: Cluster) -> Result<AuditReport, AuditError> {
/// #         Ok(AuditReport::new(Vec::<Finding>::new(), ["pods"]))
/// #     }
/// # }
/// vigil_plugin_sdk::register_audit!(MyAudit);
/// ```
///
/// A crate calls either this or [`register!`], once: a component targets one world.
#[macro_export]
macro_rules! register_audit {
    ($plugin:ty) => {
        const _: () = {
            // The generated export macro takes a plain identifier; the alias gives it one.
            type VigilAuditExport = $crate::__private::AuditExport<$plugin>;
            $crate::bindings::audit::export!(VigilAuditExport with_types_in $crate::bindings::audit);
        };
    };
}
