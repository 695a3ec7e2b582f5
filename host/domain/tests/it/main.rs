//! The host domain's integration tests: kubeconfig discovery and reference resolution, over
//! the kubeconfig corpus.

mod discovery;
mod reference;
