//! Cluster references: where a cluster's credentials are.
//!
//! - `ABSOLUTE_PATH#CONTEXT`, or `ABSOLUTE_PATH` for the file's `current-context`: a
//!   kubeconfig file. The text is split at its **last** `#`, so a path may contain `#` but a
//!   context cannot.
//! - `secret://NAMESPACE/NAME?key=KEY&context=CONTEXT`: a kubeconfig in a Kubernetes Secret
//!   (key default `kubeconfig`, context default the kubeconfig's `current-context`).
//! - `http://…` / `https://…`: a health URL.
//!
//! This is the host's own parser (crate `vigil-kubeconfig-rules`), so a plugin accepts
//! exactly the references vigil accepts.
//!
//! ```
//! use vigil_plugin_sdk::reference::Reference;
//!
//! let reference = Reference::parse("/etc/kube/config#prod").unwrap();
//! assert_eq!(reference.scheme(), "file");
//! assert_eq!(reference.context(), Some("prod"));
//! ```

pub use vigil_kubeconfig_rules::reference::{DEFAULT_SECRET_KEY, Reference, ReferenceError};
