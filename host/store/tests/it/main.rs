//! The store's integration tests: one suite on each backend (a temporary SQLite file, a
//! throwaway PostgreSQL server), and what only SQLite has.

#![forbid(unsafe_code)]

mod backends;
mod backup;
mod brake_onset;
mod outbox;
mod store;
mod uptime;
