use serde::{Deserialize, Serialize};

/// A point in time, in milliseconds since the Unix epoch.
///
/// The decision logic never reads a clock: every function takes the current
/// time as a `Timestamp` argument, which keeps it deterministic under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The timestamp `seconds` whole seconds after the epoch.
    pub const fn from_secs(seconds: i64) -> Self {
        Self(seconds.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub const fn millis(self) -> i64 {
        self.0
    }

    /// This time moved forward by `millis` milliseconds (saturating).
    pub const fn plus_millis(self, millis: i64) -> Self {
        Self(self.0.saturating_add(millis))
    }

    /// This time moved forward by `seconds` seconds (saturating).
    pub const fn plus_secs(self, seconds: i64) -> Self {
        self.plus_millis(seconds.saturating_mul(1000))
    }

    /// Milliseconds elapsed from `earlier` to `self` (negative if `earlier` is later).
    pub const fn millis_since(self, earlier: Timestamp) -> i64 {
        self.0.saturating_sub(earlier.0)
    }
}
