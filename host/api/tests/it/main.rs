//! The REST API's integration tests, driven with `oneshot` and no socket, and the drain
//! audits seen through it.

#![forbid(unsafe_code)]

mod api;
mod audits;
mod page;
mod readiness;
mod uptime;
