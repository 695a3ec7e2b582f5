//! The decision logic by tables and properties, with no runtime: the brake, the
//! transition function, and the properties every decision keeps.

#![forbid(unsafe_code)]

mod brake;
mod properties;
mod time;
mod transitions;
