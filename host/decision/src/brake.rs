//! The mass-failure brake (docs/rules.md#brake).
//!
//! When (nearly) every cluster fails at once, the likeliest explanation is that
//! vigil itself is cut off, not that the whole fleet is down. The Kubernetes
//! node lifecycle controller reasons the same way: when every zone is down it
//! stops all evictions. While the brake holds, failures are not counted, so
//! nothing goes OFFLINE and nothing cascades.
//!
//! [`evaluate`] is a pure function of the fleet's latest conclusive outcomes.
//! It takes a grouping key: the engine brakes the whole fleet, and, when replicas share
//! it, each replica on its own outcomes (docs/rules.md#replicas-second-opinion).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// Settings of the brake (`CLUSTER_HEALTH_MASS_FAILURE_*`, `CLUSTER_HEALTH_BRAKE`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BrakeConfig {
    /// Whether the brake may engage at all.
    pub enabled: bool,
    /// The fraction of the group's clusters that must have failed (0 < ratio ≤ 1).
    pub ratio: f64,
    /// The least number of failed clusters for the brake to engage.
    pub min_failed: u32,
    /// How far back an outcome still counts, in milliseconds.
    pub window_millis: i64,
}

impl BrakeConfig {
    /// This configuration for a fleet whose largest probe interval is
    /// `largest_interval_millis`: the window widened to cover at least one interval of
    /// every cluster, so that a slowly probed cluster's latest outcome is still in it.
    /// A window the operator set explicitly is kept as it is instead.
    #[must_use]
    pub fn for_fleet(self, largest_interval_millis: i64) -> Self {
        Self {
            window_millis: self.window_millis.max(largest_interval_millis),
            ..self
        }
    }
}

/// Whether one probe's outcome can change the brake's verdict, so that the fleet's latest
/// outcomes must be assessed again: only a failure can engage a released brake, and a
/// holding brake is released only by a cluster that answers (a healthy conclusive
/// outcome: the evidence that vigil reaches clusters again) or by being switched off. A
/// failure while it holds only adds to the failures, so every failure of a mass failure
/// costs no fleet scan.
pub fn needs_assessment(
    before: BrakeVerdict,
    failed: bool,
    conclusive: bool,
    config: &BrakeConfig,
) -> bool {
    if before.holds() {
        (conclusive && !failed) || !config.enabled
    } else {
        failed
    }
}

/// The latest conclusive outcome of one cluster, as the brake sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetSample<K> {
    /// The group the cluster belongs to (the whole fleet, or a replica).
    pub group: K,
    /// Whether that outcome was a failure (`unhealthy`).
    pub failed: bool,
    /// When it was observed.
    pub at: Timestamp,
}

/// The state of the brake for one group, as persisted and fed back in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrakeVerdict {
    /// The brake does not hold. `since` is when it last released, if ever:
    /// failures counted before that instant no longer count.
    Released {
        /// When the brake last released.
        since: Option<Timestamp>,
    },
    /// The brake holds since the given instant: failures are suppressed.
    Holding {
        /// When the brake engaged.
        since: Timestamp,
    },
}

impl BrakeVerdict {
    /// A brake that never engaged.
    pub const NEVER_ENGAGED: Self = Self::Released { since: None };

    /// Whether the brake holds.
    pub const fn holds(self) -> bool {
        matches!(self, Self::Holding { .. })
    }

    /// When the brake last released, if it is released and ever held.
    pub const fn released_at(self) -> Option<Timestamp> {
        match self {
            Self::Released { since } => since,
            Self::Holding { .. } => None,
        }
    }
}

/// Counts behind a verdict, for `/readyz`, metrics and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrakeAssessment {
    /// The verdict after this evaluation.
    pub verdict: BrakeVerdict,
    /// Clusters of the group with a conclusive outcome inside the window.
    pub considered: u32,
    /// How many of them failed.
    pub failed: u32,
}

impl BrakeAssessment {
    /// Whether this evaluation changed the verdict compared with `previous`.
    pub fn changed_from(&self, previous: BrakeVerdict) -> bool {
        self.verdict.holds() != previous.holds()
    }
}

/// Absorbs float rounding in the ratio comparison; far below one cluster.
const RATIO_TOLERANCE: f64 = 1e-9;

/// Evaluates the brake for every group that has a sample inside the window or
/// a previous verdict (a group whose samples all aged out and that never had a
/// verdict is omitted: it is released).
///
/// For each group, over the samples taken at or after `now - window`:
/// the brake *engages* when at least `min_failed` clusters failed and they are
/// at least `ratio` of the clusters considered. Once holding, it *releases*
/// only on evidence that vigil can reach clusters again — the engage condition
/// no longer holds **and** at least one cluster of the group answered inside
/// the window. Outcomes merely ageing out of the window (vigil restarted after
/// a long stop, say) therefore never release it by forgetting.
///
/// A disabled brake is always released; a group whose brake was holding when it
/// was disabled is reported released at `now`.
pub fn evaluate<K: Ord + Clone>(
    samples: &[FleetSample<K>],
    previous: &BTreeMap<K, BrakeVerdict>,
    config: &BrakeConfig,
    now: Timestamp,
) -> BTreeMap<K, BrakeAssessment> {
    let window_start = now.plus_millis(-config.window_millis.max(0));
    let mut tallies: BTreeMap<K, (u32, u32)> = BTreeMap::new();
    for key in previous.keys() {
        tallies.entry(key.clone()).or_default();
    }
    for sample in samples.iter().filter(|s| s.at >= window_start) {
        let (considered, failed) = tallies.entry(sample.group.clone()).or_default();
        *considered += 1;
        if sample.failed {
            *failed += 1;
        }
    }

    tallies
        .into_iter()
        .map(|(key, (considered, failed))| {
            let before = previous
                .get(&key)
                .copied()
                .unwrap_or(BrakeVerdict::NEVER_ENGAGED);
            (key, assess(considered, failed, before, config, now))
        })
        .collect()
}

/// The verdict of one group from its tally alone — `considered` clusters with a
/// conclusive outcome inside the window, `failed` of them failures — as [`evaluate`]
/// gives it. A store that counts the window's outcomes itself (one aggregate query)
/// calls this instead of handing over every sample.
pub fn assess(
    considered: u32,
    failed: u32,
    before: BrakeVerdict,
    config: &BrakeConfig,
    now: Timestamp,
) -> BrakeAssessment {
    // A small tolerance keeps "at least the ratio" exact where the
    // float product overshoots (0.28 × 25 = 7.000000000000001).
    let mass_failure = config.enabled
        && failed >= config.min_failed.max(1)
        && f64::from(failed) + RATIO_TOLERANCE >= config.ratio * f64::from(considered);
    let answered = considered > failed;
    let verdict = match before {
        BrakeVerdict::Holding { .. } if !config.enabled => {
            BrakeVerdict::Released { since: Some(now) }
        }
        BrakeVerdict::Holding { .. } if mass_failure || !answered => before,
        BrakeVerdict::Holding { .. } => BrakeVerdict::Released { since: Some(now) },
        BrakeVerdict::Released { .. } if mass_failure => BrakeVerdict::Holding { since: now },
        BrakeVerdict::Released { .. } => before,
    };
    BrakeAssessment {
        verdict,
        considered,
        failed,
    }
}
