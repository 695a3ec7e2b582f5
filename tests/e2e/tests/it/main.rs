//! The whole engine against the fake Kubernetes API server over real TLS, with the native
//! prober.

#![forbid(unsafe_code)]

mod engine;
