//! The plugin runtime's integration tests: the host running the real `.wasm` plugins (built
//! by cargo for `wasm32-wasip2`), against the fake Kubernetes API server.

#![forbid(unsafe_code)]

mod cache;
mod differential;
mod egress_bounds;
mod kube_secret;
mod reload;
mod runtime;
