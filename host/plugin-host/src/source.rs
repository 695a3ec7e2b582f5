//! Where a plugin comes from: built into the vigil binary, or a file of the plugin
//! directory.
//!
//! The first-party plugins are embedded in the binary, each with the grants of its
//! `NAME.toml`, so that an installed `vigil` probes clusters with no plugin directory at
//! all. A `NAME.wasm` of the plugin directory overrides the embedded plugin of the same
//! name, and removing the file brings the embedded one back: both are generations of one
//! plugin name, judged by the same candidate, probation and rollback rules.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

/// A plugin built into the binary: its component and the text of its `NAME.toml`.
#[derive(Clone)]
pub struct EmbeddedPlugin {
    /// The plugin's name in vigil, as its `NAME.wasm` would give it.
    pub name: Cow<'static, str>,
    /// The component's bytes.
    pub component: Cow<'static, [u8]>,
    /// The text of its `NAME.toml` (its grants).
    pub grants: Cow<'static, str>,
}

impl fmt::Debug for EmbeddedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedPlugin")
            .field("name", &self.name)
            .field("component_bytes", &self.component.len())
            .finish_non_exhaustive()
    }
}

/// Where a plugin generation was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Built into the vigil binary.
    Embedded {
        /// The plugin's name.
        name: String,
    },
    /// A `NAME.wasm` of the plugin directory.
    File(PathBuf),
}

impl PluginSource {
    /// How the API names it: `embedded`, or the file's path.
    pub fn label(&self) -> String {
        match self {
            Self::Embedded { .. } => "embedded".to_owned(),
            Self::File(path) => path.display().to_string(),
        }
    }

    /// Whether it is built into the binary.
    pub fn is_embedded(&self) -> bool {
        matches!(self, Self::Embedded { .. })
    }
}

impl fmt::Display for PluginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded { name } => write!(f, "{name} (embedded)"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}
