//! Property tests of [`decide`] over generated probe traces.
//!
//! A trace is a sequence of probes of one cluster, each with a time step, an
//! outcome, a policy (two variants sharing the interval and start period), a
//! move of the mass-failure brake, and a platform action on the apps before it
//! (set an app's status, reassign it; both clear its marker, docs/rules.md#marker-cleared). The test plays
//! the caller's part: it opens an outage and marks the apps on
//! [`Cascade::Degrade`], and sets the apps back to DEPLOYED on
//! [`Cascade::Restore`].
//!
//! Expectations come from [`Model`], a small reference model of docs/rules.md
//! written here from the design, and from invariants that need no model at all
//! (no cascade from UNKNOWN, spacing of counted failures before OFFLINE, …).
//! Only `decide` is under test; nothing of the crate computes an expectation.

use std::collections::BTreeSet;

use proptest::prelude::*;
use vigil_decision::{
    AppId, AppStatus, AppView, BrakeVerdict, Cascade, ClusterHealth, ClusterId, ClusterStatus,
    ConditionType, HealthEvent, HealthPolicy, OutageId, ProbeInput, ProbeOutcome, ReasonClass,
    Timestamp, decide,
};

/// The cluster under test.
const THIS: ClusterId = ClusterId(1);
/// Another cluster, home of some apps.
const OTHER: ClusterId = ClusterId(2);
/// An outage older than the trace: apps of the fixture may carry its marker.
const OLD_OUTAGE: OutageId = OutageId(1000);
/// How many apps a trace starts with.
const APPS: usize = 6;

// ---------------------------------------------------------------------------
// Traces.

#[derive(Debug, Clone)]
enum Outcome {
    Healthy,
    Unhealthy(ReasonClass),
    CredentialsRejected,
    NotProbeable(ReasonClass),
    Inconclusive,
}

impl Outcome {
    fn to_probe_outcome(&self) -> ProbeOutcome {
        let message = "generated".to_owned();
        match self {
            Self::Healthy => ProbeOutcome::Healthy,
            Self::Unhealthy(class) => ProbeOutcome::Unhealthy {
                class: *class,
                message,
            },
            Self::CredentialsRejected => ProbeOutcome::CredentialsRejected { message },
            Self::NotProbeable(class) => ProbeOutcome::NotProbeable {
                class: *class,
                message,
            },
            Self::Inconclusive => ProbeOutcome::Inconclusive {
                class: ReasonClass::PluginFault,
                message,
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum BrakeMove {
    Keep,
    Engage,
    Release,
}

#[derive(Debug, Clone, Copy)]
enum Platform {
    Nothing,
    /// The platform sets app `.0`'s status (clearing its marker).
    SetStatus(usize, AppStatus),
    /// The platform reassigns app `.0` to this cluster (`true`) or the other.
    Reassign(usize, bool),
}

#[derive(Debug, Clone)]
struct Step {
    platform: Platform,
    after_millis: i64,
    outcome: Outcome,
    brake: BrakeMove,
    second_policy: bool,
}

#[derive(Debug, Clone)]
struct Trace {
    policies: [HealthPolicy; 2],
    apps: Vec<AppView>,
    steps: Vec<Step>,
}

fn app_status() -> impl Strategy<Value = AppStatus> {
    prop::sample::select(AppStatus::ALL.to_vec())
}

fn policies() -> impl Strategy<Value = [HealthPolicy; 2]> {
    let thresholds = (1u32..=3, 1u32..=3, any::<bool>());
    (
        prop::sample::select(vec![10u32, 20]),
        prop::sample::select(vec![0u32, 15, 40]),
        thresholds.clone(),
        thresholds,
    )
        .prop_map(|(interval, start, a, b)| {
            let policy =
                |(failure_threshold, success_threshold, count_auth_failures)| HealthPolicy {
                    interval_seconds: interval,
                    start_period_seconds: start,
                    failure_threshold,
                    success_threshold,
                    count_auth_failures,
                    ..HealthPolicy::default()
                };
            [policy(a), policy(b)]
        })
}

fn apps() -> impl Strategy<Value = Vec<AppView>> {
    prop::collection::vec((any::<bool>(), app_status(), any::<bool>()), APPS).prop_map(|apps| {
        apps.into_iter()
            .enumerate()
            .map(|(i, (here, status, old_marker))| AppView {
                id: AppId(i as i64 + 1),
                cluster: if here { THIS } else { OTHER },
                status,
                degraded_by: (status == AppStatus::Degraded && old_marker).then_some(OLD_OUTAGE),
            })
            .collect()
    })
}

fn step() -> impl Strategy<Value = Step> {
    let failure_class = prop::sample::select(vec![
        ReasonClass::Refused,
        ReasonClass::Timeout,
        ReasonClass::Tls,
        ReasonClass::ServerError,
    ]);
    let unprobeable_class = prop::sample::select(vec![
        ReasonClass::ReferenceBroken,
        ReasonClass::NoPlugin,
        ReasonClass::ExecCredentials,
    ]);
    let outcome = prop_oneof![
        3 => Just(Outcome::Healthy),
        4 => failure_class.prop_map(Outcome::Unhealthy),
        1 => Just(Outcome::CredentialsRejected),
        1 => unprobeable_class.prop_map(Outcome::NotProbeable),
        2 => Just(Outcome::Inconclusive),
    ];
    // Half an interval is 5 s or 10 s: hit both edges and a few wider gaps.
    let after_millis = prop_oneof![
        1 => Just(0i64),
        1 => Just(1_000),
        1 => Just(4_999),
        1 => Just(5_000),
        1 => Just(9_999),
        1 => Just(10_000),
        3 => 0i64..60_000,
    ];
    let brake = prop_oneof![
        10 => Just(BrakeMove::Keep),
        1 => Just(BrakeMove::Engage),
        2 => Just(BrakeMove::Release),
    ];
    let platform = prop_oneof![
        6 => Just(Platform::Nothing),
        2 => (0..APPS, app_status()).prop_map(|(i, s)| Platform::SetStatus(i, s)),
        1 => (0..APPS, any::<bool>()).prop_map(|(i, here)| Platform::Reassign(i, here)),
    ];
    (
        platform,
        after_millis,
        outcome,
        brake,
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(platform, after_millis, outcome, brake, second_policy)| Step {
                platform,
                after_millis,
                outcome,
                brake,
                second_policy,
            },
        )
}

fn trace() -> impl Strategy<Value = Trace> {
    (policies(), apps(), prop::collection::vec(step(), 1..40)).prop_map(
        |(policies, apps, steps)| Trace {
            policies,
            apps,
            steps,
        },
    )
}

// ---------------------------------------------------------------------------
// The reference model.

/// The rules of docs/rules.md for one cluster, as plainly as possible.
#[derive(Debug)]
struct Model {
    status: ClusterStatus,
    /// Times of the failures counted since the last healthy probe.
    counted: Vec<Timestamp>,
    /// Healthy probes in a row while OFFLINE.
    successes: u32,
    /// Inconclusive probes in a row.
    inconclusive: u32,
    /// Whether the cluster ever answered (which ends the start period).
    ever_healthy: bool,
    open_outage: Option<OutageId>,
    /// The apps the open outage degraded whose marker nobody has cleared since.
    degraded: BTreeSet<AppId>,
}

/// What the model expects of one probe.
#[derive(Debug, PartialEq)]
enum Expected {
    Nothing,
    Degrade(BTreeSet<AppId>),
    Restore(OutageId, BTreeSet<AppId>),
}

impl Model {
    fn new() -> Self {
        Self {
            status: ClusterStatus::Unknown,
            counted: Vec::new(),
            successes: 0,
            inconclusive: 0,
            ever_healthy: false,
            open_outage: None,
            degraded: BTreeSet::new(),
        }
    }

    /// The platform set the app's status or reassigned it: its marker is gone.
    fn marker_cleared(&mut self, app: AppId) {
        self.degraded.remove(&app);
    }

    fn probe(
        &mut self,
        outcome: &Outcome,
        policy: &HealthPolicy,
        brake: BrakeVerdict,
        now: Timestamp,
        apps: &[AppView],
    ) -> Expected {
        let failure = match outcome {
            Outcome::Healthy => return self.healthy(policy),
            Outcome::Unhealthy(_) => true,
            Outcome::CredentialsRejected => policy.count_auth_failures,
            Outcome::NotProbeable(_) => false,
            Outcome::Inconclusive => {
                self.inconclusive += 1;
                return Expected::Nothing;
            }
        };
        self.inconclusive = 0;
        if !failure {
            return Expected::Nothing;
        }

        self.successes = 0;
        // Failures counted before the brake last released are forgotten.
        if let BrakeVerdict::Released {
            since: Some(released),
        } = brake
        {
            self.counted.retain(|&t| t >= released);
        }
        let holds = matches!(brake, BrakeVerdict::Holding { .. });
        let start_period_ends = i64::from(policy.start_period_seconds) * 1000;
        let starting = !self.ever_healthy && now.0 < start_period_ends;
        let half_interval = i64::from(policy.interval_seconds) * 1000 / 2;
        let spaced = self
            .counted
            .last()
            .is_none_or(|&last| now.0 - last.0 >= half_interval);
        if holds || starting || !spaced {
            return Expected::Nothing;
        }
        self.counted.push(now);
        if self.counted.len() < policy.failure_threshold.max(1) as usize {
            return Expected::Nothing;
        }
        let before = self.status;
        self.status = ClusterStatus::Offline;
        if before == ClusterStatus::Online {
            let deployed_here = apps
                .iter()
                .filter(|a| a.cluster == THIS && a.status == AppStatus::Deployed)
                .map(|a| a.id)
                .collect();
            Expected::Degrade(deployed_here)
        } else {
            Expected::Nothing
        }
    }

    fn healthy(&mut self, policy: &HealthPolicy) -> Expected {
        self.counted.clear();
        self.inconclusive = 0;
        self.ever_healthy = true;
        let back_online = match self.status {
            ClusterStatus::Online => false,
            ClusterStatus::Unknown => true,
            ClusterStatus::Offline => {
                self.successes += 1;
                self.successes >= policy.success_threshold.max(1)
            }
        };
        if !back_online {
            return Expected::Nothing;
        }
        self.status = ClusterStatus::Online;
        self.successes = 0;
        match self.open_outage.take() {
            Some(outage) => Expected::Restore(outage, std::mem::take(&mut self.degraded)),
            None => Expected::Nothing,
        }
    }
}

/// The largest number of `times` (sorted) pairwise at least `spacing` apart.
fn spaced_count(times: &[Timestamp], spacing: i64) -> usize {
    let mut count = 0;
    let mut last: Option<Timestamp> = None;
    for &t in times {
        if last.is_none_or(|l| t.0 - l.0 >= spacing) {
            count += 1;
            last = Some(t);
        }
    }
    count
}

fn sorted(apps: &[AppId]) -> BTreeSet<AppId> {
    apps.iter().copied().collect()
}

// ---------------------------------------------------------------------------
// The properties.

/// An unhealthy observation since the last healthy probe, for the model-free
/// spacing invariant.
#[derive(Debug)]
struct Failure {
    at: Timestamp,
    /// Neither the brake nor the start period stopped it from counting.
    countable: bool,
}

fn run(trace: &Trace) -> Result<(), TestCaseError> {
    let mut health = ClusterHealth::new(Timestamp(0));
    let mut apps = trace.apps.clone();
    let mut model = Model::new();
    let mut now = Timestamp(0);
    let mut holding_since: Option<Timestamp> = None;
    let mut released_at: Option<Timestamp> = None;
    let mut next_outage = 1;
    let mut failures: Vec<Failure> = Vec::new();
    let mut ever_healthy = false;

    for (index, step) in trace.steps.iter().enumerate() {
        // The platform acts between probes (any such action clears the marker).
        match step.platform {
            Platform::Nothing => {}
            Platform::SetStatus(i, status) => {
                apps[i].status = status;
                apps[i].degraded_by = None;
                model.marker_cleared(apps[i].id);
            }
            Platform::Reassign(i, here) => {
                apps[i].cluster = if here { THIS } else { OTHER };
                apps[i].degraded_by = None;
                model.marker_cleared(apps[i].id);
            }
        }

        now = now.plus_millis(step.after_millis);
        match step.brake {
            BrakeMove::Keep => {}
            BrakeMove::Engage => {
                holding_since.get_or_insert(now);
            }
            BrakeMove::Release => {
                // A brake never releases in the millisecond it engaged (a release needs
                // a later conclusive outcome): the engine's timestamps could not tell a
                // failure counted before such an engagement from one after the release.
                if holding_since.is_some_and(|since| since < now) {
                    holding_since = None;
                    released_at = Some(now);
                }
            }
        }
        let brake = match holding_since {
            Some(since) => BrakeVerdict::Holding { since },
            None => BrakeVerdict::Released { since: released_at },
        };
        let policy = &trace.policies[usize::from(step.second_policy)];
        let outcome = step.outcome.to_probe_outcome();

        // Another cluster's app that even carries the open outage's marker:
        // decide must ignore it.
        let mut seen_apps = apps.clone();
        seen_apps.push(AppView {
            id: AppId(99),
            cluster: OTHER,
            status: AppStatus::Degraded,
            degraded_by: health.open_outage,
        });

        let before = health.clone();
        let decision = decide(&ProbeInput {
            cluster: THIS,
            health: &before,
            policy,
            outcome: &outcome,
            now,
            brake,
            apps: &seen_apps,
            replicas: Default::default(),
        });
        let after = &decision.health;
        let expected = model.probe(&step.outcome, policy, brake, now, &apps);

        // The apps change only the app lists of a cascade: the store decides without
        // them first and reads them only when that decision cascades.
        let without_apps = decide(&ProbeInput {
            cluster: THIS,
            health: &before,
            policy,
            outcome: &outcome,
            now,
            brake,
            apps: &[],
            replicas: Default::default(),
        });
        prop_assert_eq!(
            &without_apps.health,
            after,
            "health decided without the apps"
        );
        prop_assert_eq!(
            std::mem::discriminant(&without_apps.cascade),
            std::mem::discriminant(&decision.cascade),
            "cascade decided without the apps: {:?} against {:?}",
            without_apps.cascade,
            decision.cascade
        );
        let kinds = |events: &[HealthEvent]| {
            events
                .iter()
                .map(std::mem::discriminant)
                .collect::<Vec<_>>()
        };
        prop_assert_eq!(
            kinds(&without_apps.events),
            kinds(&decision.events),
            "events decided without the apps"
        );
        let context = || {
            format!(
                "step {index} at {now:?}: {step:?}\nbefore: {before:?}\nafter: {after:?}\ncascade: {:?}",
                decision.cascade
            )
        };

        // Model-free invariants.
        let counts_as_failure = match step.outcome {
            Outcome::Unhealthy(_) => true,
            Outcome::CredentialsRejected => policy.count_auth_failures,
            _ => false,
        };
        match step.outcome {
            Outcome::Healthy => {
                failures.clear();
                ever_healthy = true;
            }
            _ if counts_as_failure => {
                let starting =
                    !ever_healthy && now.0 < i64::from(policy.start_period_seconds) * 1000;
                failures.push(Failure {
                    at: now,
                    countable: !brake.holds() && !starting,
                });
            }
            _ => {}
        }

        prop_assert!(
            before.status != ClusterStatus::Unknown || decision.cascade == Cascade::None,
            "a cascade started from UNKNOWN\n{}",
            context()
        );
        prop_assert!(
            before.status == ClusterStatus::Unknown || after.status != ClusterStatus::Unknown,
            "a confirmed status went back to UNKNOWN\n{}",
            context()
        );
        if matches!(decision.cascade, Cascade::Degrade { .. }) {
            prop_assert!(
                before.status == ClusterStatus::Online && after.status == ClusterStatus::Offline,
                "degrade outside ONLINE→OFFLINE\n{}",
                context()
            );
        }
        if matches!(decision.cascade, Cascade::Restore { .. }) {
            prop_assert!(
                before.status != ClusterStatus::Online && after.status == ClusterStatus::Online,
                "restore outside →ONLINE\n{}",
                context()
            );
        }
        if !counts_as_failure && !matches!(step.outcome, Outcome::Healthy) {
            prop_assert!(
                after.status == before.status
                    && after.consecutive_failures == before.consecutive_failures
                    && after.last_counted_failure == before.last_counted_failure
                    && decision.cascade == Cascade::None,
                "a neutral outcome changed the status or the failure count\n{}",
                context()
            );
        }
        if brake.holds() {
            prop_assert!(
                before.status == ClusterStatus::Offline || after.status != ClusterStatus::Offline,
                "went OFFLINE while the brake holds\n{}",
                context()
            );
            prop_assert!(
                !decision
                    .events
                    .iter()
                    .any(|e| matches!(e, HealthEvent::FailureCounted { .. })),
                "counted a failure while the brake holds\n{}",
                context()
            );
        }
        if before.status != ClusterStatus::Offline && after.status == ClusterStatus::Offline {
            // OFFLINE only after `failure_threshold` countable failures since
            // the last healthy probe and the last brake release, each at least
            // half an interval after the previous one, this probe's included.
            let since_release = released_at.unwrap_or(Timestamp(i64::MIN));
            let countable: Vec<Timestamp> = failures
                .iter()
                .filter(|f| f.countable && f.at >= since_release)
                .map(|f| f.at)
                .collect();
            let spacing = i64::from(policy.interval_seconds) * 500;
            prop_assert!(
                counts_as_failure
                    && countable.last() == Some(&now)
                    && spaced_count(&countable, spacing)
                        >= policy.failure_threshold.max(1) as usize,
                "OFFLINE without {} spaced countable failures: {countable:?}\n{}",
                policy.failure_threshold,
                context()
            );
        }

        // Agreement with the model.
        prop_assert_eq!(after.status, model.status, "status\n{}", context());
        let actual = match &decision.cascade {
            Cascade::None => Expected::Nothing,
            Cascade::Degrade { apps } => Expected::Degrade(sorted(apps)),
            Cascade::Restore { outage, apps } => Expected::Restore(*outage, sorted(apps)),
        };
        prop_assert_eq!(&actual, &expected, "cascade\n{}", context());
        if counts_as_failure || matches!(step.outcome, Outcome::Healthy) {
            prop_assert_eq!(
                after.consecutive_failures as usize,
                model.counted.len(),
                "failure count\n{}",
                context()
            );
            prop_assert_eq!(
                after.last_counted_failure,
                model.counted.last().copied(),
                "last counted failure\n{}",
                context()
            );
        }
        prop_assert_eq!(
            after.has_condition(ConditionType::ProbeStale),
            model.inconclusive >= 3,
            "probe-stale\n{}",
            context()
        );

        // The caller's part: persist, open the outage, apply the cascade.
        health = decision.health.clone();
        match &decision.cascade {
            Cascade::None => {}
            Cascade::Degrade { apps: degraded } => {
                let outage = OutageId(next_outage);
                next_outage += 1;
                health.open_outage = Some(outage);
                model.open_outage = Some(outage);
                model.degraded = sorted(degraded);
                for app in apps.iter_mut().filter(|a| degraded.contains(&a.id)) {
                    app.status = AppStatus::Degraded;
                    app.degraded_by = Some(outage);
                }
            }
            Cascade::Restore { apps: restored, .. } => {
                for app in apps.iter_mut().filter(|a| restored.contains(&a.id)) {
                    app.status = AppStatus::Deployed;
                    app.degraded_by = None;
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn decide_agrees_with_the_model_and_the_invariants(trace in trace()) {
        run(&trace)?;
    }
}
