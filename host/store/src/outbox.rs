//! The notifications outbox: the transaction that records a notifiable event writes its
//! notification too ([`enqueue`], called by `insert_event`), and [`seal`] completes it as
//! the transaction commits, from the cluster's row as the change left it. A notification
//! therefore exists exactly when its change committed, and its body never changes: a
//! delivery repeated after a crash carries the same id and the same bytes.
//!
//! Each configured sink has a position in the outbox (`notify_sinks`): the last row it was
//! sent. A sender reads the rows after it in order ([`Store::outbox_after`]) and moves it
//! one row at a time ([`Store::sink_advanced`]) — so each sink receives its notifications
//! in order, one in flight. With several replicas a sink's rows are sent by the replica
//! that holds the sink's lease, and a position moves only under that lease: a replica
//! whose lease lapsed cannot move it, and the next holder sends the row again, with the
//! same id.

use serde::Serialize;
use sqlx::FromRow;
use vigil_decision::Timestamp;

use super::claims::DB_NOW;
use super::{Backend, Store, StoreError, Tx, query_error};

/// The event kinds that are notified: confirmed transitions, cascades and recoveries,
/// brake changes, plugin rollbacks.
pub const NOTIFIED_KINDS: &[&str] = &[
    "status-changed",
    "apps-degraded",
    "apps-restored",
    "brake-engaged",
    "brake-released",
    "plugin-rolled-back",
];

/// The name of the lease under which a replica sends `sink`'s notifications.
pub fn sink_lease(sink: &str) -> String {
    format!("notify:{sink}")
}

/// One notification, as committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow)]
pub struct OutboxRecord {
    /// The id of the event it notifies: the notification's stable id.
    pub event_id: i64,
    /// Its place in the order of delivery (with `event_id`).
    pub position: i64,
    /// When the event happened (milliseconds since the epoch).
    pub at: i64,
    /// The event's kind (one of [`NOTIFIED_KINDS`]).
    pub kind: String,
    /// The cluster concerned, if any.
    pub cluster_name: Option<String>,
    /// The cluster's labels (a JSON object) when the event was recorded.
    pub labels: String,
    /// The event as JSON: its details, the outage, the apps by name.
    pub payload: String,
    /// The cluster's reason class after the change, if any.
    pub reason_class: Option<String>,
    /// The cluster's reason after the change, if any.
    pub reason: Option<String>,
}

/// Where a sink stands: a position in the outbox, and what getting there cost.
///
/// A sink with several receiver URLs (Alertmanagers) has one position per URL, each
/// under a name of its own, so that a receiver that is down holds back only itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow)]
pub struct SinkRecord {
    /// The name of the position: the sink's name in the notifications configuration, or
    /// a name the sender derives from it for one of its receiver URLs.
    pub name: String,
    /// The position of the last row it was sent.
    pub position: i64,
    /// The event id of the last row it was sent.
    pub event_id: i64,
    /// Failed attempts at the next row.
    pub attempts: i64,
    /// Since when it counts as failing (too many failed attempts in a row), if it does.
    pub failing_since: Option<i64>,
    /// The last failure (no secret: the sender writes it).
    pub last_error: Option<String>,
    /// When it was last tried.
    pub last_attempt_at: Option<i64>,
    /// Rows delivered since it was first configured.
    pub delivered: i64,
    /// Rows passed over undelivered (refused for good, or after too many attempts).
    pub dead_letters: i64,
    /// The event of the last row passed over undelivered.
    pub last_dead_letter_event: Option<i64>,
    /// Why it was passed over (no secret: the sender writes it).
    pub last_dead_letter_error: Option<String>,
}

/// How a sink moved past a row ([`Store::sink_advanced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed<'a> {
    /// The receiver accepted it.
    Delivered,
    /// The sink's filter leaves it out.
    Filtered,
    /// The receiver refused it for good, or too many times: it is not sent again, and
    /// `error` says why.
    DeadLettered {
        /// Why, in the sender's words (no secret).
        error: &'a str,
    },
}

/// Writes the notification of event `event_id` when `kind` is notified: called in the
/// transaction that records the event. (No notified kind has an actor: they are the
/// engine's own conclusions.)
pub(crate) async fn enqueue(
    tx: &mut Tx,
    event_id: i64,
    now: Timestamp,
    cluster: Option<(i64, &str)>,
    outage: Option<i64>,
    kind: &str,
    detail: &serde_json::Value,
) -> Result<(), StoreError> {
    if !NOTIFIED_KINDS.contains(&kind) {
        return Ok(());
    }
    let mut payload = serde_json::json!({ "detail": detail });
    if let Some(outage) = outage {
        payload["outage"] = outage.into();
    }
    // Cascades name their apps by id; a receiver wants their names (`insert_event` added
    // them to the detail).
    if detail.get("apps").is_some() {
        let names = detail
            .get("app_names")
            .cloned()
            .unwrap_or_else(|| serde_json::json!([]));
        // A cascade that touched no app tells nothing.
        if names.as_array().is_none_or(Vec::is_empty) {
            return Ok(());
        }
        payload["apps"] = names;
    }
    let position = match Backend::of(tx) {
        Backend::Sqlite => Some(event_id),
        // Stamped as the transaction commits ([`seal`]).
        Backend::Postgres => None,
    };
    sqlx::query(
        "INSERT INTO outbox (event_id, position, at, kind, cluster_name, labels, payload) \
         VALUES ($1, $2, $3, $4, $5, \
           COALESCE((SELECT labels FROM clusters WHERE id = $6), '{}'), $7)",
    )
    .bind(event_id)
    .bind(position)
    .bind(now.0)
    .bind(kind)
    .bind(cluster.map(|c| c.1))
    .bind(cluster.map(|c| c.0))
    .bind(payload.to_string())
    .execute(&mut **tx)
    .await
    .map_err(query_error("writing a notification"))?;
    Ok(())
}

/// The names of the apps a cascade's `detail` lists by id (`apps`), in its order; `None`
/// when the detail lists no apps.
pub(crate) async fn app_names(
    tx: &mut Tx,
    detail: &serde_json::Value,
) -> Result<Option<Vec<String>>, StoreError> {
    let Some(ids) = detail.get("apps").and_then(serde_json::Value::as_array) else {
        return Ok(None);
    };
    let mut names = Vec::with_capacity(ids.len());
    for id in ids.iter().filter_map(serde_json::Value::as_i64) {
        let name: Option<String> = sqlx::query_scalar("SELECT name FROM apps WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(query_error("naming the apps of a cascade"))?;
        names.extend(name);
    }
    Ok(Some(names))
}

/// Completes the notifications written by the committing transaction with the reason of
/// their cluster as the transaction leaves it, and on PostgreSQL stamps them with the
/// transaction's commit stamp (`stamp`, `None` when it wrote no event).
pub(crate) async fn seal(tx: &mut Tx, stamp: Option<i64>) -> Result<(), StoreError> {
    const REASON: &str = "reason_class = (SELECT last_reason_class FROM clusters c \
           WHERE c.name = outbox.cluster_name), \
         reason = (SELECT last_reason FROM clusters c WHERE c.name = outbox.cluster_name)";
    match Backend::of(tx) {
        // One writer at a time: the unsealed rows are this transaction's.
        Backend::Sqlite => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE outbox SET {REASON}, sealed = 1 WHERE sealed = 0"
            )))
            .execute(&mut **tx)
            .await
        }
        Backend::Postgres => {
            let Some(stamp) = stamp else { return Ok(()) };
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE outbox SET {REASON}, position = $1 \
                 WHERE position IS NULL AND txid = pg_current_xact_id()"
            )))
            .bind(stamp)
            .execute(&mut **tx)
            .await
        }
    }
    .map_err(query_error("sealing notifications"))?;
    Ok(())
}

const OUTBOX_COLUMNS: &str =
    "event_id, position, at, kind, cluster_name, labels, payload, reason_class, reason";

const SINK_COLUMNS: &str = "name, position, event_id, attempts, failing_since, last_error, \
     last_attempt_at, delivered, dead_letters, last_dead_letter_event, last_dead_letter_error";

/// The condition that `holder` still holds `sink`'s lease, on PostgreSQL (`$LEASE` and
/// `$HOLDER` are the given parameter numbers); nothing on SQLite, where one engine holds
/// every lease.
fn lease_held(backend: Backend, lease: usize, holder: usize) -> String {
    match backend {
        Backend::Sqlite => String::new(),
        Backend::Postgres => format!(
            " AND EXISTS (SELECT 1 FROM leases WHERE name = ${lease} AND holder = ${holder} \
             AND expires > {DB_NOW})"
        ),
    }
}

impl Store {
    /// Adds `sink` unless it is known already, and answers where it stands. A new sink
    /// starts where the known position `from` stands, if given and known (a position
    /// split in several, or renamed, goes on from where it was); otherwise at the end of
    /// the outbox: it is sent what happens from now on, not the past.
    pub async fn register_sink(
        &self,
        sink: &str,
        from: Option<&str>,
    ) -> Result<SinkRecord, StoreError> {
        let mut tx = self.begin_write().await?;
        let inherited = sqlx::query(
            "INSERT INTO notify_sinks (name, position, event_id) \
             SELECT $1, position, event_id FROM notify_sinks WHERE name = $2 \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(sink)
        .bind(from.unwrap_or(""))
        .execute(&mut *tx)
        .await
        .map_err(query_error("registering a notification sink"))?;
        if inherited.rows_affected() == 0 {
            sqlx::query(
                "INSERT INTO notify_sinks (name, position, event_id) \
                 SELECT $1, COALESCE(MAX(position), 0), \
                   COALESCE(MAX(event_id), 0) FROM outbox \
                 WHERE position IS NOT NULL \
                   AND position = (SELECT MAX(position) FROM outbox) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(sink)
            .execute(&mut *tx)
            .await
            .map_err(query_error("registering a notification sink"))?;
        }
        let record = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SINK_COLUMNS} FROM notify_sinks WHERE name = $1"
        )))
        .bind(sink)
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error("reading a notification sink"))?;
        tx.commit()
            .await
            .map_err(query_error("registering a notification sink"))?;
        Ok(record)
    }

    /// Forgets the sinks not in `configured`: a sink removed from the configuration, and
    /// later added again, starts at the end of the outbox.
    pub async fn forget_sinks_except(&self, configured: &[String]) -> Result<u64, StoreError> {
        let known = self.sinks().await?;
        let mut forgotten = 0;
        for sink in known.iter().filter(|s| !configured.contains(&s.name)) {
            forgotten += sqlx::query("DELETE FROM notify_sinks WHERE name = $1")
                .bind(&sink.name)
                .execute(&self.pool)
                .await
                .map_err(query_error("forgetting a notification sink"))?
                .rows_affected();
        }
        Ok(forgotten)
    }

    /// Every known sink.
    pub async fn sinks(&self) -> Result<Vec<SinkRecord>, StoreError> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SINK_COLUMNS} FROM notify_sinks ORDER BY name"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading the notification sinks"))
    }

    /// Up to `limit` committed notifications after `sink`'s position, in order.
    pub async fn outbox_after(
        &self,
        sink: &str,
        limit: u32,
    ) -> Result<Vec<OutboxRecord>, StoreError> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.position IS NOT NULL \
               AND (o.position, o.event_id) > \
                 (SELECT s.position, s.event_id FROM notify_sinks s WHERE s.name = $1) \
             ORDER BY o.position, o.event_id LIMIT $2"
        )))
        .bind(sink)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading the outbox"))
    }

    /// How many committed notifications `sink` has not been sent.
    pub async fn outbox_pending(&self, sink: &str) -> Result<i64, StoreError> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM outbox o WHERE o.position IS NOT NULL \
               AND (o.position, o.event_id) > \
                 (SELECT s.position, s.event_id FROM notify_sinks s WHERE s.name = $1)",
        )
        .bind(sink)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("counting the outbox"))
    }

    /// Moves `sink` past `row` (`how`: sent, left out by its filter, or given up on),
    /// and starts counting attempts afresh; whether it is failing is cleared too, unless
    /// the row was given up on (the receiver may still be down). Answers `false`, moving nothing, when the sink is not
    /// just before `row` any more or (with replicas) `holder` no longer holds `lease`:
    /// then another sender has it, and sends `row` itself.
    pub async fn sink_advanced(
        &self,
        sink: &str,
        lease: &str,
        row: &OutboxRecord,
        how: Passed<'_>,
        holder: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let fence = lease_held(self.backend, 8, 9);
        let (delivered, dead_letter) = match how {
            Passed::Delivered => (1_i64, None),
            Passed::Filtered => (0, None),
            Passed::DeadLettered { error } => (0, Some(error)),
        };
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE notify_sinks SET position = $1, event_id = $2, attempts = 0, \
               failing_since = CASE WHEN $6 IS NULL THEN NULL ELSE failing_since END, \
               last_error = CASE WHEN $6 IS NULL THEN NULL ELSE last_error END, \
               last_attempt_at = $3, delivered = delivered + $4, \
               dead_letters = dead_letters + CASE WHEN $6 IS NULL THEN 0 ELSE 1 END, \
               last_dead_letter_event = CASE WHEN $6 IS NULL THEN last_dead_letter_event \
                 ELSE $7 END, \
               last_dead_letter_error = COALESCE($6, last_dead_letter_error), \
               last_dead_letter_at = CASE WHEN $6 IS NULL THEN last_dead_letter_at \
                 ELSE $3 END \
             WHERE name = $5 AND (position, event_id) < ($1, $2) \
               AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.position IS NOT NULL \
                 AND (o.position, o.event_id) > (notify_sinks.position, notify_sinks.event_id) \
                 AND (o.position, o.event_id) < ($1, $2)){fence}"
        )))
        .bind(row.position)
        .bind(row.event_id)
        .bind(now.0)
        .bind(delivered)
        .bind(sink)
        .bind(dead_letter)
        .bind(row.event_id);
        let query = match self.backend {
            Backend::Sqlite => query,
            Backend::Postgres => query.bind(lease).bind(holder),
        };
        let moved = query
            .execute(&self.pool)
            .await
            .map_err(query_error("moving a notification sink"))?;
        Ok(moved.rows_affected() == 1)
    }

    /// Records a failed attempt at `sink`'s next row; from the `failing_after`th failed
    /// attempt in a row the sink counts as failing. Answers where the sink stands.
    pub async fn sink_failed(
        &self,
        sink: &str,
        error: &str,
        failing_after: u32,
        now: Timestamp,
    ) -> Result<Option<SinkRecord>, StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "UPDATE notify_sinks SET attempts = attempts + 1, last_error = $1, \
               last_attempt_at = $2, \
               failing_since = CASE WHEN attempts + 1 >= $3 \
                 THEN COALESCE(failing_since, $2) ELSE failing_since END \
             WHERE name = $4",
        )
        .bind(error)
        .bind(now.0)
        .bind(i64::from(failing_after))
        .bind(sink)
        .execute(&mut *tx)
        .await
        .map_err(query_error("recording a failed notification"))?;
        let record = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SINK_COLUMNS} FROM notify_sinks WHERE name = $1"
        )))
        .bind(sink)
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error("reading a notification sink"))?;
        tx.commit()
            .await
            .map_err(query_error("recording a failed notification"))?;
        Ok(record)
    }

    /// Deletes the notifications every known sink was sent, and those recorded before
    /// `before` whatever the sinks (a sink failing for longer than the history is kept
    /// loses them). Answers how many were deleted.
    pub async fn prune_outbox(&self, before: Timestamp) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM outbox WHERE position IS NOT NULL AND (at < $1 \
               OR NOT EXISTS (SELECT 1 FROM notify_sinks s \
                 WHERE (s.position, s.event_id) < (outbox.position, outbox.event_id)))",
        )
        .bind(before.0)
        .execute(&self.pool)
        .await
        .map_err(query_error("pruning the outbox"))?;
        Ok(done.rows_affected())
    }

    /// The clusters OFFLINE now, with the opening of their outage, their labels and
    /// reason: what an alert that must stay firing re-posts.
    pub async fn open_outages(&self) -> Result<Vec<OpenOutage>, StoreError> {
        sqlx::query_as(
            "SELECT c.name, c.labels, o.id AS outage_id, o.opened_at, c.last_reason_class, \
               c.last_reason FROM clusters c JOIN outages o ON o.id = c.open_outage_id \
             WHERE c.status = 'OFFLINE' AND c.ignored = 0 ORDER BY c.name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading the open outages"))
    }
}

/// A cluster OFFLINE now ([`Store::open_outages`]).
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct OpenOutage {
    /// The cluster.
    pub name: String,
    /// Its labels (a JSON object).
    pub labels: String,
    /// The outage.
    pub outage_id: i64,
    /// When it was confirmed.
    pub opened_at: i64,
    /// The reason class of its latest failure.
    pub last_reason_class: Option<String>,
    /// Its latest reason.
    pub last_reason: Option<String>,
}
