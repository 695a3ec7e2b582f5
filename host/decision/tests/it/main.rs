//! The decision logic by tables and properties, with no runtime: the brake, the
//! transition function, and the properties every decision keeps.

mod brake;
mod properties;
mod transitions;
