//! The arithmetic of uptime, pure: how the milliseconds of a window split between
//! `ONLINE`, `OFFLINE`, `UNKNOWN` and *no data*, given a cluster's status changes, when an
//! engine was running and when the mass-failure brake held. No I/O, no clock: the store
//! reads the history and hands it in ([`crate::uptime`]).
//!
//! Time counts as data only while vigil watched: an engine was running (any replica), the
//! brake did not hold (while it holds, failures are not counted, so a status then says
//! nothing about the cluster) and the cluster's probing was not disabled (its status is
//! then only kept). Before vigil first knew a cluster, there is no data either.
//! Uptime is `ONLINE / (ONLINE + OFFLINE)`: `UNKNOWN` (never conclusively probed) proves
//! neither, and no data is no evidence, so both stay out of the percentage and are
//! reported beside it.

use std::collections::BTreeMap;

use vigil_decision::ClusterStatus;

/// Milliseconds in a (UTC) day.
pub const MILLIS_PER_DAY: i64 = 86_400_000;

/// A half-open span of time, `[from, to)`, in milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Its first instant.
    pub from: i64,
    /// The instant after its last.
    pub to: i64,
}

impl Span {
    /// `[from, to)`.
    pub const fn new(from: i64, to: i64) -> Self {
        Self { from, to }
    }

    /// The UTC day numbered `day` from the epoch.
    pub const fn day(day: i64) -> Self {
        Self::new(day * MILLIS_PER_DAY, (day + 1) * MILLIS_PER_DAY)
    }

    /// Its length (0 when empty).
    pub const fn millis(self) -> i64 {
        if self.to > self.from {
            self.to - self.from
        } else {
            0
        }
    }

    /// The part of it inside `other`, if any.
    pub fn clip(self, other: Span) -> Option<Span> {
        let clipped = Span::new(self.from.max(other.from), self.to.min(other.to));
        (clipped.millis() > 0).then_some(clipped)
    }
}

/// The UTC day (numbered from the epoch) of the instant `at`.
pub const fn day_of(at: i64) -> i64 {
    at.div_euclid(MILLIS_PER_DAY)
}

/// The milliseconds of a window in each class; they add up to the window's length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Split {
    /// Watched, and the cluster was `ONLINE`.
    pub online: i64,
    /// Watched, and the cluster was `OFFLINE`.
    pub offline: i64,
    /// Watched, and the cluster was `UNKNOWN` (never conclusively probed).
    pub unknown: i64,
    /// Not watched: no engine running, the brake holding, or the cluster not yet known.
    pub no_data: i64,
}

impl Split {
    /// The window's length.
    pub const fn total(&self) -> i64 {
        self.online + self.offline + self.unknown + self.no_data
    }

    /// Adds `other` to this one.
    pub fn add(&mut self, other: Split) {
        self.online += other.online;
        self.offline += other.offline;
        self.unknown += other.unknown;
        self.no_data += other.no_data;
    }

    /// `ONLINE / (ONLINE + OFFLINE)` in percent; `None` when the cluster was watched
    /// neither `ONLINE` nor `OFFLINE` (nothing to judge by).
    pub fn uptime_percent(&self) -> Option<f64> {
        let judged = self.online + self.offline;
        // Milliseconds of a window of at most a few years fit an f64 exactly.
        #[allow(clippy::cast_precision_loss)]
        (judged > 0).then(|| self.online as f64 * 100.0 / judged as f64)
    }
}

/// A confirmed status change, as the history records it (`status-changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusChange {
    /// When.
    pub at: i64,
    /// The status before.
    pub from: ClusterStatus,
    /// The status after.
    pub to: ClusterStatus,
}

/// The status at `at` of a cluster whose status is `current` now and which changed as
/// `changes` (oldest first) say: the last change at or before `at` tells it, or else the
/// first change after `at` (its `from`), or else nothing changed since and it is
/// `current`. So only the changes after `at` are needed: what the history retention
/// pruned before it does not matter.
pub fn status_at(at: i64, changes: &[StatusChange], current: ClusterStatus) -> ClusterStatus {
    let after = changes.partition_point(|c| c.at <= at);
    match (after.checked_sub(1).map(|i| changes[i]), changes.get(after)) {
        (Some(last), _) => last.to,
        (None, Some(next)) => next.from,
        (None, None) => current,
    }
}

/// What is known of one cluster.
#[derive(Debug, Clone, Copy)]
pub struct ClusterHistory<'a> {
    /// When vigil first knew it (discovered or registered): before, there is no data.
    pub first_seen: i64,
    /// Its status now.
    pub current: ClusterStatus,
    /// Its status changes, oldest first: at least every one after the window's start.
    pub changes: &'a [StatusChange],
    /// When vigil did not watch this cluster while it watched the fleet: its probing was
    /// disabled.
    pub unwatched: &'a [Span],
}

/// The spans of a window during which a flag held (the brake; a cluster's probing
/// disabled), from the events that set (`true`) and cleared (`false`) it, oldest first,
/// and whether it holds now; the state before the first event is read as [`status_at`]
/// reads a status (the opposite of what the first event after the window's start made it).
pub fn flag_spans(window: Span, events: &[(i64, bool)], holding_now: bool) -> Vec<Span> {
    let after = events.partition_point(|(at, _)| *at <= window.from);
    let mut holding = match (after.checked_sub(1).map(|i| events[i]), events.get(after)) {
        (Some((_, engaged)), _) => engaged,
        (None, Some((_, engaged))) => !engaged,
        (None, None) => holding_now,
    };
    let mut spans = Vec::new();
    let mut since = window.from;
    for &(at, engaged) in &events[after..] {
        if at >= window.to {
            break;
        }
        if holding && !engaged {
            spans.extend(Span::new(since, at).clip(window));
        } else if !holding && engaged {
            since = at;
        }
        holding = engaged;
    }
    if holding {
        spans.extend(Span::new(since, window.to).clip(window));
    }
    spans
}

/// The span an engine's coverage row stands for: from its start to its clean stop; a row
/// not stopped runs to `now` while its heartbeat is fresh (younger than `fresh_millis`),
/// and otherwise ended at its last heartbeat (the engine crashed, or was killed).
pub fn coverage_span(
    started: i64,
    heartbeat: i64,
    stopped: Option<i64>,
    now: i64,
    fresh_millis: i64,
) -> Span {
    let end = match stopped {
        Some(stopped) => stopped,
        None if now.saturating_sub(heartbeat) < fresh_millis => now,
        None => heartbeat,
    };
    Span::new(started, end.max(started))
}

/// When vigil watched the fleet: the union of the engines' coverage, less the spans the
/// brake held. Sorted, disjoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watched {
    spans: Vec<Span>,
}

impl Watched {
    /// Watched while any of `coverage` runs and none of `brake` holds.
    pub fn new(coverage: &[Span], brake: &[Span]) -> Self {
        let running = union(coverage);
        let braked = union(brake);
        let mut spans = Vec::with_capacity(running.len());
        let mut b = 0;
        for span in running {
            let mut from = span.from;
            while b < braked.len() && braked[b].to <= from {
                b += 1;
            }
            let mut i = b;
            while i < braked.len() && braked[i].from < span.to {
                if braked[i].from > from {
                    spans.push(Span::new(from, braked[i].from));
                }
                from = from.max(braked[i].to);
                i += 1;
            }
            if from < span.to {
                spans.push(Span::new(from, span.to));
            }
        }
        Self { spans }
    }

    /// The watched spans.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// How much of `span` was watched.
    pub fn overlap(&self, span: Span) -> i64 {
        let first = self.spans.partition_point(|s| s.to <= span.from);
        self.spans[first..]
            .iter()
            .take_while(|s| s.from < span.to)
            .filter_map(|s| s.clip(span))
            .map(Span::millis)
            .sum()
    }
}

/// The union of `spans`, sorted and disjoint (touching spans merged).
fn union(spans: &[Span]) -> Vec<Span> {
    let mut sorted: Vec<Span> = spans.iter().copied().filter(|s| s.millis() > 0).collect();
    sorted.sort_by_key(|s| s.from);
    let mut merged: Vec<Span> = Vec::with_capacity(sorted.len());
    for span in sorted {
        match merged.last_mut() {
            Some(last) if span.from <= last.to => last.to = last.to.max(span.to),
            _ => merged.push(span),
        }
    }
    merged
}

/// How `window` splits for one cluster: each stretch of its status counted in its class
/// where it was watched, everything else (not watched, or before the cluster was known)
/// as no data.
pub fn split(window: Span, cluster: &ClusterHistory<'_>, watched: &Watched) -> Split {
    let own;
    let watched = if cluster.unwatched.is_empty() {
        watched
    } else {
        own = Watched::new(&watched.spans, cluster.unwatched);
        &own
    };
    let mut split = Split::default();
    let start = window.from.max(cluster.first_seen);
    if start < window.to {
        let mut status = status_at(start, cluster.changes, cluster.current);
        let mut from = start;
        let first = cluster.changes.partition_point(|c| c.at <= start);
        for change in &cluster.changes[first..] {
            if change.at >= window.to {
                break;
            }
            add_watched(
                &mut split,
                status,
                watched.overlap(Span::new(from, change.at)),
            );
            from = change.at;
            status = change.to;
        }
        add_watched(
            &mut split,
            status,
            watched.overlap(Span::new(from, window.to)),
        );
    }
    split.no_data = window.millis() - split.online - split.offline - split.unknown;
    split
}

fn add_watched(split: &mut Split, status: ClusterStatus, millis: i64) {
    match status {
        ClusterStatus::Online => split.online += millis,
        ClusterStatus::Offline => split.offline += millis,
        ClusterStatus::Unknown => split.unknown += millis,
    }
}

/// `window` split from daily rollups where a whole day of it has one (days older than the
/// history are known only so), and from `live` for the rest: the days not rolled up yet
/// (today, a day the rollup has not reached) and the parts of days the window only
/// touches.
pub fn combine(
    window: Span,
    rollups: &BTreeMap<i64, Split>,
    mut live: impl FnMut(Span) -> Split,
) -> Split {
    let mut total = Split::default();
    if window.millis() == 0 {
        return total;
    }
    for day in day_of(window.from)..=day_of(window.to - 1) {
        let Some(part) = Span::day(day).clip(window) else {
            continue;
        };
        match rollups.get(&day) {
            Some(rollup) if part == Span::day(day) => total.add(*rollup),
            _ => total.add(live(part)),
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterStatus::{Offline, Online, Unknown};

    /// An hour, in milliseconds.
    const H: i64 = 3_600_000;
    /// The start of day 20,000 (2024-10-04), in hours: the histories below are written in
    /// hours from it.
    const D: i64 = 20_000 * 24;

    fn at(hours: f64) -> i64 {
        #[allow(clippy::cast_possible_truncation)]
        let millis = ((D as f64 + hours) * H as f64) as i64;
        millis
    }

    fn spans(list: &[(f64, f64)]) -> Vec<Span> {
        list.iter()
            .map(|&(from, to)| Span::new(at(from), at(to)))
            .collect()
    }

    fn changes(list: &[(f64, ClusterStatus, ClusterStatus)]) -> Vec<StatusChange> {
        list.iter()
            .map(|&(hours, from, to)| StatusChange {
                at: at(hours),
                from,
                to,
            })
            .collect()
    }

    /// Hours `(online, offline, unknown, no data)`.
    type Hours = (f64, f64, f64, f64);

    struct Case {
        name: &'static str,
        window: (f64, f64),
        first_seen: f64,
        current: ClusterStatus,
        changes: &'static [(f64, ClusterStatus, ClusterStatus)],
        coverage: &'static [(f64, f64)],
        brake: &'static [(f64, f64)],
        disabled: &'static [(f64, f64)],
        expect: Hours,
    }

    fn check(case: &Case) {
        let window = Span::new(at(case.window.0), at(case.window.1));
        let changes = changes(case.changes);
        let disabled = spans(case.disabled);
        let cluster = ClusterHistory {
            first_seen: at(case.first_seen),
            current: case.current,
            changes: &changes,
            unwatched: &disabled,
        };
        let watched = Watched::new(&spans(case.coverage), &spans(case.brake));
        let got = split(window, &cluster, &watched);
        #[allow(clippy::cast_possible_truncation)]
        let ms = |hours: f64| (hours * H as f64) as i64;
        let (online, offline, unknown, no_data) = case.expect;
        let want = Split {
            online: ms(online),
            offline: ms(offline),
            unknown: ms(unknown),
            no_data: ms(no_data),
        };
        assert_eq!(got, want, "{}", case.name);
        assert_eq!(got.total(), window.millis(), "{}: adds up", case.name);
    }

    /// Known histories, each computed by hand. Hours count from midnight of day 0.
    #[test]
    fn known_histories_split_as_computed_by_hand() {
        let always = &[(-1000.0, 1000.0)];
        for case in [
            Case {
                name: "online all day, watched all day",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (24.0, 0.0, 0.0, 0.0),
            },
            Case {
                name: "an outage from 22:00 to 02:00 the next day, first day",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(22.0, Online, Offline), (26.0, Offline, Online)],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (22.0, 2.0, 0.0, 0.0),
            },
            Case {
                name: "the same outage, second day",
                window: (24.0, 48.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(22.0, Online, Offline), (26.0, Offline, Online)],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (22.0, 2.0, 0.0, 0.0),
            },
            Case {
                name: "the same outage, the second day with the first day's events pruned",
                window: (24.0, 48.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(26.0, Offline, Online)],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (22.0, 2.0, 0.0, 0.0),
            },
            Case {
                name: "a crash at 10:00 (last heartbeat), a restart at 12:00",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[],
                coverage: &[(-5.0, 10.0), (12.0, 30.0)],
                brake: &[],
                disabled: &[],
                expect: (22.0, 0.0, 0.0, 2.0),
            },
            Case {
                name: "the brake holds 09:00-11:00 during an outage 08:00-16:00",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(8.0, Online, Offline), (16.0, Offline, Online)],
                coverage: always,
                brake: &[(9.0, 11.0)],
                disabled: &[],
                expect: (16.0, 6.0, 0.0, 2.0),
            },
            Case {
                name: "the brake holds across a restart and a crash gap",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Offline,
                changes: &[],
                coverage: &[(-5.0, 6.0), (7.0, 30.0)],
                brake: &[(5.0, 8.0)],
                disabled: &[],
                expect: (0.0, 21.0, 0.0, 3.0),
            },
            Case {
                name: "registered at 06:00, UNKNOWN until its first probe at 06:30",
                window: (0.0, 24.0),
                first_seen: 6.0,
                current: Online,
                changes: &[(6.5, Unknown, Online)],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (17.5, 0.0, 0.5, 6.0),
            },
            Case {
                name: "registered mid-window and never answered conclusively",
                window: (0.0, 24.0),
                first_seen: 18.0,
                current: Unknown,
                changes: &[],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (0.0, 0.0, 6.0, 18.0),
            },
            Case {
                name: "no change in the window: the next change tells the status",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(30.0, Offline, Online)],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (0.0, 24.0, 0.0, 0.0),
            },
            Case {
                name: "no change at all: the current status",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Offline,
                changes: &[],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (0.0, 24.0, 0.0, 0.0),
            },
            Case {
                name: "two replicas whose runs overlap, and a gap with neither",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[],
                coverage: &[(0.0, 14.0), (10.0, 20.0), (21.0, 24.0), (3.0, 4.0)],
                brake: &[],
                disabled: &[],
                expect: (23.0, 0.0, 0.0, 1.0),
            },
            Case {
                name: "probing disabled 10:00-14:00 (and across the brake at 13:00-15:00)",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[],
                coverage: always,
                brake: &[(13.0, 15.0)],
                disabled: &[(10.0, 14.0)],
                expect: (19.0, 0.0, 0.0, 5.0),
            },
            Case {
                name: "vigil never ran",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(5.0, Online, Offline)],
                coverage: &[],
                brake: &[],
                disabled: &[],
                expect: (0.0, 0.0, 0.0, 24.0),
            },
            Case {
                name: "a change exactly at the window's start and one at its end",
                window: (0.0, 24.0),
                first_seen: -100.0,
                current: Online,
                changes: &[(0.0, Online, Offline), (24.0, Offline, Online)],
                coverage: always,
                brake: &[],
                disabled: &[],
                expect: (0.0, 24.0, 0.0, 0.0),
            },
        ] {
            check(&case);
        }
    }

    #[test]
    fn a_flag_is_read_from_its_events_and_its_state_now() {
        let window = Span::new(at(0.0), at(24.0));
        let check = |events: &[(f64, bool)], now: bool, want: &[(f64, f64)]| {
            let events: Vec<(i64, bool)> = events.iter().map(|&(h, e)| (at(h), e)).collect();
            assert_eq!(
                flag_spans(window, &events, now),
                spans(want),
                "{events:?} {now}"
            );
        };
        check(&[], false, &[]);
        check(&[], true, &[(0.0, 24.0)]);
        check(&[(9.0, true), (11.0, false)], false, &[(9.0, 11.0)]);
        // Engaged before the window (its event pruned): the release tells.
        check(&[(3.0, false)], false, &[(0.0, 3.0)]);
        // Engaged in the window, holding still.
        check(&[(-5.0, false), (20.0, true)], true, &[(20.0, 24.0)]);
        // Engaged before the window and seen so.
        check(
            &[(-5.0, true), (2.0, false), (30.0, true)],
            false,
            &[(0.0, 2.0)],
        );
    }

    #[test]
    fn an_open_row_runs_to_now_only_while_its_heartbeat_is_fresh() {
        let fresh = 120_000;
        assert_eq!(
            coverage_span(1_000, 50_000, Some(60_000), 900_000, fresh),
            Span::new(1_000, 60_000)
        );
        assert_eq!(
            coverage_span(1_000, 850_000, None, 900_000, fresh),
            Span::new(1_000, 900_000)
        );
        assert_eq!(
            coverage_span(1_000, 50_000, None, 900_000, fresh),
            Span::new(1_000, 50_000)
        );
    }

    /// A window longer than the history: the days the history no longer holds come from
    /// their rollups, the rest is computed live.
    #[test]
    fn a_window_longer_than_the_history_adds_the_rollups_of_whole_days() {
        let day0 = day_of(at(0.0));
        let rollup = |online_h: i64, offline_h: i64, no_data_h: i64| Split {
            online: online_h * H,
            offline: offline_h * H,
            unknown: 0,
            no_data: no_data_h * H,
        };
        // Days -3 and -2 are rolled up; day -1 is not (the rollup has not reached it);
        // day 0 is today, up to 12:00.
        let rollups = BTreeMap::from([
            (day0 - 3, rollup(20, 4, 0)),
            (day0 - 2, rollup(12, 0, 12)),
            // A rollup of a day only partly in the window is not used.
            (day0 - 4, rollup(0, 24, 0)),
        ]);
        let mut asked = Vec::new();
        let total = combine(Span::new(at(-84.0), at(12.0)), &rollups, |part| {
            asked.push(part);
            Split {
                online: part.millis(),
                ..Split::default()
            }
        });
        assert_eq!(
            asked,
            spans(&[(-84.0, -72.0), (-24.0, 0.0), (0.0, 12.0)]),
            "live for the partial first day, the day not rolled up and today"
        );
        assert_eq!(total, rollup(12 + 20 + 12 + 24 + 12, 4, 12));
        assert_eq!(total.total(), 96 * H);
    }

    #[test]
    fn uptime_leaves_unknown_and_no_data_out() {
        let split = Split {
            online: 3 * H,
            offline: H,
            unknown: 10 * H,
            no_data: 10 * H,
        };
        assert_eq!(split.uptime_percent(), Some(75.0));
        assert_eq!(Split::default().uptime_percent(), None);
        let unknown_only = Split {
            unknown: H,
            ..Split::default()
        };
        assert_eq!(unknown_only.uptime_percent(), None);
    }

    #[test]
    fn days_are_utc_days_from_the_epoch() {
        assert_eq!(day_of(0), 0);
        assert_eq!(day_of(MILLIS_PER_DAY - 1), 0);
        assert_eq!(day_of(MILLIS_PER_DAY), 1);
        assert_eq!(day_of(-1), -1);
        assert_eq!(
            Span::day(2),
            Span::new(2 * MILLIS_PER_DAY, 3 * MILLIS_PER_DAY)
        );
    }
}
