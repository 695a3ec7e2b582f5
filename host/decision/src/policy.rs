use serde::{Deserialize, Serialize};

/// The probe policy in force for one cluster (docs/rules.md#transitions, Docker
/// health-check semantics). Built from the global defaults and the cluster's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthPolicy {
    /// Seconds between two probes of the cluster.
    pub interval_seconds: u32,
    /// Seconds a probe may take before it is a `timeout`.
    pub timeout_seconds: u32,
    /// Consecutive counted failures that confirm an outage.
    pub failure_threshold: u32,
    /// Consecutive healthy probes that end a confirmed outage.
    pub success_threshold: u32,
    /// Seconds after first registration during which failures are not counted.
    pub start_period_seconds: u32,
    /// Count `credentials-rejected` as a failure instead of a condition.
    pub count_auth_failures: bool,
    /// Do not probe at all (Docker's `NONE`): status kept, condition `probing-disabled`.
    pub disabled: bool,
}

impl Default for HealthPolicy {
    /// The defaults of the `CLUSTER_HEALTH_*` settings (docs/rules.md#transitions).
    fn default() -> Self {
        Self {
            interval_seconds: 300,
            timeout_seconds: 10,
            failure_threshold: 2,
            success_threshold: 1,
            start_period_seconds: 0,
            count_auth_failures: false,
            disabled: false,
        }
    }
}

impl HealthPolicy {
    /// The minimum spacing between two counted failures: half the interval, in
    /// milliseconds (docs/rules.md#failure-spacing). A probe-now or a restart loop cannot shrink the grace
    /// period that the failure threshold stands for.
    pub const fn failure_spacing_millis(&self) -> i64 {
        self.interval_seconds as i64 * 500
    }

    /// This policy with `overrides` applied on top.
    pub fn with_overrides(self, overrides: &PolicyOverrides) -> Self {
        Self {
            interval_seconds: overrides.interval_seconds.unwrap_or(self.interval_seconds),
            timeout_seconds: overrides.timeout_seconds.unwrap_or(self.timeout_seconds),
            failure_threshold: overrides
                .failure_threshold
                .unwrap_or(self.failure_threshold),
            success_threshold: overrides
                .success_threshold
                .unwrap_or(self.success_threshold),
            start_period_seconds: overrides
                .start_period_seconds
                .unwrap_or(self.start_period_seconds),
            count_auth_failures: overrides
                .count_auth_failures
                .unwrap_or(self.count_auth_failures),
            disabled: overrides.disabled.unwrap_or(self.disabled),
        }
    }
}

/// Per-cluster overrides of the global policy; `None` keeps the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverrides {
    /// Overrides [`HealthPolicy::interval_seconds`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<u32>,
    /// Overrides [`HealthPolicy::timeout_seconds`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Overrides [`HealthPolicy::failure_threshold`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<u32>,
    /// Overrides [`HealthPolicy::success_threshold`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<u32>,
    /// Overrides [`HealthPolicy::start_period_seconds`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_period_seconds: Option<u32>,
    /// Overrides [`HealthPolicy::count_auth_failures`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_auth_failures: Option<bool>,
    /// Overrides [`HealthPolicy::disabled`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}
