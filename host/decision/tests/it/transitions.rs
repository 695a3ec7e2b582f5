//! Table tests of the transition function (docs/rules.md#transitions): one probe outcome
//! applied to one fully described cluster state.
//!
//! Every case is one line of a table handed to [`check`]:
//!
//! ```text
//! given state              | policy | outcome   | at   | brake => state after         | cascade       | events
//! ONLINE f=1 last=850      | -      | unhealthy | 1000 | -     => OFFLINE f=2 last=1000 | degrade [1,2] | counted(2/2)
//! ```
//!
//! - A *state* is the status followed by what is not at its default:
//!   `f=` consecutive failures, `last=` last counted failure, `s=` consecutive
//!   successes, `i=` consecutive inconclusive, `ok=` last success, `seen=` first
//!   registration (default 0), `outage=` open outage, and conditions written
//!   `type:reason@since`. A given state may also say `noapps` (no app at all
//!   instead of [`fixture_apps`]). Times are seconds (`850.001` for milliseconds).
//! - *policy*: `-` for the default policy (interval 300 s, failure threshold 2,
//!   success threshold 1, no start period), or tweaks `int=` `ft=` `st=` `start=`
//!   `auth` (count credentials-rejected as a failure), `off` (probing disabled).
//! - *outcome*: `healthy`, `unhealthy[:class]`, `creds`, `np:class`,
//!   `inconclusive[:class]`, or `disable` / `enable` for [`set_probing_disabled`], or
//!   `drain` / `undrain` for [`set_drain_blocked`] (an audit with or without a
//!   blocking finding).
//! - *brake*: `-` (never engaged), `hold@T`, `rel@T` (released at T), then what the
//!   replicas say: `cut` (the replica that probed is cut off), `2nd` (a second opinion is
//!   required and this failure does not give it), `2nd+` (it does: another replica than
//!   the previous counted failure's), `2nd-waited` (none came within an interval and a
//!   lease).
//! - *cascade*: `-`, `degrade [ids]` or `restore OUTAGE [ids]`.
//! - *events*: the failure and condition events in order — `counted(n/threshold)`,
//!   `nc(brake|start|spacing|cut)`, `awaiting(n/threshold)`, `unconfirmed`, `+type`
//!   (condition set), `-type` (cleared) — or
//!   `-`. Status, degrade and restore events are checked against the state and
//!   the cascade for every case instead of being written out.

use std::fmt::Write as _;

use crate::time::{parse_time, show_time};

use vigil_decision::{
    AppId, AppStatus, AppView, BrakeVerdict, Cascade, ClusterHealth, ClusterId, ClusterStatus,
    Condition, ConditionType, Decision, HealthEvent, HealthPolicy, NotCounted, OutageId,
    ProbeInput, ProbeOutcome, ReasonClass, ReplicaView, SecondOpinion, Timestamp,
    counts_as_failure, decide, set_drain_blocked, set_probing_disabled,
};

/// The cluster under test.
const THIS: ClusterId = ClusterId(1);
/// Another cluster.
const OTHER: ClusterId = ClusterId(2);

/// The apps passed to every case (unless `noapps`). The outage under test is
/// usually 9; outage 8 is another, older one.
fn fixture_apps() -> Vec<AppView> {
    let app = |id, cluster, status, marker: Option<i64>| AppView {
        id: AppId(id),
        cluster,
        status,
        degraded_by: marker.map(OutageId),
    };
    vec![
        app(1, THIS, AppStatus::Deployed, None),
        app(2, THIS, AppStatus::Deployed, None),
        app(3, THIS, AppStatus::Pending, None),
        app(4, THIS, AppStatus::Failed, None),
        // DEGRADED by the platform (a broken deployment): never touched.
        app(5, THIS, AppStatus::Degraded, None),
        // Degraded by outage 9 and still DEGRADED here: the one to restore.
        app(6, THIS, AppStatus::Degraded, Some(9)),
        // Degraded by another outage of this cluster.
        app(7, THIS, AppStatus::Degraded, Some(8)),
        // Another cluster's apps, one of them even carrying outage 9's marker.
        app(8, OTHER, AppStatus::Deployed, None),
        app(9, OTHER, AppStatus::Degraded, Some(9)),
        // A stale marker on an app that is no longer DEGRADED.
        app(10, THIS, AppStatus::Pending, Some(9)),
    ]
}

#[test]
fn r1_healthy_resets_and_recovers() {
    check(
        r"
        # healthy resets the failure counter
        ONLINE f=1 last=900             | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        # UNKNOWN→ONLINE is immediate, whatever the success threshold
        UNKNOWN                         | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        UNKNOWN                         | st=3 | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        # OFFLINE→ONLINE after success_threshold 1
        OFFLINE f=2 last=900 outage=9   | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | restore 9 [6]   | -
        # OFFLINE→ONLINE after success_threshold 3
        OFFLINE f=2 last=900 outage=9   | st=3 | healthy   | 1000 | -       => OFFLINE s=1 ok=1000 outage=9    | -               | -
        OFFLINE s=1 ok=1000 outage=9    | st=3 | healthy   | 1300 | -       => OFFLINE s=2 ok=1300 outage=9    | -               | -
        OFFLINE s=2 ok=1300 outage=9    | st=3 | healthy   | 1600 | -       => ONLINE ok=1600                  | restore 9 [6]   | -
        # an unhealthy probe interrupts the run of successes, counted or not
        OFFLINE s=2 ok=1300 outage=9    | st=3 | unhealthy | 1600 | -       => OFFLINE f=1 last=1600 ok=1300 outage=9 | -        | counted(1/2)
        OFFLINE f=1 last=1600 ok=1300 outage=9 | st=3 | healthy | 1900 | - => OFFLINE s=1 ok=1900 outage=9    | -               | -
        OFFLINE s=2 ok=1300 outage=9    | st=3 | unhealthy | 1600 | hold@1500 => OFFLINE ok=1300 outage=9    | -               | nc(brake)
        # a healthy probe from ONLINE changes nothing else
        ONLINE ok=700                   | st=3 | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        ",
    );
}

#[test]
fn r1_restore_set_is_exactly_the_marked_still_degraded_apps() {
    check(
        r"
        # outage 9: app 6 only — not 5 (platform DEGRADED), 7 (outage 8), 1 and 2
        # (DEPLOYED), 10 (marked but PENDING), 9 (marked but on another cluster)
        OFFLINE outage=9                | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | restore 9 [6]   | -
        OFFLINE outage=8                | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | restore 8 [7]   | -
        OFFLINE outage=4                | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | restore 4 []    | -
        OFFLINE outage=9 noapps         | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | restore 9 []    | -
        # a cluster that went UNKNOWN→OFFLINE opened no outage: recovery restores nothing
        OFFLINE f=2 last=900            | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        OFFLINE s=2 ok=900              | st=3 | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        ",
    );
}

#[test]
fn r2_unhealthy_counts_toward_the_threshold() {
    check(
        r"
        # threshold 1, 2 and 3
        ONLINE                          | ft=1 | unhealthy | 1000 | -       => OFFLINE f=1 last=1000           | degrade [1,2]   | counted(1/1)
        ONLINE                          | -    | unhealthy | 1000 | -       => ONLINE f=1 last=1000            | -               | counted(1/2)
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | -       => OFFLINE f=2 last=1000           | degrade [1,2]   | counted(2/2)
        ONLINE f=1 last=700             | ft=3 | unhealthy | 1000 | -       => ONLINE f=2 last=1000            | -               | counted(2/3)
        ONLINE f=2 last=700             | ft=3 | unhealthy | 1000 | -       => OFFLINE f=3 last=1000           | degrade [1,2]   | counted(3/3)
        ONLINE f=1 last=700             | -    | unhealthy:timeout | 1000 | - => OFFLINE f=2 last=1000         | degrade [1,2]   | counted(2/2)
        # spacing: at most one counted failure per half interval (150 s by default)
        ONLINE f=1 last=999             | -    | unhealthy | 1000 | -       => ONLINE f=1 last=999             | -               | nc(spacing)
        ONLINE f=1 last=850.001         | -    | unhealthy | 1000 | -       => ONLINE f=1 last=850.001         | -               | nc(spacing)
        ONLINE f=1 last=850             | -    | unhealthy | 1000 | -       => OFFLINE f=2 last=1000           | degrade [1,2]   | counted(2/2)
        ONLINE f=1 last=995             | int=10 | unhealthy | 1000 | -     => OFFLINE f=2 last=1000           | degrade [1,2]   | counted(2/2)
        ONLINE f=1 last=995.001         | int=10 | unhealthy | 1000 | -     => ONLINE f=1 last=995.001         | -               | nc(spacing)
        # threshold 1 is not shortened by spacing either: the first failure counts
        UNKNOWN                         | ft=1 | unhealthy | 1000 | -       => OFFLINE f=1 last=1000           | -               | counted(1/1)
        # UNKNOWN→OFFLINE cascades nothing
        UNKNOWN f=1 last=700            | -    | unhealthy | 1000 | -       => OFFLINE f=2 last=1000           | -               | counted(2/2)
        # an OFFLINE cluster keeps counting but cascades nothing more
        OFFLINE f=2 last=700 outage=9   | -    | unhealthy | 1000 | -       => OFFLINE f=3 last=1000 outage=9  | -               | counted(3/2)
        # ONLINE→OFFLINE opens an outage even with no app to degrade
        ONLINE f=1 last=700 noapps      | -    | unhealthy | 1000 | -       => OFFLINE f=2 last=1000           | degrade []      | counted(2/2)
        # an unhealthy probe clears the conditions of an unconclusive past
        ONLINE i=3 probe-stale:plugin-fault@900 | - | unhealthy | 1000 | -   => ONLINE f=1 last=1000            | -               | -probe-stale counted(1/2)
        ONLINE reference-broken:reference-broken@900 | - | unhealthy | 1000 | - => ONLINE f=1 last=1000       | -               | -reference-broken counted(1/2)
        # it says nothing about credentials
        ONLINE credentials-rejected:unauthorized@900 | - | unhealthy | 1000 | - => ONLINE f=1 last=1000 credentials-rejected:unauthorized@900 | - | counted(1/2)
        ",
    );
}

#[test]
fn start_period() {
    check(
        r"
        # registered at 1000 with a 600 s start period: failures before 1600 do not count
        UNKNOWN seen=1000               | start=600 | unhealthy | 1000 | -  => UNKNOWN seen=1000                | -               | nc(start)
        UNKNOWN seen=1000               | start=600 | unhealthy | 1599.999 | - => UNKNOWN seen=1000            | -               | nc(start)
        UNKNOWN seen=1000               | start=600 | unhealthy | 1600 | -  => UNKNOWN f=1 last=1600 seen=1000 | -               | counted(1/2)
        UNKNOWN seen=1000               | start=600 ft=1 | unhealthy | 1300 | - => UNKNOWN seen=1000           | -               | nc(start)
        UNKNOWN seen=1000               | start=600 ft=1 | unhealthy | 1600 | - => OFFLINE f=1 last=1600 seen=1000 | -             | counted(1/1)
        # a success ends it early
        UNKNOWN seen=1000               | start=600 | healthy   | 1100 | -  => ONLINE ok=1100 seen=1000        | -               | -
        ONLINE ok=1100 seen=1000        | start=600 | unhealthy | 1200 | -  => ONLINE f=1 last=1200 ok=1100 seen=1000 | -        | counted(1/2)
        ONLINE f=1 last=1200 ok=1100 seen=1000 | start=600 | unhealthy | 1350 | - => OFFLINE f=2 last=1350 ok=1100 seen=1000 | degrade [1,2] | counted(2/2)
        ",
    );
}

#[test]
fn credentials_rejected() {
    check(
        r"
        # neutral: a condition, no status change, the failure count untouched
        ONLINE                          | -    | creds     | 1000 | -       => ONLINE credentials-rejected:unauthorized@1000 | - | +credentials-rejected
        UNKNOWN                         | -    | creds     | 1000 | -       => UNKNOWN credentials-rejected:unauthorized@1000 | - | +credentials-rejected
        OFFLINE outage=9                | -    | creds     | 1000 | -       => OFFLINE outage=9 credentials-rejected:unauthorized@1000 | - | +credentials-rejected
        ONLINE f=1 last=700             | ft=1 | creds     | 1000 | -       => ONLINE f=1 last=700 credentials-rejected:unauthorized@1000 | - | +credentials-rejected
        # set once: the same reason again records nothing and keeps its `since`
        ONLINE credentials-rejected:unauthorized@500 | - | creds | 1000 | -  => ONLINE credentials-rejected:unauthorized@500 | - | -
        # a healthy probe clears it
        ONLINE credentials-rejected:unauthorized@500 | - | healthy | 1000 | - => ONLINE ok=1000                | -               | -credentials-rejected
        # counted as a failure when the policy says so
        ONLINE                          | auth | creds     | 1000 | -       => ONLINE f=1 last=1000 credentials-rejected:unauthorized@1000 | - | +credentials-rejected counted(1/2)
        ONLINE f=1 last=700             | auth | creds     | 1000 | -       => OFFLINE f=2 last=1000 credentials-rejected:unauthorized@1000 | degrade [1,2] | +credentials-rejected counted(2/2)
        ONLINE f=1 last=999             | auth | creds     | 1000 | -       => ONLINE f=1 last=999 credentials-rejected:unauthorized@1000 | - | +credentials-rejected nc(spacing)
        ONLINE                          | auth ft=1 | creds | 1000 | hold@900 => ONLINE credentials-rejected:unauthorized@1000 | - | +credentials-rejected nc(brake)
        ",
    );
}

/// What counts as a failure is one rule, the one `decide` applies: the store and the
/// brake ask [`counts_as_failure`] rather than deciding it again.
#[test]
fn what_counts_as_a_failure() {
    let plain = HealthPolicy::default();
    let auth = HealthPolicy {
        count_auth_failures: true,
        ..plain
    };
    let unhealthy = ProbeOutcome::Unhealthy {
        class: ReasonClass::Refused,
        message: String::new(),
    };
    let creds = ProbeOutcome::CredentialsRejected {
        message: String::new(),
    };
    let not_probeable = ProbeOutcome::NotProbeable {
        class: ReasonClass::NoPlugin,
        message: String::new(),
    };
    let inconclusive = ProbeOutcome::Inconclusive {
        class: ReasonClass::PluginFault,
        message: String::new(),
    };
    for (outcome, policy, expected) in [
        (&ProbeOutcome::Healthy, &plain, false),
        (&unhealthy, &plain, true),
        (&creds, &plain, false),
        (&creds, &auth, true),
        (&not_probeable, &auth, false),
        (&inconclusive, &auth, false),
    ] {
        assert_eq!(
            counts_as_failure(outcome, policy),
            expected,
            "{outcome:?} with count_auth_failures={}",
            policy.count_auth_failures
        );
    }
}

#[test]
fn not_probeable() {
    check(
        r"
        # never a failure; the status is kept whatever it is
        UNKNOWN                         | -    | np:reference-broken | 1000 | - => UNKNOWN reference-broken:reference-broken@1000 | - | +reference-broken
        ONLINE f=1 last=700             | -    | np:no-plugin | 1000 | -    => ONLINE f=1 last=700 not-probeable:no-plugin@1000 | - | +not-probeable
        OFFLINE f=2 last=700 outage=9   | -    | np:exec-credentials | 1000 | - => OFFLINE f=2 last=700 outage=9 not-probeable:exec-credentials@1000 | - | +not-probeable
        UNKNOWN f=1 last=700            | ft=1 | np:reference-broken | 1000 | - => UNKNOWN f=1 last=700 reference-broken:reference-broken@1000 | - | +reference-broken
        # set once per change
        UNKNOWN reference-broken:reference-broken@500 | - | np:reference-broken | 1000 | - => UNKNOWN reference-broken:reference-broken@500 | - | -
        ONLINE not-probeable:no-plugin@500 | - | np:no-plugin | 1000 | -     => ONLINE not-probeable:no-plugin@500 | -            | -
        ONLINE not-probeable:no-plugin@500 | - | np:exec-credentials | 1000 | - => ONLINE not-probeable:exec-credentials@1000 | - | +not-probeable
        UNKNOWN reference-broken:reference-broken@500 | - | np:no-plugin | 1000 | - => UNKNOWN not-probeable:no-plugin@1000 | - | -reference-broken +not-probeable
        UNKNOWN not-probeable:no-plugin@500 | - | np:reference-broken | 1000 | - => UNKNOWN reference-broken:reference-broken@1000 | - | -not-probeable +reference-broken
        # a conclusive probe clears it
        UNKNOWN reference-broken:reference-broken@500 | - | healthy | 1000 | - => ONLINE ok=1000             | -               | -reference-broken
        ONLINE not-probeable:no-plugin@500 | - | creds | 1000 | -           => ONLINE credentials-rejected:unauthorized@1000 | - | -not-probeable +credentials-rejected
        ",
    );
}

#[test]
fn inconclusive() {
    check(
        r"
        # nothing changes but the count; the third in a row sets probe-stale
        ONLINE                          | -    | inconclusive | 1000 | -    => ONLINE i=1                      | -               | -
        ONLINE i=1                      | -    | inconclusive | 1000 | -    => ONLINE i=2                      | -               | -
        ONLINE i=2                      | -    | inconclusive | 1000 | -    => ONLINE i=3 probe-stale:plugin-fault@1000 | -      | +probe-stale
        ONLINE i=3 probe-stale:plugin-fault@900 | - | inconclusive | 1000 | - => ONLINE i=4 probe-stale:plugin-fault@900 | -   | -
        UNKNOWN i=2 f=1 last=700        | ft=1 | inconclusive | 1000 | -    => UNKNOWN f=1 last=700 i=3 probe-stale:plugin-fault@1000 | - | +probe-stale
        OFFLINE f=2 last=700 outage=9   | -    | inconclusive:denied | 1000 | - => OFFLINE f=2 last=700 i=1 outage=9 | -         | -
        # cleared by a conclusive outcome
        ONLINE i=3 probe-stale:plugin-fault@900 | - | healthy | 1000 | -   => ONLINE ok=1000                  | -               | -probe-stale
        ONLINE i=3 probe-stale:plugin-fault@900 | - | creds | 1000 | -     => ONLINE credentials-rejected:unauthorized@1000 | - | -probe-stale +credentials-rejected
        ONLINE i=2                      | -    | healthy   | 1000 | -       => ONLINE ok=1000                  | -               | -
        ",
    );
}

/// Replicas sharing a fleet (docs/rules.md#replicas-second-opinion): a cut-off replica's
/// failures are not counted, and the failure that takes a cluster OFFLINE must come from
/// another replica than the previous counted failure while one could give it.
#[test]
fn replicas_cut_off_and_second_opinion() {
    check(
        r"
        # one engine, or no other eligible replica: as ever
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | -          => OFFLINE f=2 last=1000   | degrade [1,2] | counted(2/2)
        # a cut-off replica's failure is not counted
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | - cut      => ONLINE f=1 last=700     | -             | nc(cut)
        ONLINE                          | ft=1 | unhealthy | 1000 | - cut      => ONLINE                  | -             | nc(cut)
        # the fleet's brake comes first
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | hold@900 cut => ONLINE f=1 last=700   | -             | nc(brake)
        # from the replica that counted the previous failure: counted, but the cluster waits
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | - 2nd      => ONLINE f=2 last=1000    | -             | counted(2/2) awaiting(2/2)
        UNKNOWN f=1 last=700            | -    | unhealthy | 1000 | - 2nd      => UNKNOWN f=2 last=1000   | -             | counted(2/2) awaiting(2/2)
        # another replica confirms it
        ONLINE f=2 last=1000            | -    | unhealthy | 1200 | - 2nd+     => OFFLINE f=3 last=1200   | degrade [1,2] | counted(3/2)
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | - 2nd+     => OFFLINE f=2 last=1000   | degrade [1,2] | counted(2/2)
        # no other replica gave an outcome in time: the failure counts anyway, unconfirmed
        ONLINE f=2 last=1000            | -    | unhealthy | 1400 | - 2nd-waited => OFFLINE f=3 last=1400 | degrade [1,2] | counted(3/2) unconfirmed
        # a threshold of 1 then needs a confirming failure
        ONLINE                          | ft=1 | unhealthy | 1000 | - 2nd      => ONLINE f=1 last=1000    | -             | counted(1/1) awaiting(1/1)
        ONLINE f=1 last=1000            | ft=1 | unhealthy | 1200 | - 2nd+     => OFFLINE f=2 last=1200   | degrade [1,2] | counted(2/1)
        # below the threshold nothing waits; a success from any replica ends the streak
        ONLINE                          | -    | unhealthy | 1000 | - 2nd      => ONLINE f=1 last=1000    | -             | counted(1/2)
        ONLINE f=2 last=1000            | -    | healthy   | 1200 | - 2nd      => ONLINE ok=1200          | -             | -
        # an OFFLINE cluster's further failures change nothing either way
        OFFLINE f=2 last=1000 outage=9  | -    | unhealthy | 1200 | - 2nd      => OFFLINE f=3 last=1200 outage=9 | -      | counted(3/2)
        ",
    );
}

#[test]
fn r5_brake() {
    check(
        r"
        # while the brake holds a failure is not counted and nothing goes OFFLINE
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | hold@900 => ONLINE f=1 last=700           | -               | nc(brake)
        ONLINE                          | ft=1 | unhealthy | 1000 | hold@900 => ONLINE                        | -               | nc(brake)
        UNKNOWN                         | ft=1 | unhealthy | 1000 | hold@900 => UNKNOWN                       | -               | nc(brake)
        # once released, failures counted before the release are forgotten: a full threshold again
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | rel@900 => ONLINE f=1 last=1000           | -               | counted(1/2)
        ONLINE f=2 last=700             | ft=3 | unhealthy | 1000 | rel@900 => ONLINE f=1 last=1000           | -               | counted(1/3)
        ONLINE f=1 last=950             | -    | unhealthy | 1000 | rel@990 => ONLINE f=1 last=1000           | -               | counted(1/2)
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | rel@1000 => ONLINE f=1 last=1000          | -               | counted(1/2)
        # failures counted after the release still count
        ONLINE f=1 last=700             | -    | unhealthy | 1000 | rel@600 => OFFLINE f=2 last=1000          | degrade [1,2]   | counted(2/2)
        ",
    );
}

#[test]
fn probing_disabled() {
    check(
        r"
        # the condition is set or cleared; the status is kept
        ONLINE                          | -    | disable   | 1000 | -       => ONLINE probing-disabled:disabled@1000 | -       | +probing-disabled
        OFFLINE f=2 last=700 outage=9   | -    | disable   | 1000 | -       => OFFLINE f=2 last=700 outage=9 probing-disabled:disabled@1000 | - | +probing-disabled
        UNKNOWN probing-disabled:disabled@500 | - | disable | 1000 | -       => UNKNOWN probing-disabled:disabled@500 | -       | -
        OFFLINE outage=9 probing-disabled:disabled@500 | - | enable | 1000 | - => OFFLINE outage=9                | -               | -probing-disabled
        UNKNOWN                         | -    | enable    | 1000 | -       => UNKNOWN                         | -               | -
        # a probe under an enabled policy clears it
        ONLINE probing-disabled:disabled@500 | - | healthy | 1000 | -       => ONLINE ok=1000                  | -               | -probing-disabled
        # a probe that was in flight when probing was disabled changes nothing else
        ONLINE f=1 last=700             | off  | unhealthy | 1000 | -       => ONLINE f=1 last=700 probing-disabled:disabled@1000 | - | +probing-disabled
        OFFLINE f=2 last=700 outage=9   | off  | healthy   | 1000 | -       => OFFLINE f=2 last=700 outage=9 probing-disabled:disabled@1000 | - | +probing-disabled
        ",
    );
}

#[test]
fn drain_blocked() {
    check(
        r"
        # an audit sets or clears the condition; status, counters and apps are kept
        ONLINE                          | -    | drain     | 1000 | -       => ONLINE drain-blocked:blocking-findings@1000 | - | +drain-blocked
        ONLINE f=1 last=700             | -    | drain     | 1000 | -       => ONLINE f=1 last=700 drain-blocked:blocking-findings@1000 | - | +drain-blocked
        ONLINE drain-blocked:blocking-findings@500 | - | drain | 1000 | -   => ONLINE drain-blocked:blocking-findings@500 | - | -
        ONLINE drain-blocked:blocking-findings@500 | - | undrain | 1000 | - => ONLINE                          | -               | -drain-blocked
        ONLINE                          | -    | undrain   | 1000 | -       => ONLINE                          | -               | -
        # probes neither set nor clear it, whatever they find
        ONLINE drain-blocked:blocking-findings@500 | - | healthy | 1000 | - => ONLINE ok=1000 drain-blocked:blocking-findings@500 | - | -
        ONLINE drain-blocked:blocking-findings@500 | - | np:no-plugin | 1000 | - => ONLINE not-probeable:no-plugin@1000 drain-blocked:blocking-findings@500 | - | +not-probeable
        ONLINE f=1 last=700 drain-blocked:blocking-findings@500 | - | unhealthy | 1000 | - => OFFLINE f=2 last=1000 drain-blocked:blocking-findings@500 | degrade [1,2] | counted(2/2)
        ",
    );
}

// ---------------------------------------------------------------------------
// The check helper and its little language.

/// Runs every case of `table` (one per line; blank lines and `#` comments are
/// skipped) and panics listing every case that did not give what it expects.
#[track_caller]
fn check(table: &str) {
    let mut failures = String::new();
    let mut cases = 0;
    for (number, line) in table.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        cases += 1;
        if let Err(problem) = run_case(line) {
            let _ = writeln!(
                failures,
                "\nline {}: {line}\n  {}",
                number + 1,
                problem.replace('\n', "\n  ")
            );
        }
    }
    assert!(cases > 0, "empty table");
    assert!(failures.is_empty(), "failing cases:{failures}");
}

fn run_case(line: &str) -> Result<(), String> {
    let (inputs, expected) = line
        .split_once("=>")
        .ok_or("a case needs `inputs => expected`")?;
    let inputs: Vec<&str> = inputs.split('|').map(str::trim).collect();
    let [given, policy, outcome, at, brake] = inputs[..] else {
        return Err(format!("expected 5 input columns, got {}", inputs.len()));
    };
    let (health, apps) = parse_state(given)?;
    let policy = parse_policy(policy)?;
    let now = parse_time(at)?;
    let (brake, replicas) = parse_brake_and_replicas(brake)?;

    let (decision, outcome) = match outcome {
        "drain" | "undrain" => {
            let blocking = (outcome == "drain").then_some("1 blocking finding");
            let decision = set_drain_blocked(&health, blocking, now);
            if decision.health.last_probe != health.last_probe {
                return Err("set_drain_blocked must not record a probe".into());
            }
            (decision, None)
        }
        "disable" | "enable" => {
            let decision = set_probing_disabled(&health, outcome == "disable", now);
            if decision.health.last_probe != health.last_probe {
                return Err("set_probing_disabled must not record a probe".into());
            }
            (decision, None)
        }
        _ => {
            let outcome = parse_outcome(outcome)?;
            let decision = decide(&ProbeInput {
                cluster: THIS,
                health: &health,
                policy: &policy,
                outcome: &outcome,
                now,
                brake,
                apps: &apps,
                replicas,
            });
            if decision.health.last_probe != Some(now) {
                return Err(format!(
                    "last_probe should be {now:?}, is {:?}",
                    decision.health.last_probe
                ));
            }
            (decision, Some(outcome))
        }
    };
    check_event_consistency(&health, &decision, outcome.as_ref(), &policy)?;

    let actual = render(&decision);
    let expected = normalize(expected);
    if actual == expected {
        Ok(())
    } else {
        Err(format!("expected: {expected}\n  actual:   {actual}"))
    }
}

/// The rules every decision follows, checked for every case: a status event
/// for each status change and only then, a degrade or restore event for each
/// cascade and only then, a counted failure carrying the outcome's class, and
/// conditions kept sorted and unique.
fn check_event_consistency(
    before: &ClusterHealth,
    decision: &Decision,
    outcome: Option<&ProbeOutcome>,
    policy: &HealthPolicy,
) -> Result<(), String> {
    let status_events: Vec<_> = decision
        .events
        .iter()
        .filter_map(|e| match e {
            HealthEvent::StatusChanged { from, to } => Some((*from, *to)),
            _ => None,
        })
        .collect();
    let after = decision.health.status;
    let want = if before.status == after {
        vec![]
    } else {
        vec![(before.status, after)]
    };
    if status_events != want {
        return Err(format!("status events {status_events:?}, want {want:?}"));
    }

    let cascade_events: Vec<_> = decision
        .events
        .iter()
        .filter_map(|e| match e {
            HealthEvent::AppsDegraded { apps } => Some(Cascade::Degrade { apps: apps.clone() }),
            HealthEvent::AppsRestored { outage, apps } => Some(Cascade::Restore {
                outage: *outage,
                apps: apps.clone(),
            }),
            _ => None,
        })
        .collect();
    let want = match &decision.cascade {
        Cascade::None => vec![],
        other => vec![other.clone()],
    };
    if cascade_events != want {
        return Err(format!("cascade events {cascade_events:?}, want {want:?}"));
    }

    let class = outcome.and_then(ProbeOutcome::class);
    for event in &decision.events {
        if let HealthEvent::FailureCounted { class: counted, .. }
        | HealthEvent::FailureNotCounted { class: counted, .. } = event
            && Some(*counted) != class
        {
            return Err(format!("failure event {event:?} for outcome {outcome:?}"));
        }
        if let HealthEvent::FailureCounted { threshold, .. } = event
            && *threshold != policy.failure_threshold.max(1)
        {
            return Err(format!("threshold in {event:?} is not the policy's"));
        }
    }

    let kinds: Vec<ConditionType> = decision.health.conditions.iter().map(|c| c.kind).collect();
    if kinds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("conditions not sorted and unique: {kinds:?}"));
    }
    Ok(())
}

fn normalize(text: &str) -> String {
    text.split('|')
        .map(|cell| cell.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" | ")
}

fn render(decision: &Decision) -> String {
    let health = &decision.health;
    let mut out = health.status.to_string();
    let mut field = |name: &str, value: String| {
        let _ = write!(out, " {name}={value}");
    };
    if health.consecutive_failures > 0 {
        field("f", health.consecutive_failures.to_string());
    }
    if let Some(last) = health.last_counted_failure {
        field("last", show_time(last));
    }
    if health.consecutive_successes > 0 {
        field("s", health.consecutive_successes.to_string());
    }
    if health.consecutive_inconclusive > 0 {
        field("i", health.consecutive_inconclusive.to_string());
    }
    if let Some(ok) = health.last_success {
        field("ok", show_time(ok));
    }
    if health.first_seen != Timestamp(0) {
        field("seen", show_time(health.first_seen));
    }
    if let Some(OutageId(outage)) = health.open_outage {
        field("outage", outage.to_string());
    }
    for c in &health.conditions {
        let _ = write!(out, " {}:{}@{}", c.kind, c.reason, show_time(c.since));
    }

    let ids = |apps: &[AppId]| {
        let ids: Vec<String> = apps.iter().map(|a| a.0.to_string()).collect();
        format!("[{}]", ids.join(","))
    };
    let cascade = match &decision.cascade {
        Cascade::None => "-".to_owned(),
        Cascade::Degrade { apps } => format!("degrade {}", ids(apps)),
        Cascade::Restore { outage, apps } => format!("restore {} {}", outage.0, ids(apps)),
    };

    let events: Vec<String> = decision
        .events
        .iter()
        .filter_map(|e| match e {
            HealthEvent::FailureCounted {
                count, threshold, ..
            } => Some(format!("counted({count}/{threshold})")),
            HealthEvent::FailureNotCounted { why, .. } => Some(format!(
                "nc({})",
                match why {
                    NotCounted::Brake => "brake",
                    NotCounted::StartPeriod => "start",
                    NotCounted::Spacing => "spacing",
                    NotCounted::ReplicaCutOff => "cut",
                }
            )),
            HealthEvent::AwaitingSecondOpinion { count, threshold } => {
                Some(format!("awaiting({count}/{threshold})"))
            }
            HealthEvent::TransitionUnconfirmed => Some("unconfirmed".to_owned()),
            HealthEvent::ConditionSet { condition } => Some(format!("+{}", condition.kind)),
            HealthEvent::ConditionCleared { kind } => Some(format!("-{kind}")),
            HealthEvent::StatusChanged { .. }
            | HealthEvent::AppsDegraded { .. }
            | HealthEvent::AppsRestored { .. } => None,
        })
        .collect();
    let events = if events.is_empty() {
        "-".to_owned()
    } else {
        events.join(" ")
    };
    format!("{out} | {cascade} | {events}")
}

fn parse_number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("bad number `{text}`"))
}

fn parse_state(text: &str) -> Result<(ClusterHealth, Vec<AppView>), String> {
    let mut words = text.split_whitespace();
    let status: ClusterStatus = words
        .next()
        .ok_or("a state starts with its status")?
        .parse()
        .map_err(|e| format!("{e}"))?;
    let mut health = ClusterHealth::new(Timestamp(0));
    health.status = status;
    let mut apps = fixture_apps();
    for word in words {
        if word == "noapps" {
            apps.clear();
            continue;
        }
        if let Some((key, value)) = word.split_once('=') {
            match key {
                "f" => health.consecutive_failures = parse_number(value)?,
                "s" => health.consecutive_successes = parse_number(value)?,
                "i" => health.consecutive_inconclusive = parse_number(value)?,
                "last" => health.last_counted_failure = Some(parse_time(value)?),
                "ok" => health.last_success = Some(parse_time(value)?),
                "seen" => health.first_seen = parse_time(value)?,
                "outage" => health.open_outage = Some(OutageId(parse_number(value)?)),
                _ => return Err(format!("unknown state field `{word}`")),
            }
            continue;
        }
        let (kind, rest) = word
            .split_once(':')
            .ok_or_else(|| format!("unknown state word `{word}`"))?;
        let (reason, since) = rest
            .split_once('@')
            .ok_or_else(|| format!("a condition is `type:reason@since`, not `{word}`"))?;
        health.conditions.push(Condition {
            kind: kind.parse().map_err(|e| format!("{e}"))?,
            reason: reason.to_owned(),
            message: "given".to_owned(),
            since: parse_time(since)?,
        });
    }
    health.conditions.sort_by_key(|c| c.kind);
    Ok((health, apps))
}

fn parse_policy(text: &str) -> Result<HealthPolicy, String> {
    let mut policy = HealthPolicy::default();
    for word in text.split_whitespace().filter(|w| *w != "-") {
        match word.split_once('=') {
            Some(("int", v)) => policy.interval_seconds = parse_number(v)?,
            Some(("ft", v)) => policy.failure_threshold = parse_number(v)?,
            Some(("st", v)) => policy.success_threshold = parse_number(v)?,
            Some(("start", v)) => policy.start_period_seconds = parse_number(v)?,
            None if word == "auth" => policy.count_auth_failures = true,
            None if word == "off" => policy.disabled = true,
            _ => return Err(format!("unknown policy tweak `{word}`")),
        }
    }
    Ok(policy)
}

fn parse_outcome(text: &str) -> Result<ProbeOutcome, String> {
    let (kind, class) = match text.split_once(':') {
        Some((kind, class)) => (
            kind,
            Some(class.parse::<ReasonClass>().map_err(|e| format!("{e}"))?),
        ),
        None => (text, None),
    };
    let message = format!("test {text}");
    Ok(match kind {
        "healthy" => ProbeOutcome::Healthy,
        "unhealthy" => ProbeOutcome::Unhealthy {
            class: class.unwrap_or(ReasonClass::Refused),
            message,
        },
        "creds" => ProbeOutcome::CredentialsRejected { message },
        "np" => ProbeOutcome::NotProbeable {
            class: class.ok_or("np needs a class")?,
            message,
        },
        "inconclusive" => ProbeOutcome::Inconclusive {
            class: class.unwrap_or(ReasonClass::PluginFault),
            message,
        },
        _ => return Err(format!("unknown outcome `{text}`")),
    })
}

fn parse_brake_and_replicas(text: &str) -> Result<(BrakeVerdict, ReplicaView), String> {
    let mut words = text.split_whitespace();
    let brake = parse_brake(words.next().unwrap_or("-"))?;
    let mut replicas = ReplicaView::default();
    for word in words {
        let required = |confirms, waited_out| SecondOpinion::Required {
            confirms,
            waited_out,
        };
        match word {
            "cut" => replicas.cut_off = true,
            "2nd" => replicas.opinion = required(false, false),
            "2nd+" => replicas.opinion = required(true, false),
            "2nd-waited" => replicas.opinion = required(false, true),
            other => return Err(format!("unknown replica word `{other}`")),
        }
    }
    Ok((brake, replicas))
}

fn parse_brake(text: &str) -> Result<BrakeVerdict, String> {
    match text.split_once('@') {
        None if text == "-" => Ok(BrakeVerdict::NEVER_ENGAGED),
        Some(("hold", at)) => Ok(BrakeVerdict::Holding {
            since: parse_time(at)?,
        }),
        Some(("rel", at)) => Ok(BrakeVerdict::Released {
            since: Some(parse_time(at)?),
        }),
        _ => Err(format!("unknown brake `{text}`")),
    }
}
