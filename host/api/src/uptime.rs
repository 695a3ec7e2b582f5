//! What a status page reads beside the clusters: `/api/v1/clusters/{name}/uptime`,
//! `/api/v1/clusters/{name}/latency` and `/api/v1/summary`. The store computes; this
//! module picks the windows and shapes the answers.

use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use vigil_decision::Timestamp;
use vigil_store::availability::{MILLIS_PER_DAY, Span, Split};
use vigil_store::{DayUptime, LATENCY_BUCKET_MILLIS};

use super::ApiState;
use super::extract::{ApiPath, ApiQuery};
use super::problem::Problem;
use super::views::{
    LabelGroupView, LatencyBucketView, LatencyView, StatusCountsView, SummaryView, UptimeDayView,
    UptimeSpanView, UptimeView, UptimeWindowView, rfc3339,
};

pub(super) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(cluster_uptime))
        .routes(routes!(cluster_latency))
        .routes(routes!(fleet_summary))
}

/// The windows of `/uptime` measured in days, beside the last 24 hours.
const DAY_WINDOWS: [u32; 3] = [7, 30, 90];

/// The most days `/uptime` lists: as many as the rollups are kept.
const MAX_DAYS: u32 = 400;

/// The `name` path parameter.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct ClusterName {
    /// The cluster's name.
    name: String,
}

/// Which days `/uptime` lists.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct UptimeQuery {
    /// How many UTC days to list, today included, 1–400 (default 90).
    #[param(minimum = 1, maximum = 400)]
    days: Option<u32>,
}

/// A cluster's uptime: over the last 24 hours and the last 7, 30 and 90 UTC days (today,
/// up to now, the last of them), and day by day. Each span is split into the seconds vigil
/// watched the cluster `ONLINE`, `OFFLINE` or `UNKNOWN`, and the seconds with no data (no
/// vigil running, the mass-failure brake holding, its probing disabled, the cluster not
/// known yet); the uptime
/// is `ONLINE / (ONLINE + OFFLINE)`. Days older than the history come from daily rollups.
#[utoipa::path(get, path = "/api/v1/clusters/{name}/uptime", tag = "clusters",
    params(ClusterName, UptimeQuery),
    responses(
        (status = 200, description = "The cluster's uptime", body = UptimeView),
        (status = 400, description = "Invalid days", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    ))]
async fn cluster_uptime(
    State(state): State<ApiState>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
    ApiQuery(query): ApiQuery<UptimeQuery>,
) -> Result<axum::Json<UptimeView>, Problem> {
    let listed = match query.days {
        None => 90,
        Some(days) if (1..=MAX_DAYS).contains(&days) => days,
        Some(days) => {
            return Err(Problem::invalid(
                "query.days",
                format!("days must be between 1 and {MAX_DAYS}, not {days}"),
            ));
        }
    };
    let now = state.store.now().await?;
    let read = listed.max(DAY_WINDOWS[DAY_WINDOWS.len() - 1]);
    let uptime = state.store.cluster_uptime(&name, now, read).await?;
    let mut windows = vec![UptimeWindowView {
        window: "24h".to_owned(),
        span: UptimeSpanView::new(Span::new(now.0 - MILLIS_PER_DAY, now.0), &uptime.last_24h),
    }];
    for days in DAY_WINDOWS {
        windows.push(UptimeWindowView {
            window: format!("{days}d"),
            span: last_days(&uptime.days, days as usize),
        });
    }
    let days = uptime.days[uptime.days.len().saturating_sub(listed as usize)..]
        .iter()
        .map(|day| UptimeDayView {
            date: rfc3339(Timestamp(day.span.from))[..10].to_owned(),
            span: UptimeSpanView::new(day.span, &day.split),
        })
        .collect();
    Ok(axum::Json(UptimeView {
        cluster: uptime.cluster,
        status: uptime.status.as_str().to_owned(),
        at: rfc3339(uptime.now),
        windows,
        days,
    }))
}

/// The last `count` of `days` (oldest first), as one span.
fn last_days(days: &[DayUptime], count: usize) -> UptimeSpanView {
    let days = &days[days.len().saturating_sub(count)..];
    let mut split = Split::default();
    for day in days {
        split.add(day.split);
    }
    let span = match (days.first(), days.last()) {
        (Some(first), Some(last)) => Span::new(first.span.from, last.span.to),
        _ => Span::new(0, 0),
    };
    UptimeSpanView::new(span, &split)
}

/// From when `/latency` lists.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct LatencyQuery {
    /// An RFC 3339 time (`2026-01-31T12:00:00Z`): the buckets from the one holding this
    /// instant on. Default: 24 hours ago. Buckets are kept a week.
    #[param(format = DateTime)]
    since: Option<String>,
}

/// How long the cluster's conclusive probes took, per five-minute bucket: how many ended
/// in it, their mean and longest duration. Inconclusive and not-probeable outcomes are
/// not counted. Kept a week.
#[utoipa::path(get, path = "/api/v1/clusters/{name}/latency", tag = "clusters",
    params(ClusterName, LatencyQuery),
    responses(
        (status = 200, description = "The cluster's probe latency", body = LatencyView),
        (status = 400, description = "Invalid since", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    ))]
async fn cluster_latency(
    State(state): State<ApiState>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
    ApiQuery(query): ApiQuery<LatencyQuery>,
) -> Result<axum::Json<LatencyView>, Problem> {
    let since = match &query.since {
        Some(text) => parse_time(text).ok_or_else(|| {
            Problem::invalid(
                "query.since",
                "since must be an RFC 3339 time, e.g. 2026-01-31T12:00:00Z",
            )
        })?,
        None => state.store.now().await?.plus_millis(-MILLIS_PER_DAY),
    };
    let buckets = state.store.probe_latency(&name, since).await?;
    Ok(axum::Json(LatencyView {
        cluster: name,
        bucket_seconds: (LATENCY_BUCKET_MILLIS / 1000).unsigned_abs(),
        buckets: buckets.iter().map(LatencyBucketView::from).collect(),
    }))
}

/// An RFC 3339 `date-time` (`2026-01-31T12:00:00Z`, `2026-01-31t13:00:00.5+01:00`), as
/// milliseconds since the epoch: any year from 0000 to 9999, any offset, a leap second read
/// as the second before the next minute. `None` when the text is not one, or names a day
/// that does not exist.
fn parse_time(text: &str) -> Option<Timestamp> {
    let bytes = text.as_bytes();
    let number = |from: usize, len: usize| -> Option<i64> {
        let digits = bytes.get(from..from + len)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(digits).ok()?.parse().ok())
            .flatten()
    };
    let at = |i: usize, expected: &[u8]| bytes.get(i).is_some_and(|b| expected.contains(b));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt") && at(13, b":") && at(16, b":")) {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 2)?, number(8, 2)?);
    let (hour, minute, second) = (number(11, 2)?, number(14, 2)?, number(17, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=days_in_month).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        // Milliseconds: the first three digits, the rest dropped.
        let first: String = fraction[..digits]
            .chars()
            .chain("00".chars())
            .take(3)
            .collect();
        millis = first.parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let value = |d: &[u8]| i64::from(d[0] - b'0') * 10 + i64::from(d[1] - b'0');
            let (hours, minutes) = (value(&digits[..2]), value(&digits[2..]));
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 60 + minutes;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    // Days from the epoch to the civil date (proleptic Gregorian).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second.min(59) - offset_minutes * 60;
    Some(Timestamp(seconds * 1000 + millis))
}

/// Which labels `/summary` groups by.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct SummaryQuery {
    /// Only the labels with this key (default: every label).
    label: Option<String>,
}

/// The fleet at a glance: how many clusters have each status, whether the mass-failure
/// brake holds, and per label (`env=prod`: how many clusters carry it, and their
/// statuses). Two aggregate queries, whatever the fleet's size.
#[utoipa::path(get, path = "/api/v1/summary", tag = "clusters",
    params(SummaryQuery),
    responses(
        (status = 200, description = "The fleet's summary", body = SummaryView),
        (status = 400, description = "Invalid query", body = Problem, content_type = "application/problem+json"),
    ))]
async fn fleet_summary(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<SummaryQuery>,
) -> Result<axum::Json<SummaryView>, Problem> {
    let summary = state.store.fleet_summary(query.label.as_deref()).await?;
    let brake = state.store.brake_state().await?;
    let statuses = StatusCountsView::of(&summary.statuses);
    Ok(axum::Json(SummaryView {
        clusters: statuses.total(),
        statuses,
        brake_holding: brake.verdict.holds(),
        labels: summary
            .labels
            .iter()
            .map(|((key, value), counts)| {
                let statuses = StatusCountsView::of(counts);
                LabelGroupView {
                    key: key.clone(),
                    value: value.clone(),
                    clusters: statuses.total(),
                    statuses,
                }
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_every_rfc3339_date_time_and_nothing_else() {
        let check = |text: &str, want: Option<i64>| {
            assert_eq!(parse_time(text).map(|t| t.0), want, "{text}");
        };
        check("1970-01-01T00:00:00Z", Some(0));
        check("2026-01-31T12:00:00Z", Some(1_769_860_800_000));
        check("2026-01-31t13:00:00.5+01:00", Some(1_769_860_800_500));
        check("2026-01-31T11:30:00.123456-00:30", Some(1_769_860_800_123));
        check("2024-02-29T00:00:00Z", Some(1_709_164_800_000));
        check("1969-12-31T23:59:59.999Z", Some(-1));
        check("0000-01-01T00:00:00Z", Some(-62_167_219_200_000));
        check("2016-12-31T23:59:60Z", Some(1_483_228_799_000));
        for bad in [
            "yesterday",
            "2026-01-01",
            "2026-01-01T00:00:00",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+1:00",
            "2026-01-01T00:00:00+24:00",
            "2026-01-01 00:00:00Z",
            "+2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00ZZ",
            "２０２６-01-01T00:00:00Z",
        ] {
            check(bad, None);
        }
    }
}
