//! The bindings that `wit-bindgen` generates from vigil's contract, `vigil:plugin@0.1.0`
//! (`wit/since_v0.1.0/plugin.wit`).
//!
//! Most plugins never need this module: the crate root re-exports the shared types, and
//! [`crate::log`], [`crate::credentials`] and [`crate::http`] wrap the host interfaces. It is
//! public for what the wrappers leave out. Every item carries the documentation of its WIT
//! definition.
//!
//! The imports (`log`, `credentials`, `http`) are shared by both worlds of the contract. Only
//! the `probe` world's export (`exports::vigil::plugin::prober`) is generated here so far;
//! its custom section — which tells the component linker that the plugin exports `prober` —
//! is emitted only where [`crate::register!`] is called, so the `audit` world's export can be
//! added beside it later without every probe plugin having to implement it too.
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
