//! What the runtime tells of its plugins' generations as they change
//! (replacement): sent to [`super::PluginRuntime::subscribe`]'s receivers, recorded in the
//! history by `vigil serve`.

/// A change of a plugin's generations as it happens, for the history. The generations
/// loaded at start-up are in the log only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginEvent {
    /// A candidate loaded and now serves (a replacement is on probation).
    Promoted {
        /// The plugin.
        plugin: String,
        /// Its new generation.
        generation: u64,
        /// The version the plugin gives itself.
        version: String,
        /// The sha256 of its file, hex.
        hash: String,
    },
    /// A candidate failed; the generation that served before serves on.
    Refused {
        /// The plugin.
        plugin: String,
        /// The generation that failed.
        generation: u64,
        /// Where it failed: `read`, `manifest`, `compile`, `world`, `link`, `limits` or
        /// `info`.
        stage: &'static str,
        /// Why.
        message: String,
    },
    /// A replacement passed its probation: the generation before it is released.
    ProbationPassed {
        /// The plugin.
        plugin: String,
        /// The generation that passed.
        generation: u64,
    },
    /// A replacement failed its probation: the generation before it serves again.
    RolledBack {
        /// The plugin.
        plugin: String,
        /// The generation that failed.
        failed: u64,
        /// The generation serving again.
        restored: u64,
        /// Why.
        message: String,
    },
    /// The plugin's file was removed: the plugin retired.
    Retired {
        /// The plugin.
        plugin: String,
        /// The generation that retired.
        generation: u64,
    },
}

impl PluginEvent {
    /// The event's kind in the history: `plugin-promoted`, `plugin-refused`,
    /// `plugin-probation-passed`, `plugin-rolled-back` or `plugin-retired`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Promoted { .. } => "plugin-promoted",
            Self::Refused { .. } => "plugin-refused",
            Self::ProbationPassed { .. } => "plugin-probation-passed",
            Self::RolledBack { .. } => "plugin-rolled-back",
            Self::Retired { .. } => "plugin-retired",
        }
    }

    /// The plugin it is about.
    pub fn plugin(&self) -> &str {
        match self {
            Self::Promoted { plugin, .. }
            | Self::Refused { plugin, .. }
            | Self::ProbationPassed { plugin, .. }
            | Self::RolledBack { plugin, .. }
            | Self::Retired { plugin, .. } => plugin,
        }
    }

    /// The change, as the metric labels it: the kind without `plugin-`.
    pub fn change(&self) -> &'static str {
        let kind = self.kind();
        kind.strip_prefix("plugin-").unwrap_or(kind)
    }

    /// The event's details in the history.
    pub fn detail(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Self::Promoted {
                plugin,
                generation,
                version,
                hash,
            } => {
                json!({ "plugin": plugin, "generation": generation, "version": version, "sha256": hash })
            }
            Self::Refused {
                plugin,
                generation,
                stage,
                message,
            } => {
                json!({ "plugin": plugin, "generation": generation, "stage": stage, "message": message })
            }
            Self::ProbationPassed { plugin, generation } | Self::Retired { plugin, generation } => {
                json!({ "plugin": plugin, "generation": generation })
            }
            Self::RolledBack {
                plugin,
                failed,
                restored,
                message,
            } => {
                json!({ "plugin": plugin, "generation": failed, "restored": restored, "message": message })
            }
        }
    }
}

/// How many events wait for a slow subscriber before the oldest are dropped (a plugin
/// changes a few times a day; a burst is one reload of a whole directory).
pub(super) const BACKLOG: usize = 256;
