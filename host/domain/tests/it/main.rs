//! The host domain's integration tests: kubeconfig discovery and reference resolution, over
//! the kubeconfig corpus.

#![forbid(unsafe_code)]

mod discovery;
mod reference;
