//! The fake Kubernetes API server, checked against real clients (kube, kubectl) and
//! its own fault controls.

#![forbid(unsafe_code)]

mod faults;
mod kube_client;
mod kubectl;
mod resources;
mod server;
