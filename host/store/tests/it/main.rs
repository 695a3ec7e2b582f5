//! The store's integration tests, on temporary SQLite files.

mod store;
