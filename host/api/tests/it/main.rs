//! The REST API's integration tests, driven with `oneshot` and no socket, and the drain
//! audits seen through it.

mod api;
mod audits;
