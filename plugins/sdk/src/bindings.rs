//! The bindings that `wit-bindgen` generates from vigil's contract, `vigil:plugin@0.1.0`
//! (`wit/since_v0.1.0/plugin.wit`).
//!
//! Most plugins never need this module: the crate root re-exports the shared types, and
//! [`crate::log`], [`crate::credentials`] and [`crate::http`] wrap the host interfaces. It is
//! public for what the wrappers leave out. Every item carries the documentation of its WIT
//! definition.
//!
//! The imports (`log`, `credentials`, `http`) are shared by both worlds of the contract. The
//! `probe` world's export (`exports::vigil::plugin::prober`) is generated here, the `audit`
//! world's in [`audit`]; each one's custom section — which tells the component linker what
//! the plugin exports — is emitted only where [`crate::register!`] or
//! [`crate::register_audit!`] is called, so a plugin implements one world without the other.
//!
//! The generated `Debug` implementations print every field, so the `Debug` output of an
//! [`vigil::plugin::http::Request`] or [`vigil::plugin::http::TlsOptions`] shows tokens and
//! keys: never log those values.

// Generated glue: the lowering and lifting code is `unsafe`, and it spells out paths that
// the crate's lints would shorten.
#![allow(
    unsafe_code,
    unused_qualifications,
    missing_debug_implementations,
    missing_docs
)]

wit_bindgen::generate!({
    world: "probe",
    // Relative to this crate's Cargo.toml.
    path: "../../wit/since_v0.1.0",
    // Equality makes results easy to check in tests; every WIT type here supports it.
    additional_derives: [PartialEq, Eq],
    // `register!` expands `export!` in the plugin's crate, so the macro must be public and
    // must find these bindings from there.
    pub_export_macro: true,
    default_bindings_module: "vigil_plugin_sdk::bindings",
});

/// The `audit` world's export (`vigil:plugin/auditor@0.1.0`), generated beside the probe
/// world's. Its imports and shared types are the ones above (`with`), so a [`Cluster`] or
/// an [`AuditReport`] is the same Rust type in both worlds. Its custom section, too, is
/// emitted only where [`crate::register_audit!`] is called.
///
/// [`Cluster`]: crate::Cluster
/// [`AuditReport`]: crate::AuditReport
pub mod audit {
    wit_bindgen::generate!({
        world: "audit",
        path: "../../wit/since_v0.1.0",
        with: {
            "vigil:plugin/types@0.1.0": crate::bindings::vigil::plugin::types,
            "vigil:plugin/log@0.1.0": crate::bindings::vigil::plugin::log,
            "vigil:plugin/credentials@0.1.0": crate::bindings::vigil::plugin::credentials,
            "vigil:plugin/http@0.1.0": crate::bindings::vigil::plugin::http,
        },
        pub_export_macro: true,
        default_bindings_module: "vigil_plugin_sdk::bindings::audit",
    });
}
