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
/// vigil running, the mass-failure brake holding, the cluster not known yet); the uptime
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
    /// RFC 3339 (`2026-01-31T12:00:00Z`): the buckets from the one holding this instant
    /// on. Default: 24 hours ago. Buckets are kept a week.
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
                "since must be an RFC 3339 time in UTC, e.g. 2026-01-31T12:00:00Z",
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

/// An RFC 3339 time in UTC, as milliseconds since the epoch.
fn parse_time(text: &str) -> Option<Timestamp> {
    let at = humantime::parse_rfc3339(text).ok()?;
    let millis = match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).ok()?,
        Err(before) => i64::try_from(before.duration().as_millis())
            .ok()?
            .checked_neg()?,
    };
    Some(Timestamp(millis))
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
