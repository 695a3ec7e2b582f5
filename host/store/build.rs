//! `sqlx::migrate!` embeds `migrations/` at compile time: a new or changed migration must
//! rebuild the crate, which cargo does not know on its own.

#![forbid(unsafe_code)]

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
