//! No code: this crate's dependencies enable, for a build of the `vigil` crate alone, the
//! features that a build of the whole workspace enables (see its Cargo.toml).

#![forbid(unsafe_code)]
