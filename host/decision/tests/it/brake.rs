//! Table tests of the mass-failure brake (docs/rules.md#brake), [`brake::evaluate`].
//!
//! Every case is one line of a table handed to [`check`]:
//!
//! ```text
//! config        | samples                 | previous  | now => verdicts
//! r=1 min=3 w=60 | a:3F@100                | -         | 130 => a:hold@130 3/3
//! ```
//!
//! - *config*: `r=` ratio, `min=` least failed clusters, `w=` window in seconds,
//!   and `off` for a disabled brake.
//! - *samples*: `group:[N]F@T` (N failed clusters, default 1) and
//!   `group:[N]ok@T` (N answering clusters), or `-`. Times are seconds
//!   (`69.999` for milliseconds).
//! - *previous*: `group:hold@T`, `group:rel@T` or `group:rel` (never engaged), or `-`.
//! - *verdicts*: every group returned, in key order, as
//!   `group:hold@T failed/considered`, `group:rel@T …` or `group:rel …`; `-` for none.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::time::{parse_time, show_time};

use vigil_decision::Timestamp;
use vigil_decision::brake::{self, BrakeAssessment, BrakeConfig, BrakeVerdict, FleetSample};

#[test]
fn engages_on_ratio_and_minimum() {
    check(
        r"
        # defaults: every considered cluster failed, and at least 3 of them
        r=1 min=3 w=300   | a:3F@100                  | -          | 130 => a:hold@130 3/3
        r=1 min=3 w=300   | a:2F@100                  | -          | 130 => a:rel 2/2
        r=1 min=3 w=300   | a:3F@100 a:ok@110         | -          | 130 => a:rel 3/4
        r=1 min=3 w=300   | a:10F@100                 | -          | 130 => a:hold@130 10/10
        r=1 min=3 w=300   | -                         | -          | 130 => -
        # a lower ratio
        r=0.5 min=2 w=300 | a:2F@100 a:2ok@100        | -          | 130 => a:hold@130 2/4
        r=0.5 min=2 w=300 | a:2F@100 a:3ok@100        | -          | 130 => a:rel 2/5
        r=0.5 min=2 w=300 | a:1F@100 a:1ok@100        | -          | 130 => a:rel 1/2
        r=0.5 min=2 w=300 | a:3F@100 a:3ok@100        | -          | 130 => a:hold@130 3/6
        r=0.75 min=3 w=300 | a:3F@100 a:1ok@100       | -          | 130 => a:hold@130 3/4
        r=0.75 min=3 w=300 | a:5F@100 a:2ok@100       | -          | 130 => a:rel 5/7
        # the minimum alone
        r=0.1 min=3 w=300 | a:2F@100 a:18ok@100       | -          | 130 => a:rel 2/20
        r=0.1 min=3 w=300 | a:3F@100 a:17ok@100       | -          | 130 => a:hold@130 3/20
        # a minimum of 0 still needs one failure: nothing answered is no mass failure
        r=1 min=0 w=300   | -                         | a:rel      | 130 => a:rel 0/0
        r=1 min=0 w=300   | a:1F@100                  | -          | 130 => a:hold@130 1/1
        ",
    );
}

/// The brake holds when *at least* `ratio` of the clusters
/// failed. 7 of 25 is exactly 0.28 and 14 of 25 exactly 0.56, but in binary
/// floating point `0.28 * 25.0 == 7.000000000000001` and
/// `0.56 * 25.0 == 14.000000000000002`, so a comparison of `failed` with
/// `ratio * considered` misses the exact ratio.
#[test]
fn engages_at_exactly_the_ratio() {
    check(
        r"
        r=0.28 min=3 w=300 | a:7F@100 a:18ok@100      | -          | 130 => a:hold@130 7/25
        r=0.56 min=3 w=300 | a:14F@100 a:11ok@100     | -          | 130 => a:hold@130 14/25
        r=0.55 min=3 w=300 | a:55F@100 a:45ok@100     | -          | 130 => a:hold@130 55/100
        ",
    );
}

#[test]
fn window_edges() {
    check(
        r"
        # a sample exactly one window old still counts; a millisecond older does not
        r=1 min=3 w=60    | a:3F@70                   | -          | 130 => a:hold@130 3/3
        r=1 min=3 w=60    | a:2F@70 a:F@69.999        | -          | 130 => a:rel 2/2
        # an old healthy answer no longer prevents the brake
        r=1 min=3 w=60    | a:3F@100 a:ok@69.999      | -          | 130 => a:hold@130 3/3
        r=1 min=3 w=60    | a:3F@100 a:ok@70          | -          | 130 => a:rel 3/4
        ",
    );
}

#[test]
fn groups_are_independent() {
    check(
        r"
        r=1 min=3 w=300   | a:3F@100 b:3F@100 b:ok@100 | -         | 130 => a:hold@130 3/3 b:rel 3/4
        r=1 min=2 w=300   | a:2F@100 b:2F@100         | -          | 130 => a:hold@130 2/2 b:hold@130 2/2
        # a group known only from its previous verdict is still reported
        r=1 min=3 w=300   | a:3F@100                  | b:hold@50  | 130 => a:hold@130 3/3 b:hold@50 0/0
        r=1 min=3 w=300   | a:ok@100                  | b:rel@50   | 130 => a:rel 0/1 b:rel@50 0/0
        # one group answering does not release another
        r=1 min=3 w=300   | a:ok@100 b:3F@100         | a:hold@50 b:hold@50 | 130 => a:rel@130 0/1 b:hold@50 3/3
        ",
    );
}

#[test]
fn holding_and_releasing() {
    check(
        r"
        # while the mass failure lasts the brake keeps its original `since`
        r=1 min=3 w=300   | a:3F@100                  | a:hold@50  | 130 => a:hold@50 3/3
        # nothing answered — every sample aged out — is no evidence: it holds
        r=1 min=3 w=60    | a:3F@10                   | a:hold@50  | 130 => a:hold@50 0/0
        r=1 min=3 w=60    | -                         | a:hold@50  | 900 => a:hold@50 0/0
        # below the minimum but still no answer: it holds
        r=1 min=3 w=60    | a:2F@100 a:F@10           | a:hold@50  | 130 => a:hold@50 2/2
        # a healthy answer inside the window releases it, now
        r=1 min=3 w=300   | a:3F@100 a:ok@120         | a:hold@50  | 130 => a:rel@130 3/4
        r=1 min=3 w=300   | a:ok@120                  | a:hold@50  | 130 => a:rel@130 0/1
        # an answer while the ratio still holds keeps it
        r=0.5 min=3 w=300 | a:3F@100 a:ok@120         | a:hold@50  | 130 => a:hold@50 3/4
        r=0.5 min=3 w=300 | a:3F@100 a:4ok@120        | a:hold@50  | 130 => a:rel@130 3/7
        # a released brake remembers when it released, until it engages again
        r=1 min=3 w=300   | a:2F@100 a:ok@100         | a:rel@40   | 130 => a:rel@40 2/3
        r=1 min=3 w=300   | a:3F@100                  | a:rel@40   | 130 => a:hold@130 3/3
        ",
    );
}

#[test]
fn disabled() {
    check(
        r"
        off r=1 min=3 w=300 | a:5F@100                | -          | 130 => a:rel 5/5
        off r=1 min=3 w=300 | a:5F@100                | a:rel@40   | 130 => a:rel@40 5/5
        # disabling a holding brake releases it now, so counted failures restart from zero
        off r=1 min=3 w=300 | a:5F@100                | a:hold@50  | 130 => a:rel@130 5/5
        off r=1 min=3 w=300 | -                       | a:hold@50  | 130 => a:rel@130 0/0
        ",
    );
}

#[test]
fn changed_from_compares_holding() {
    let at = |held: bool| BrakeAssessment {
        verdict: if held {
            BrakeVerdict::Holding {
                since: Timestamp(5),
            }
        } else {
            BrakeVerdict::Released {
                since: Some(Timestamp(5)),
            }
        },
        considered: 3,
        failed: 3,
    };
    let held = BrakeVerdict::Holding {
        since: Timestamp(1),
    };
    assert!(at(true).changed_from(BrakeVerdict::NEVER_ENGAGED));
    assert!(!at(true).changed_from(held));
    assert!(at(false).changed_from(held));
    assert!(!at(false).changed_from(BrakeVerdict::NEVER_ENGAGED));
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
            let _ = writeln!(failures, "\nline {}: {line}\n  {problem}", number + 1);
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
    let [config, samples, previous, now] = inputs[..] else {
        return Err(format!("expected 4 input columns, got {}", inputs.len()));
    };
    let config = parse_config(config)?;
    let samples = parse_samples(samples)?;
    let previous = parse_previous(previous)?;
    let now = parse_time(now)?;

    let result = brake::evaluate(&samples, &previous, &config, now);

    let mut rendered = Vec::new();
    for (group, assessment) in &result {
        rendered.push(format!(
            "{group}:{} {}/{}",
            show_verdict(assessment.verdict),
            assessment.failed,
            assessment.considered
        ));
    }
    let actual = if rendered.is_empty() {
        "-".to_owned()
    } else {
        rendered.join(" ")
    };
    let expected = expected.split_whitespace().collect::<Vec<_>>().join(" ");
    if actual == expected {
        Ok(())
    } else {
        Err(format!("expected: {expected}\n  actual:   {actual}"))
    }
}

fn show_verdict(verdict: BrakeVerdict) -> String {
    match verdict {
        BrakeVerdict::Holding { since } => format!("hold@{}", show_time(since)),
        BrakeVerdict::Released { since: Some(since) } => format!("rel@{}", show_time(since)),
        BrakeVerdict::Released { since: None } => "rel".to_owned(),
    }
}

fn parse_config(text: &str) -> Result<BrakeConfig, String> {
    let mut config = BrakeConfig {
        enabled: true,
        ratio: 1.0,
        min_failed: 3,
        window_millis: 300_000,
    };
    for word in text.split_whitespace() {
        let bad = || format!("bad config word `{word}`");
        match word.split_once('=') {
            Some(("r", v)) => config.ratio = v.parse().map_err(|_| bad())?,
            Some(("min", v)) => config.min_failed = v.parse().map_err(|_| bad())?,
            Some(("w", v)) => config.window_millis = parse_time(v)?.millis(),
            None if word == "off" => config.enabled = false,
            _ => return Err(bad()),
        }
    }
    Ok(config)
}

fn parse_samples(text: &str) -> Result<Vec<FleetSample<String>>, String> {
    let mut samples = Vec::new();
    for word in text.split_whitespace().filter(|w| *w != "-") {
        let bad = || format!("a sample is `group:[N]F@T` or `group:[N]ok@T`, not `{word}`");
        let (group, rest) = word.split_once(':').ok_or_else(bad)?;
        let (what, at) = rest.split_once('@').ok_or_else(bad)?;
        let (count, failed) = if let Some(count) = what.strip_suffix("ok") {
            (count, false)
        } else if let Some(count) = what.strip_suffix('F') {
            (count, true)
        } else {
            return Err(bad());
        };
        let count: usize = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|_| bad())?
        };
        let at = parse_time(at)?;
        samples.extend((0..count).map(|_| FleetSample {
            group: group.to_owned(),
            failed,
            at,
        }));
    }
    Ok(samples)
}

fn parse_previous(text: &str) -> Result<BTreeMap<String, BrakeVerdict>, String> {
    let mut previous = BTreeMap::new();
    for word in text.split_whitespace().filter(|w| *w != "-") {
        let bad =
            || format!("a previous verdict is `group:hold@T` or `group:rel[@T]`, not `{word}`");
        let (group, verdict) = word.split_once(':').ok_or_else(bad)?;
        let verdict = match verdict.split_once('@') {
            None if verdict == "rel" => BrakeVerdict::NEVER_ENGAGED,
            Some(("rel", at)) => BrakeVerdict::Released {
                since: Some(parse_time(at)?),
            },
            Some(("hold", at)) => BrakeVerdict::Holding {
                since: parse_time(at)?,
            },
            _ => return Err(bad()),
        };
        previous.insert(group.to_owned(), verdict);
    }
    Ok(previous)
}

/// Which probes make the store assess the fleet again: a failure while released, a
/// healthy conclusive outcome or a switched-off brake while holding — nothing else.
#[test]
fn only_an_outcome_that_can_change_the_verdict_asks_for_an_assessment() {
    let on = BrakeConfig {
        enabled: true,
        ratio: 1.0,
        min_failed: 3,
        window_millis: 300_000,
    };
    let off = BrakeConfig {
        enabled: false,
        ..on
    };
    let released = BrakeVerdict::NEVER_ENGAGED;
    let holding = BrakeVerdict::Holding {
        since: Timestamp(1),
    };
    // (before, failed, conclusive, config) => assess
    let cases = [
        (released, true, true, on, true),
        (released, false, true, on, false),
        (released, false, false, on, false),
        (released, true, true, off, true),
        (holding, false, true, on, true),
        (holding, true, true, on, false),
        (holding, true, true, off, true),
        (holding, false, false, on, false),
        (holding, false, false, off, true),
    ];
    for (before, failed, conclusive, config, expected) in cases {
        assert_eq!(
            brake::needs_assessment(before, failed, conclusive, &config),
            expected,
            "before {before:?}, failed {failed}, conclusive {conclusive}, enabled {}",
            config.enabled
        );
    }
}

/// The window covers at least one interval of every cluster of the fleet.
#[test]
fn the_fleet_window_is_at_least_the_largest_interval() {
    let config = BrakeConfig {
        enabled: true,
        ratio: 1.0,
        min_failed: 3,
        window_millis: 300_000,
    };
    assert_eq!(config.for_fleet(0).window_millis, 300_000);
    assert_eq!(config.for_fleet(120_000).window_millis, 300_000);
    assert_eq!(config.for_fleet(900_000).window_millis, 900_000);
    assert_eq!(
        config.for_fleet(900_000).min_failed,
        3,
        "only the window changes"
    );
}

/// What a store that counts the window itself gets from [`brake::assess`] is what
/// [`brake::evaluate`] says of the samples behind the same counts, for every tally of up
/// to six clusters, every previous verdict and a few settings.
#[test]
fn a_tally_gives_the_verdict_of_its_samples() {
    let now = Timestamp::from_secs(1_000);
    let configs = [
        (1.0, 3, true),
        (0.5, 1, true),
        (0.8, 2, true),
        (1.0, 3, false),
    ];
    let previous = [
        BrakeVerdict::NEVER_ENGAGED,
        BrakeVerdict::Released {
            since: Some(Timestamp::from_secs(500)),
        },
        BrakeVerdict::Holding {
            since: Timestamp::from_secs(900),
        },
    ];
    for (ratio, min_failed, enabled) in configs {
        let config = BrakeConfig {
            enabled,
            ratio,
            min_failed,
            window_millis: 60_000,
        };
        for before in previous {
            for considered in 0..=6_u32 {
                for failed in 0..=considered {
                    let samples: Vec<FleetSample<&str>> = (0..considered)
                        .map(|i| FleetSample {
                            group: "fleet",
                            failed: i < failed,
                            at: now,
                        })
                        .collect();
                    let previous = BTreeMap::from([("fleet", before)]);
                    let evaluated = brake::evaluate(&samples, &previous, &config, now)["fleet"];
                    assert_eq!(
                        brake::assess(considered, failed, before, &config, now),
                        evaluated,
                        "{failed}/{considered}, {before:?}, {config:?}"
                    );
                }
            }
        }
    }
}
