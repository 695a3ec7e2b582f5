//! Nothing to build: the crate's build-dependencies only enable features (see Cargo.toml).

#![forbid(unsafe_code)]

fn main() {}
