//! The transition function: one probe outcome in, the next health state, the
//! cascade and the events out (docs/rules.md#transitions).

use serde::{Deserialize, Serialize};

use crate::brake::BrakeVerdict;
use crate::{
    AppId, AppStatus, AppView, ClusterHealth, ClusterId, ClusterStatus, Condition, ConditionType,
    HealthPolicy, OutageId, ProbeOutcome, ReasonClass, Timestamp,
};

/// Inconclusive probes in a row after which a cluster gets `probe-stale`.
pub const PROBE_STALE_AFTER: u32 = 3;

/// Everything [`decide`] needs to know about one probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbeInput<'a> {
    /// The cluster that was probed.
    pub cluster: ClusterId,
    /// Its health before this probe.
    pub health: &'a ClusterHealth,
    /// The policy in force for it.
    pub policy: &'a HealthPolicy,
    /// What the probe found.
    pub outcome: &'a ProbeOutcome,
    /// When the probe finished.
    pub now: Timestamp,
    /// The brake's verdict for the cluster's group, this probe's outcome included.
    pub brake: BrakeVerdict,
    /// The apps assigned to this cluster (apps of other clusters are ignored).
    pub apps: &'a [AppView],
    /// What the replicas sharing the fleet say of this outcome (the default: one engine).
    pub replicas: ReplicaView,
}

/// How the replicas sharing a fleet bear on one probe's outcome
/// (docs/rules.md#replicas-second-opinion). One engine alone has the default: nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReplicaView {
    /// The replica that probed is cut off: its own recent outcomes fail while the other
    /// replicas' succeed (its brake holds). Its failures are not counted.
    pub cut_off: bool,
    /// Whether the failure that would take the cluster OFFLINE needs another replica.
    pub opinion: SecondOpinion,
}

/// Whether a failure that reaches the threshold needs a second opinion
/// (docs/rules.md#replicas-second-opinion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SecondOpinion {
    /// One replica, or no other eligible one: failures take the cluster OFFLINE as they
    /// come.
    #[default]
    NotRequired,
    /// Another eligible replica exists: the failure that takes the cluster OFFLINE must
    /// come from another replica than the previous counted failure.
    Required {
        /// This failure comes from another replica than the previous counted failure.
        confirms: bool,
        /// No other replica gave a conclusive outcome within an interval and a lease of
        /// the previous counted failure: the failure counts anyway, unconfirmed.
        waited_out: bool,
    },
}

/// What a confirmed transition does to the apps of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Cascade {
    /// Nothing to do.
    None,
    /// ONLINE→OFFLINE: open a new outage and mark these DEPLOYED apps DEGRADED
    /// with it as their marker.
    Degrade {
        /// The apps to degrade (possibly none: the outage is still opened).
        apps: Vec<AppId>,
    },
    /// →ONLINE with an open outage: close it and set these apps back to
    /// DEPLOYED — exactly the apps still DEGRADED on this cluster and marked
    /// by this outage.
    Restore {
        /// The outage to close.
        outage: OutageId,
        /// The apps to restore.
        apps: Vec<AppId>,
    },
}

/// Why an `unhealthy` outcome was not counted toward the failure threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotCounted {
    /// The mass-failure brake holds (docs/rules.md#brake).
    Brake,
    /// The cluster is in its start period (docs/rules.md#start-period).
    StartPeriod,
    /// A failure was already counted less than half an interval ago
    /// (docs/rules.md#failure-spacing).
    Spacing,
    /// The replica that probed is cut off (docs/rules.md#replicas-second-opinion).
    ReplicaCutOff,
}

/// Something worth recording in the cluster's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum HealthEvent {
    /// The confirmed status changed.
    StatusChanged {
        /// The status before.
        from: ClusterStatus,
        /// The status after.
        to: ClusterStatus,
    },
    /// A failure was counted.
    FailureCounted {
        /// Consecutive counted failures, this one included.
        count: u32,
        /// The policy's failure threshold.
        threshold: u32,
        /// What failed.
        class: ReasonClass,
    },
    /// A failure reached the threshold, but the cluster stays as it is until another
    /// replica confirms it (docs/rules.md#replicas-second-opinion).
    AwaitingSecondOpinion {
        /// Consecutive counted failures, this one included.
        count: u32,
        /// The policy's failure threshold.
        threshold: u32,
    },
    /// The transition that follows was made without another replica's confirmation: none
    /// gave a conclusive outcome in time (docs/rules.md#replicas-second-opinion).
    TransitionUnconfirmed,
    /// A failure was seen but not counted.
    FailureNotCounted {
        /// Why.
        why: NotCounted,
        /// What failed.
        class: ReasonClass,
    },
    /// A condition was set or its reason changed.
    ConditionSet {
        /// The condition as set.
        condition: Condition,
    },
    /// A condition was cleared.
    ConditionCleared {
        /// Its type.
        kind: ConditionType,
    },
    /// Apps were degraded by a new outage (ONLINE→OFFLINE).
    AppsDegraded {
        /// The degraded apps.
        apps: Vec<AppId>,
    },
    /// Apps marked by an outage were restored (→ONLINE).
    AppsRestored {
        /// The outage that closed.
        outage: OutageId,
        /// The restored apps.
        apps: Vec<AppId>,
    },
}

/// The result of [`decide`]: the caller persists all of it in one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The cluster's health after the probe. On [`Cascade::Degrade`], the caller
    /// sets `open_outage` to the id of the outage it opens.
    pub health: ClusterHealth,
    /// What to do to the cluster's apps.
    pub cascade: Cascade,
    /// What to record in the history, in order.
    pub events: Vec<HealthEvent>,
}

/// Whether `outcome` counts as a failure of the cluster under `policy`: an unhealthy
/// outcome always does, a rejection of vigil's credentials only when the policy says
/// `count_auth_failures`, nothing else ever (see docs/rules.md#outcomes).
pub fn counts_as_failure(outcome: &ProbeOutcome, policy: &HealthPolicy) -> bool {
    match outcome {
        ProbeOutcome::Unhealthy { .. } => true,
        ProbeOutcome::CredentialsRejected { .. } => policy.count_auth_failures,
        ProbeOutcome::Healthy
        | ProbeOutcome::NotProbeable { .. }
        | ProbeOutcome::Inconclusive { .. } => false,
    }
}

/// Applies one probe outcome to a cluster's health: the thresholds, the brake as an
/// input, the outage markers, the start period and the conditions (docs/rules.md).
///
/// The rules, in short:
/// - `healthy` resets the failure count; UNKNOWN→ONLINE at once, OFFLINE→ONLINE
///   after `success_threshold` healthy probes in a row, restoring exactly the
///   apps marked by the open outage that are still DEGRADED on this cluster.
/// - `unhealthy` counts a failure unless the brake holds, the start period runs
///   (no success yet), or a failure was counted less than half an interval ago.
///   Failures counted before the brake last released are forgotten. At
///   `failure_threshold` the cluster goes OFFLINE; only ONLINE→OFFLINE opens an
///   outage and degrades the DEPLOYED apps.
/// - `credentials-rejected` sets its condition and is otherwise neutral, unless
///   the policy counts it as a failure.
/// - `not-probeable` and `inconclusive` never change the status or the failure
///   count; three inconclusive in a row set `probe-stale`.
///
/// A cluster whose policy disables probing keeps everything: a probe that was
/// already in flight when probing was disabled only (re)sets
/// `probing-disabled`. A recovery restores its marked apps even while the
/// brake holds: the brake suppresses failures and degradations, never the
/// restoration of what this engine degraded. Outcomes that do not count
/// (credentials-rejected, not-probeable, inconclusive) neither extend nor
/// break a run of healthy probes toward `success_threshold`.
pub fn decide(input: &ProbeInput<'_>) -> Decision {
    if input.policy.disabled {
        let mut decision = set_probing_disabled(input.health, true, input.now);
        decision.health.last_probe = Some(input.now);
        return decision;
    }
    let mut step = Step {
        health: input.health.clone(),
        events: Vec::new(),
        now: input.now,
    };
    step.health.last_probe = Some(input.now);
    step.clear(ConditionType::ProbingDisabled);

    let cascade = match input.outcome {
        ProbeOutcome::Healthy => step.healthy(input),
        ProbeOutcome::Unhealthy { class, .. } => {
            step.answered_or_contacted();
            step.unhealthy(input, *class)
        }
        ProbeOutcome::CredentialsRejected { message } => {
            step.answered_or_contacted();
            step.set(
                ConditionType::CredentialsRejected,
                &ReasonClass::Unauthorized,
                message,
            );
            if input.policy.count_auth_failures {
                step.unhealthy(input, ReasonClass::Unauthorized)
            } else {
                Cascade::None
            }
        }
        ProbeOutcome::NotProbeable { class, message } => {
            step.health.consecutive_inconclusive = 0;
            step.clear(ConditionType::ProbeStale);
            let (kind, other) = if *class == ReasonClass::ReferenceBroken {
                (ConditionType::ReferenceBroken, ConditionType::NotProbeable)
            } else {
                (ConditionType::NotProbeable, ConditionType::ReferenceBroken)
            };
            step.clear(other);
            step.set(kind, class, message);
            Cascade::None
        }
        ProbeOutcome::Inconclusive { class, message } => {
            step.health.consecutive_inconclusive =
                step.health.consecutive_inconclusive.saturating_add(1);
            if step.health.consecutive_inconclusive >= PROBE_STALE_AFTER {
                step.set(ConditionType::ProbeStale, class, message);
            }
            Cascade::None
        }
    };

    Decision {
        health: step.health,
        cascade,
        events: step.events,
    }
}

/// Applies a change of the policy's `disabled` flag without probing: sets or
/// clears `probing-disabled`. The status is kept either way.
pub fn set_probing_disabled(health: &ClusterHealth, disabled: bool, now: Timestamp) -> Decision {
    let mut step = Step {
        health: health.clone(),
        events: Vec::new(),
        now,
    };
    if disabled {
        step.set(
            ConditionType::ProbingDisabled,
            &"disabled",
            "probing is disabled by the cluster's policy",
        );
    } else {
        step.clear(ConditionType::ProbingDisabled);
    }
    Decision {
        health: step.health,
        cascade: Cascade::None,
        events: step.events,
    }
}

/// Applies the result of a drain-readiness audit: sets `drain-blocked`
/// with `blocking` as its message when the audit found a blocking finding, clears it
/// when none remains. An audit never changes the status, the counters or the apps;
/// an audit that could not read what it needed is not a result and is not passed here.
pub fn set_drain_blocked(
    health: &ClusterHealth,
    blocking: Option<&str>,
    now: Timestamp,
) -> Decision {
    let mut step = Step {
        health: health.clone(),
        events: Vec::new(),
        now,
    };
    match blocking {
        Some(message) => step.set(ConditionType::DrainBlocked, &"blocking-findings", message),
        None => step.clear(ConditionType::DrainBlocked),
    }
    Decision {
        health: step.health,
        cascade: Cascade::None,
        events: step.events,
    }
}

/// The state being built by one decision.
struct Step {
    health: ClusterHealth,
    events: Vec<HealthEvent>,
    now: Timestamp,
}

impl Step {
    /// A conclusive outcome: the reference resolved and the plugin worked.
    fn answered_or_contacted(&mut self) {
        self.health.consecutive_inconclusive = 0;
        for kind in [
            ConditionType::ProbeStale,
            ConditionType::ReferenceBroken,
            ConditionType::NotProbeable,
        ] {
            self.clear(kind);
        }
    }

    fn healthy(&mut self, input: &ProbeInput<'_>) -> Cascade {
        self.answered_or_contacted();
        self.clear(ConditionType::CredentialsRejected);
        let health = &mut self.health;
        health.consecutive_failures = 0;
        health.last_counted_failure = None;
        health.last_success = Some(self.now);

        let recovered = match health.status {
            ClusterStatus::Online => false,
            ClusterStatus::Unknown => true,
            ClusterStatus::Offline => {
                health.consecutive_successes = health.consecutive_successes.saturating_add(1);
                health.consecutive_successes >= input.policy.success_threshold.max(1)
            }
        };
        if !recovered {
            return Cascade::None;
        }
        health.consecutive_successes = 0;
        self.status(ClusterStatus::Online);

        let Some(outage) = self.health.open_outage.take() else {
            return Cascade::None;
        };
        let apps: Vec<AppId> = input
            .apps
            .iter()
            .filter(|app| {
                app.cluster == input.cluster
                    && app.status == AppStatus::Degraded
                    && app.degraded_by == Some(outage)
            })
            .map(|app| app.id)
            .collect();
        self.events.push(HealthEvent::AppsRestored {
            outage,
            apps: apps.clone(),
        });
        Cascade::Restore { outage, apps }
    }

    fn unhealthy(&mut self, input: &ProbeInput<'_>, class: ReasonClass) -> Cascade {
        let policy = input.policy;
        let health = &mut self.health;
        health.consecutive_successes = 0;

        // Failures counted before the brake last released are forgotten: the end
        // of our own outage must not trigger a degradation storm. One counted
        // in the very millisecond of the release is after it: the probe that releases
        // the brake may itself be a counted failure.
        if let (Some(released), Some(last)) =
            (input.brake.released_at(), health.last_counted_failure)
            && last < released
        {
            health.consecutive_failures = 0;
            health.last_counted_failure = None;
        }

        let start_period_ends = health
            .first_seen
            .plus_secs(i64::from(policy.start_period_seconds));
        let not_counted = if input.brake.holds() {
            Some(NotCounted::Brake)
        } else if input.replicas.cut_off {
            Some(NotCounted::ReplicaCutOff)
        } else if health.last_success.is_none() && self.now < start_period_ends {
            Some(NotCounted::StartPeriod)
        } else if health
            .last_counted_failure
            .is_some_and(|last| self.now.millis_since(last) < policy.failure_spacing_millis())
        {
            Some(NotCounted::Spacing)
        } else {
            None
        };
        if let Some(why) = not_counted {
            self.events
                .push(HealthEvent::FailureNotCounted { why, class });
            return Cascade::None;
        }

        health.consecutive_failures = health.consecutive_failures.saturating_add(1);
        health.last_counted_failure = Some(self.now);
        let count = health.consecutive_failures;
        let threshold = policy.failure_threshold.max(1);
        self.events.push(HealthEvent::FailureCounted {
            count,
            threshold,
            class,
        });
        if count < threshold {
            return Cascade::None;
        }
        if self.health.status != ClusterStatus::Offline {
            match input.replicas.opinion {
                SecondOpinion::NotRequired | SecondOpinion::Required { confirms: true, .. } => {}
                SecondOpinion::Required {
                    confirms: false,
                    waited_out: true,
                } => self.events.push(HealthEvent::TransitionUnconfirmed),
                SecondOpinion::Required {
                    confirms: false,
                    waited_out: false,
                } => {
                    self.events
                        .push(HealthEvent::AwaitingSecondOpinion { count, threshold });
                    return Cascade::None;
                }
            }
        }

        match self.health.status {
            ClusterStatus::Offline => Cascade::None,
            ClusterStatus::Unknown => {
                // A never-confirmed cluster going OFFLINE degrades nothing: at
                // start-up everything is UNKNOWN (docs/rules.md#only-online-cascades).
                self.status(ClusterStatus::Offline);
                Cascade::None
            }
            ClusterStatus::Online => {
                self.status(ClusterStatus::Offline);
                let apps: Vec<AppId> = input
                    .apps
                    .iter()
                    .filter(|app| app.cluster == input.cluster && app.status == AppStatus::Deployed)
                    .map(|app| app.id)
                    .collect();
                self.events
                    .push(HealthEvent::AppsDegraded { apps: apps.clone() });
                Cascade::Degrade { apps }
            }
        }
    }

    fn status(&mut self, to: ClusterStatus) {
        let from = self.health.status;
        if from != to {
            self.health.status = to;
            self.events.push(HealthEvent::StatusChanged { from, to });
        }
    }

    /// Sets a condition; a condition already set with the same reason keeps its
    /// `since` and records no event (a condition is logged once per change).
    fn set(&mut self, kind: ConditionType, reason: &dyn std::fmt::Display, message: &str) {
        let reason = reason.to_string();
        if let Some(existing) = self.health.conditions.iter_mut().find(|c| c.kind == kind) {
            if existing.reason == reason {
                existing.message = message.to_owned();
                return;
            }
            existing.reason = reason;
            existing.message = message.to_owned();
            existing.since = self.now;
            let condition = existing.clone();
            self.events.push(HealthEvent::ConditionSet { condition });
            return;
        }
        let condition = Condition {
            kind,
            reason,
            message: message.to_owned(),
            since: self.now,
        };
        self.health.conditions.push(condition.clone());
        self.health.conditions.sort_by_key(|c| c.kind);
        self.events.push(HealthEvent::ConditionSet { condition });
    }

    fn clear(&mut self, kind: ConditionType) {
        let before = self.health.conditions.len();
        self.health.conditions.retain(|c| c.kind != kind);
        if self.health.conditions.len() != before {
            self.events.push(HealthEvent::ConditionCleared { kind });
        }
    }
}
