//! What a status page reads: each cluster's uptime over long windows, its probe latency
//! over time, and the fleet at a glance.
//!
//! Uptime is computed by [`crate::availability`] from four records: the clusters'
//! `status-changed` events, their `probing-disabled` condition set and cleared, the brake's
//! `brake-engaged` and `brake-released` events, and the engines' coverage
//! (`engine_coverage`: a row per run of an engine, opened when its worker starts, moved on
//! by a heartbeat every [`COVERAGE_HEARTBEAT`], closed at a clean stop). The history is pruned after its retention, so each finished UTC day is rolled up
//! per cluster (`uptime_daily`, kept [`UPTIME_DAYS_KEPT`] days) by the retention pass
//! ([`Store::roll_up_uptime`]); the current day, and any day not rolled up yet, is computed
//! from the history when asked.
//!
//! Probe latency is kept per cluster and five-minute bucket (`probe_latency`: probes, total
//! and maximum duration), written by the probe's own transaction, kept
//! [`LATENCY_KEPT_MILLIS`].

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::time::Duration;

use vigil_decision::{ClusterId, ClusterStatus, Condition, ConditionType, Timestamp};

use super::availability::{
    self, ClusterHistory, MILLIS_PER_DAY, Span, Split, StatusChange, Watched, day_of,
};
use super::{Backend, Store, StoreError, Tx, commit, not_found, parse_status, query_error};

/// How often a running engine moves its coverage row's heartbeat on.
pub const COVERAGE_HEARTBEAT: Duration = Duration::from_secs(60);

/// An open coverage row whose heartbeat is younger than this counts as running until now;
/// an older one ended at its heartbeat (its engine is gone). Three heartbeats, so that a
/// slow database does not show a running engine as gone.
const COVERAGE_FRESH_MILLIS: i64 = 3 * 60_000;

/// How many days the daily rollups are kept.
pub const UPTIME_DAYS_KEPT: i64 = 400;

/// The width of a probe latency bucket.
pub const LATENCY_BUCKET_MILLIS: i64 = 300_000;

/// How long probe latency buckets are kept: a week.
pub const LATENCY_KEPT_MILLIS: i64 = 7 * MILLIS_PER_DAY;

/// How many rollups one transaction writes: a large fleet's day is written in several
/// short transactions, so that the worker's writes get in between.
const ROLLUP_BATCH: usize = 2_000;

/// A run of an engine, as recorded in the coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoverageId(pub i64);

/// What [`Store::roll_up_uptime`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolledUp {
    /// The finished days rolled up (or rolled up again).
    pub days: u64,
    /// Rollups written.
    pub rollups: u64,
    /// Rollups, latency buckets and coverage rows pruned for their age.
    pub pruned: u64,
}

/// One UTC day of a cluster (or the part of it up to now, for today).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayUptime {
    /// The day, numbered from the epoch.
    pub day: i64,
    /// The span it covers: the whole day, or today up to now.
    pub span: Span,
    /// Its milliseconds in each class.
    pub split: Split,
}

/// A cluster's uptime: its last days, and the last 24 hours.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterUptime {
    /// The cluster's name.
    pub cluster: String,
    /// Its status now.
    pub status: ClusterStatus,
    /// When this was computed.
    pub now: Timestamp,
    /// Its last days, oldest first, today (up to now) last.
    pub days: Vec<DayUptime>,
    /// The 24 hours up to now.
    pub last_24h: Split,
}

/// The probes of one latency bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyBucket {
    /// The bucket's start.
    pub start: Timestamp,
    /// How many conclusive probes ended in it.
    pub probes: u64,
    /// Their durations added up, in milliseconds.
    pub total_ms: u64,
    /// The longest of them, in milliseconds.
    pub max_ms: u64,
}

/// How many clusters have each status, overall and per label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetSummary {
    /// Per status, over the whole fleet.
    pub statuses: BTreeMap<ClusterStatus, u64>,
    /// Per label (key and value), per status.
    pub labels: BTreeMap<(String, String), BTreeMap<ClusterStatus, u64>>,
}

/// A `status-changed` event's details.
#[derive(serde::Deserialize)]
struct StatusChangedDetail {
    from: String,
    to: String,
}

/// What the history holds from some instant on: each cluster's status changes and the
/// brake's, when a cluster's probing was disabled or enabled again, and the engines'
/// coverage.
struct History {
    changes: HashMap<i64, Vec<StatusChange>>,
    disabled: HashMap<i64, Vec<(i64, bool)>>,
    brake_events: Vec<(i64, bool)>,
    brake_holding: bool,
    coverage: Vec<Span>,
}

impl History {
    /// When vigil watched during `span`.
    fn watched(&self, span: Span) -> Watched {
        let brake = availability::flag_spans(span, &self.brake_events, self.brake_holding);
        Watched::new(&self.coverage, &brake)
    }
}

/// A cluster as the uptime reads it.
struct UptimeCluster {
    id: i64,
    name: String,
    status: ClusterStatus,
    first_seen: i64,
    /// Its probing is disabled now.
    disabled: bool,
}

impl Store {
    /// Records that an engine runs from `now` on (a worker started): a coverage row of
    /// `replica` (`""` alone on SQLite). Any row of the same replica still open is one
    /// whose engine died without stopping: it is closed at its last heartbeat.
    pub async fn open_coverage(
        &self,
        replica: &str,
        now: Timestamp,
    ) -> Result<CoverageId, StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "UPDATE engine_coverage SET stopped = heartbeat WHERE replica = $1 AND stopped IS NULL",
        )
        .bind(replica)
        .execute(&mut *tx)
        .await
        .map_err(query_error("closing a crashed engine's coverage"))?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO engine_coverage (replica, started, heartbeat) VALUES ($1, $2, $2) \
             RETURNING id",
        )
        .bind(replica)
        .bind(now.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error("recording an engine's start"))?;
        commit(tx, "committing an engine's start").await?;
        Ok(CoverageId(id))
    }

    /// Records that the engine of `run` still runs at `now`.
    pub async fn extend_coverage(&self, run: CoverageId, now: Timestamp) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE engine_coverage SET heartbeat = $1 WHERE id = $2 AND stopped IS NULL \
             AND heartbeat < $1",
        )
        .bind(now.0)
        .bind(run.0)
        .execute(&self.pool)
        .await
        .map_err(query_error("recording an engine's heartbeat"))?;
        Ok(())
    }

    /// Records that the engine of `run` stopped cleanly at `now`.
    pub async fn close_coverage(&self, run: CoverageId, now: Timestamp) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE engine_coverage SET heartbeat = $1, stopped = $1 WHERE id = $2 \
             AND stopped IS NULL",
        )
        .bind(now.0)
        .bind(run.0)
        .execute(&self.pool)
        .await
        .map_err(query_error("recording an engine's stop"))?;
        Ok(())
    }

    /// Rolls up each cluster's finished days (UTC, before `now`'s) into `uptime_daily`:
    /// the days after the last one rolled up, and that one again (it may have been rolled
    /// up before the engine's last heartbeat of it). Only days the history still holds
    /// whole are rolled up: from the first day after `history_from` (the retention's
    /// cutoff), and not before the first engine ever recorded ran. Idempotent: a day rolled
    /// up again is overwritten. Then prunes rollups older than [`UPTIME_DAYS_KEPT`] days,
    /// latency buckets older than [`LATENCY_KEPT_MILLIS`], and coverage older than both.
    pub async fn roll_up_uptime(
        &self,
        now: Timestamp,
        history_from: Timestamp,
    ) -> Result<RolledUp, StoreError> {
        let mut done = RolledUp::default();
        let today = day_of(now.0);
        let last_rolled: Option<i64> = sqlx::query_scalar("SELECT MAX(day) FROM uptime_daily")
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("reading the rollups"))?;
        let first_run: Option<i64> = sqlx::query_scalar("SELECT MIN(started) FROM engine_coverage")
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("reading the engines' coverage"))?;
        if let Some(first_run) = first_run {
            let first_day = last_rolled
                .unwrap_or_else(|| day_of(first_run))
                .max(day_of(history_from.0) + 1)
                .max(today - UPTIME_DAYS_KEPT);
            if first_day < today {
                let clusters = self.uptime_clusters(None).await?;
                let history = self
                    .history_since(Span::day(first_day).from, None, now)
                    .await?;
                for day in first_day..today {
                    done.rollups += self.roll_up_day(day, &clusters, &history).await?;
                    done.days += 1;
                }
            }
        }
        done.pruned = self.prune_uptime(now).await?;
        Ok(done)
    }

    /// Writes the rollups of `day` for every cluster known before its end.
    async fn roll_up_day(
        &self,
        day: i64,
        clusters: &[UptimeCluster],
        history: &History,
    ) -> Result<u64, StoreError> {
        let span = Span::day(day);
        let watched = history.watched(span);
        let rows: Vec<(i64, Split)> = clusters
            .iter()
            .filter(|c| c.first_seen < span.to)
            .map(|c| (c.id, history.split(c, span, &watched)))
            .collect();
        for batch in rows.chunks(ROLLUP_BATCH) {
            let mut tx = self.begin_write().await?;
            for (cluster, split) in batch {
                upsert_rollup(&mut tx, *cluster, day, split).await?;
            }
            commit(tx, "committing uptime rollups").await?;
            tokio::task::yield_now().await;
        }
        Ok(rows.len() as u64)
    }

    /// Deletes the rollups, latency buckets and coverage older than they are kept.
    async fn prune_uptime(&self, now: Timestamp) -> Result<u64, StoreError> {
        let oldest_day = day_of(now.0) - UPTIME_DAYS_KEPT;
        let mut pruned = 0;
        let mut tx = self.begin_write().await?;
        for (sql, bound, doing) in [
            (
                "DELETE FROM uptime_daily WHERE day < $1",
                oldest_day,
                "pruning uptime rollups",
            ),
            (
                "DELETE FROM probe_latency WHERE bucket < $1",
                now.0 - LATENCY_KEPT_MILLIS,
                "pruning probe latency",
            ),
            (
                "DELETE FROM engine_coverage WHERE stopped < $1",
                Span::day(oldest_day).from,
                "pruning the engines' coverage",
            ),
        ] {
            pruned += sqlx::query(sql)
                .bind(bound)
                .execute(&mut *tx)
                .await
                .map_err(query_error(doing))?
                .rows_affected();
        }
        commit(tx, "committing pruned uptime").await?;
        Ok(pruned)
    }

    /// The uptime of cluster `name` as of `now`: its last `days` UTC days (today, up to
    /// `now`, among them), from their rollups where a day has one and from the history
    /// otherwise, and the 24 hours up to `now`.
    pub async fn cluster_uptime(
        &self,
        name: &str,
        now: Timestamp,
        days: u32,
    ) -> Result<ClusterUptime, StoreError> {
        let cluster = self
            .uptime_clusters(Some(name))
            .await?
            .pop()
            .ok_or_else(|| not_found("cluster", name))?;
        let today = day_of(now.0);
        let first_day = today - i64::from(days.max(1)) + 1;
        let rollups: BTreeMap<i64, Split> = sqlx::query_as::<_, (i64, i64, i64, i64, i64)>(
            "SELECT day, online, offline, unknown, no_data FROM uptime_daily \
             WHERE cluster_id = $1 AND day >= $2 AND day < $3",
        )
        .bind(cluster.id)
        .bind(first_day)
        .bind(today)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading uptime rollups"))?
        .into_iter()
        .map(|(day, online, offline, unknown, no_data)| {
            (
                day,
                Split {
                    online,
                    offline,
                    unknown,
                    no_data,
                },
            )
        })
        .collect();
        let last_24h = Span::new(now.0 - MILLIS_PER_DAY, now.0);
        // The history is read from the first instant computed from it: the oldest day
        // without a rollup, or the last 24 hours; never before the cluster was known.
        let live_from = (first_day..today)
            .find(|day| !rollups.contains_key(day))
            .map_or(last_24h.from, |day| Span::day(day).from.min(last_24h.from))
            .max(cluster.first_seen);
        let history = self
            .history_since(live_from, Some(ClusterId(cluster.id)), now)
            .await?;
        let live = |span: Span| {
            let watched = history.watched(span);
            history.split(&cluster, span, &watched)
        };
        let until_now = Span::new(Span::day(first_day).from, now.0);
        let days = (first_day..=today)
            .filter_map(|day| {
                // Today, at its first millisecond, has no part that has passed.
                let span = Span::day(day).clip(until_now)?;
                let split = availability::combine(span, &rollups, live);
                Some(DayUptime { day, span, split })
            })
            .collect();
        let last_24h = availability::combine(last_24h, &rollups, live);
        Ok(ClusterUptime {
            status: cluster.status,
            cluster: cluster.name,
            now,
            days,
            last_24h,
        })
    }

    /// The latency buckets of cluster `name` starting at or after `since`, oldest first.
    pub async fn probe_latency(
        &self,
        name: &str,
        since: Timestamp,
    ) -> Result<Vec<LatencyBucket>, StoreError> {
        let id: Option<i64> =
            sqlx::query_scalar("SELECT id FROM clusters WHERE name = $1 AND ignored = 0")
                .bind(name)
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error("reading a cluster"))?;
        let id = id.ok_or_else(|| not_found("cluster", name))?;
        let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT bucket, probes, total_ms, max_ms FROM probe_latency \
             WHERE cluster_id = $1 AND bucket >= $2 ORDER BY bucket",
        )
        .bind(id)
        .bind(since.0 - since.0.rem_euclid(LATENCY_BUCKET_MILLIS))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading probe latency"))?;
        Ok(rows
            .into_iter()
            .map(|(start, probes, total_ms, max_ms)| LatencyBucket {
                start: Timestamp(start),
                probes: probes.unsigned_abs(),
                total_ms: total_ms.unsigned_abs(),
                max_ms: max_ms.unsigned_abs(),
            })
            .collect())
    }

    /// How many clusters have each status, over the fleet and per label (every label, or
    /// only those whose key is `label`): two aggregate queries, whatever the fleet's size.
    pub async fn fleet_summary(&self, label: Option<&str>) -> Result<FleetSummary, StoreError> {
        let statuses = self.status_counts().await?;
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT l.key, CAST(l.value AS TEXT), c.status, COUNT(*) \
                 FROM clusters c, json_each(c.labels) l \
                 WHERE c.ignored = 0 AND ($1 IS NULL OR l.key = $2) \
                 GROUP BY l.key, CAST(l.value AS TEXT), c.status"
            }
            Backend::Postgres => {
                "SELECT l.key, l.value, c.status, COUNT(*) \
                 FROM clusters c, jsonb_each_text(c.labels::jsonb) l \
                 WHERE c.ignored = 0 AND ($1::text IS NULL OR l.key = $2) \
                 GROUP BY l.key, l.value, c.status"
            }
        };
        let rows: Vec<(String, Option<String>, String, i64)> = sqlx::query_as(sql)
            .bind(label)
            .bind(label)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("counting clusters by label"))?;
        let mut labels: BTreeMap<(String, String), BTreeMap<ClusterStatus, u64>> = BTreeMap::new();
        for (key, value, status, count) in rows {
            *labels
                .entry((key, value.unwrap_or_default()))
                .or_default()
                .entry(parse_status(&status)?)
                .or_default() += count.unsigned_abs();
        }
        Ok(FleetSummary { statuses, labels })
    }

    /// The clusters the uptime covers (not deleted), or the one named `name`.
    async fn uptime_clusters(&self, name: Option<&str>) -> Result<Vec<UptimeCluster>, StoreError> {
        // One cluster is read through the index on its name, which an `OR` would forgo.
        let rows: Vec<(i64, String, String, i64, String)> = match name {
            Some(name) => sqlx::query_as(
                "SELECT id, name, status, first_seen, conditions FROM clusters \
                 WHERE ignored = 0 AND name = $1",
            )
            .bind(name),
            None => sqlx::query_as(
                "SELECT id, name, status, first_seen, conditions FROM clusters \
                 WHERE ignored = 0 ORDER BY id",
            ),
        }
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading clusters"))?;
        rows.into_iter()
            .map(|(id, name, status, first_seen, conditions)| {
                let conditions: Vec<Condition> =
                    serde_json::from_str(&conditions).map_err(|e| StoreError::Corrupt {
                        what: "conditions",
                        reason: e.to_string(),
                    })?;
                Ok(UptimeCluster {
                    id,
                    name,
                    status: parse_status(&status)?,
                    first_seen,
                    disabled: conditions
                        .iter()
                        .any(|c| c.kind == ConditionType::ProbingDisabled),
                })
            })
            .collect()
    }

    /// The status changes (of `cluster`, or of every cluster), the brake's changes and the
    /// engines' coverage from `from` on.
    async fn history_since(
        &self,
        from: i64,
        cluster: Option<ClusterId>,
        now: Timestamp,
    ) -> Result<History, StoreError> {
        // One cluster's changes are read through the index on its events, which an `OR`
        // would forgo; the whole fleet's are read in one pass.
        let rows: Vec<(i64, i64, String)> = match cluster {
            Some(cluster) => sqlx::query_as(
                "SELECT cluster_id, at, detail FROM events WHERE cluster_id = $1 \
                 AND kind = 'status-changed' AND at >= $2 ORDER BY at, id",
            )
            .bind(cluster.0)
            .bind(from),
            None => sqlx::query_as(
                "SELECT cluster_id, at, detail FROM events WHERE kind = 'status-changed' \
                 AND at >= $1 AND cluster_id IS NOT NULL ORDER BY at, id",
            )
            .bind(from),
        }
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading status changes"))?;
        let mut changes: HashMap<i64, Vec<StatusChange>> = HashMap::new();
        for (cluster, at, detail) in rows {
            let corrupt = |reason: String| StoreError::Corrupt {
                what: "status-changed event",
                reason,
            };
            let detail: StatusChangedDetail =
                serde_json::from_str(&detail).map_err(|e| corrupt(e.to_string()))?;
            let status =
                |text: &str| ClusterStatus::from_str(text).map_err(|e| corrupt(e.to_string()));
            changes.entry(cluster).or_default().push(StatusChange {
                at,
                from: status(&detail.from)?,
                to: status(&detail.to)?,
            });
        }
        let disabled = self.probing_disabled_since(from, cluster).await?;
        let brake_events: Vec<(i64, bool)> = sqlx::query_as::<_, (i64, String)>(
            "SELECT at, kind FROM events WHERE cluster_id IS NULL \
             AND kind IN ('brake-engaged', 'brake-released') AND at >= $1 ORDER BY at, id",
        )
        .bind(from)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading the brake's history"))?
        .into_iter()
        .map(|(at, kind)| (at, kind == "brake-engaged"))
        .collect();
        let brake_holding = self.brake_state().await?.verdict.holds();
        let coverage = sqlx::query_as::<_, (i64, i64, Option<i64>)>(
            "SELECT started, heartbeat, stopped FROM engine_coverage \
             WHERE started < $1 AND (stopped IS NULL OR stopped > $2) ORDER BY started",
        )
        .bind(now.0)
        .bind(from)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading the engines' coverage"))?
        .into_iter()
        .map(|(started, heartbeat, stopped)| {
            availability::coverage_span(started, heartbeat, stopped, now.0, COVERAGE_FRESH_MILLIS)
        })
        .collect();
        Ok(History {
            changes,
            disabled,
            brake_events,
            brake_holding,
            coverage,
        })
    }
}

impl Store {
    /// When each cluster's probing was disabled (`true`) or enabled again (`false`) from
    /// `from` on, oldest first: its `probing-disabled` condition set and cleared.
    async fn probing_disabled_since(
        &self,
        from: i64,
        cluster: Option<ClusterId>,
    ) -> Result<HashMap<i64, Vec<(i64, bool)>>, StoreError> {
        let kinds = "kind IN ('condition-set', 'condition-cleared') \
                     AND detail LIKE '%probing-disabled%'";
        let rows: Vec<(i64, i64, String, String)> = match cluster {
            Some(cluster) => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT cluster_id, at, kind, detail FROM events WHERE cluster_id = $1 \
                 AND {kinds} AND at >= $2 ORDER BY at, id"
            )))
            .bind(cluster.0)
            .bind(from),
            None => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT cluster_id, at, kind, detail FROM events WHERE cluster_id IS NOT NULL \
                 AND {kinds} AND at >= $1 ORDER BY at, id"
            )))
            .bind(from),
        }
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading when probing was disabled"))?;
        let mut disabled: HashMap<i64, Vec<(i64, bool)>> = HashMap::new();
        for (cluster, at, kind, detail) in rows {
            let detail: serde_json::Value =
                serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
                    what: "condition event",
                    reason: e.to_string(),
                })?;
            let about = if kind == "condition-set" {
                &detail["condition"]["type"]
            } else {
                &detail["kind"]
            };
            if about == ConditionType::ProbingDisabled.as_str() {
                disabled
                    .entry(cluster)
                    .or_default()
                    .push((at, kind == "condition-set"));
            }
        }
        Ok(disabled)
    }
}

impl History {
    /// How `span` splits for `cluster`.
    fn split(&self, cluster: &UptimeCluster, span: Span, watched: &Watched) -> Split {
        // A deleted cluster's id may be given to a new one: what happened before the new
        // one was known is not its own.
        let changes: Vec<StatusChange> = self
            .changes
            .get(&cluster.id)
            .map(|all| {
                all.iter()
                    .copied()
                    .filter(|c| c.at >= cluster.first_seen)
                    .collect()
            })
            .unwrap_or_default();
        let disabled = availability::flag_spans(
            span,
            self.disabled.get(&cluster.id).map_or(&[], Vec::as_slice),
            cluster.disabled,
        );
        let history = ClusterHistory {
            first_seen: cluster.first_seen,
            current: cluster.status,
            changes: &changes,
            unwatched: &disabled,
        };
        availability::split(span, &history, watched)
    }
}

async fn upsert_rollup(
    tx: &mut Tx,
    cluster: i64,
    day: i64,
    split: &Split,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO uptime_daily (cluster_id, day, online, offline, unknown, no_data) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (cluster_id, day) DO UPDATE SET \
         online = excluded.online, offline = excluded.offline, unknown = excluded.unknown, \
         no_data = excluded.no_data",
    )
    .bind(cluster)
    .bind(day)
    .bind(split.online)
    .bind(split.offline)
    .bind(split.unknown)
    .bind(split.no_data)
    .execute(&mut **tx)
    .await
    .map_err(query_error("writing an uptime rollup"))?;
    Ok(())
}

/// Adds a conclusive probe's duration to its cluster's latency bucket, inside the probe
/// result's transaction: one statement.
pub(crate) async fn record_latency(
    tx: &mut Tx,
    cluster: ClusterId,
    ended: Timestamp,
    duration: Duration,
) -> Result<(), StoreError> {
    let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO probe_latency (cluster_id, bucket, probes, total_ms, max_ms) \
         VALUES ($1, $2, 1, $3, $3) ON CONFLICT (cluster_id, bucket) DO UPDATE SET \
         probes = probe_latency.probes + 1, \
         total_ms = probe_latency.total_ms + excluded.total_ms, \
         max_ms = CASE WHEN excluded.max_ms > probe_latency.max_ms \
           THEN excluded.max_ms ELSE probe_latency.max_ms END",
    )
    .bind(cluster.0)
    .bind(ended.0 - ended.0.rem_euclid(LATENCY_BUCKET_MILLIS))
    .bind(millis)
    .execute(&mut **tx)
    .await
    .map_err(query_error("recording a probe's latency"))?;
    Ok(())
}
