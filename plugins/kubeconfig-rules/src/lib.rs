//! How vigil reads cluster references and kubeconfigs: the rules that vigil's host and the
//! guest SDK (`vigil-plugin-sdk`) must apply identically, written once.
//!
//! The host resolves a reference before a plugin runs and serves the plugin only the files
//! and servers that resolution names; a plugin reads the same kubeconfig again through the
//! SDK. If the two readings drifted apart, the host would refuse the files a plugin asks for,
//! or accept a kubeconfig the plugin cannot use. So the pieces where both sides make the same
//! decision live here, and both depend on this crate:
//!
//! - [`reference`]: the grammar of references (`/path/config#context`, `secret://…`,
//!   `http(s)://…`);
//! - [`data`]: the base64 of a kubeconfig's `*-data` fields, decoded as kubectl decodes it;
//! - [`path`]: a path written in a kubeconfig, resolved against the kubeconfig's directory
//!   as kubectl resolves it;
//! - [`server`]: which `server` URLs vigil accepts;
//! - [`text`]: a kubeconfig's bytes as text (encodings, size limit), and YAML parser messages
//!   reduced to descriptions that never quote the file;
//! - [`yaml`]: where a value is in a YAML document, so that a message can name its path.
//!
//! The kubeconfig *structures* are not here: the host reads them with the `kube` crate's
//! types, and the SDK with its own serde types of the same shape (the `kube` crate does not
//! build for WebAssembly). The differential test `host/plugin-host/tests/it/differential.rs` checks that both
//! readings agree on every kubeconfig of the corpus.
//!
//! Everything here is pure: no I/O, no clock, no bindings.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod data;
pub mod path;
pub mod reference;
pub mod server;
pub mod text;
pub mod yaml;
