//! The store's integration tests, on temporary SQLite files.

#![forbid(unsafe_code)]

mod store;
