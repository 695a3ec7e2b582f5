//! The engine's integration tests: the worker, the brake and metrics on a temporary SQLite
//! file with a scripted prober.

#![forbid(unsafe_code)]

mod brake;
mod coverage;
mod metrics;
mod scenario;
mod worker;
