//! Moving an installation from one database to another (`vigil migrate`): every row of
//! every table, ids kept, so that open outages, the apps' degraded-by markers, the
//! history and the brake come across exactly and the engine goes on where it stopped.

use serde::Serialize;
use sqlx::Row as _;

use super::{Backend, Store, StoreError, query_error};

/// A column of a copied table, with the type it is read and written as.
#[derive(Clone, Copy)]
enum Column {
    Int(&'static str),
    Text(&'static str),
}

use Column::{Int, Text};

impl Column {
    fn name(self) -> &'static str {
        match self {
            Int(name) | Text(name) => name,
        }
    }
}

/// The tables in the order they are written (each after the tables it refers to), with
/// the columns that carry state. A cluster's `revision` is not copied: the destination
/// gives every row a revision of its own, which only tells views that they are stale.
const TABLES: &[(&str, &[Column])] = &[
    (
        "clusters",
        &[
            Int("id"),
            Text("name"),
            Text("endpoint"),
            Text("kubeconfig_secret_ref"),
            Text("source"),
            Int("ignored"),
            Text("plugin"),
            Text("plugin_parameters"),
            Text("labels"),
            Text("policy"),
            Text("status"),
            Text("conditions"),
            Int("consecutive_failures"),
            Int("consecutive_successes"),
            Int("consecutive_inconclusive"),
            Int("last_counted_failure"),
            Text("latest_conclusive"),
            Int("latest_conclusive_at"),
            Int("next_due"),
            Int("first_seen"),
            Int("last_probe"),
            Int("last_success"),
            Text("last_outcome"),
            Text("last_reason"),
            Text("last_reason_class"),
            Int("open_outage_id"),
            Int("updated_at"),
            Text("last_plugin"),
            Int("last_plugin_generation"),
            Int("transitions"),
        ],
    ),
    (
        "outages",
        &[
            Int("id"),
            Int("cluster_id"),
            Int("opened_at"),
            Int("closed_at"),
            Int("transition"),
        ],
    ),
    (
        "apps",
        &[
            Int("id"),
            Text("name"),
            Int("cluster_id"),
            Text("status"),
            Int("degraded_by_outage"),
            Int("created_at"),
            Int("updated_at"),
        ],
    ),
    (
        "deployments",
        &[
            Int("id"),
            Int("app_id"),
            Int("cluster_id"),
            Text("version"),
            Text("actor"),
            Int("created_at"),
        ],
    ),
    (
        "events",
        &[
            Int("id"),
            Int("at"),
            Int("cluster_id"),
            Text("cluster_name"),
            Int("outage_id"),
            Text("kind"),
            Text("detail"),
            Text("actor"),
        ],
    ),
    (
        "audits",
        &[
            Int("cluster_id"),
            Int("audited_at"),
            Text("audit_plugin"),
            Int("audit_plugin_generation"),
            Text("kinds_read"),
            Text("findings"),
            Text("error_kind"),
            Text("error_message"),
            Int("error_at"),
            Int("next_audit"),
        ],
    ),
    (
        "brake_state",
        &[
            Text("group_key"),
            Int("holding"),
            Int("since"),
            Int("released_at"),
            Int("suppressed"),
        ],
    ),
    (
        "engine_coverage",
        &[
            Int("id"),
            Text("replica"),
            Int("started"),
            Int("heartbeat"),
            Int("stopped"),
        ],
    ),
    (
        "uptime_daily",
        &[
            Int("cluster_id"),
            Int("day"),
            Int("online"),
            Int("offline"),
            Int("unknown"),
            Int("no_data"),
        ],
    ),
    (
        "probe_latency",
        &[
            Int("cluster_id"),
            Int("bucket"),
            Int("probes"),
            Int("total_ms"),
            Int("max_ms"),
        ],
    ),
];

/// The tables whose `id` the destination hands out itself afterwards.
const IDENTITY_TABLES: &[&str] = &[
    "clusters",
    "outages",
    "apps",
    "deployments",
    "events",
    "engine_coverage",
];

/// What [`Store::copy_to`] copied: rows per table, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CopySummary {
    /// `(table, rows)`.
    pub tables: Vec<(&'static str, u64)>,
}

/// A value read from one database, to be written to the other.
enum Value {
    Int(Option<i64>),
    Text(Option<String>),
}

impl Store {
    /// Copies everything this store holds into `to`, which must hold nothing yet (a
    /// freshly migrated database): read in one transaction (one consistent state), written
    /// in one transaction (all or nothing). The caller keeps engines off both meanwhile.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotEmpty`] when `to` already holds clusters, apps or history;
    /// nothing is written then.
    pub async fn copy_to(&self, to: &Store) -> Result<CopySummary, StoreError> {
        for (table, _) in TABLES {
            if *table == "brake_state" {
                // A fresh PostgreSQL schema holds the fleet's brake row already.
                continue;
            }
            let rows: i64 =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                    .fetch_one(&to.pool)
                    .await
                    .map_err(query_error("checking that the destination is empty"))?;
            if rows > 0 {
                return Err(StoreError::NotEmpty { table });
            }
        }
        let snapshot = match self.backend {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        let mut source = self
            .pool
            .begin_with(snapshot)
            .await
            .map_err(query_error("starting to read the source"))?;
        let mut target = to.begin_write().await?;
        sqlx::query("DELETE FROM brake_state")
            .execute(&mut *target)
            .await
            .map_err(query_error("clearing the destination's brake"))?;
        let mut summary = CopySummary::default();
        for &(table, columns) in TABLES {
            let names: Vec<&str> = columns.iter().map(|c| c.name()).collect();
            let list = names.join(", ");
            let order = if table == "brake_state" {
                "group_key"
            } else {
                names[0]
            };
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {list} FROM {table} ORDER BY {order}"
            )))
            .fetch_all(&mut *source)
            .await
            .map_err(query_error("reading the source"))?;
            let placeholders: Vec<String> = (1..=columns.len()).map(|n| format!("${n}")).collect();
            let insert = format!(
                "INSERT INTO {table} ({list}) VALUES ({})",
                placeholders.join(", ")
            );
            for row in &rows {
                let values = columns
                    .iter()
                    .enumerate()
                    .map(|(i, column)| match column {
                        Int(_) => row.try_get::<Option<i64>, _>(i).map(Value::Int),
                        Text(_) => row.try_get::<Option<String>, _>(i).map(Value::Text),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(query_error("reading a row of the source"))?;
                let mut query = sqlx::query(sqlx::AssertSqlSafe(insert.as_str()));
                for value in values {
                    query = match value {
                        Value::Int(v) => query.bind(v),
                        Value::Text(v) => query.bind(v),
                    };
                }
                query
                    .execute(&mut *target)
                    .await
                    .map_err(query_error("writing a row to the destination"))?;
            }
            summary.tables.push((table, rows.len() as u64));
        }
        if to.backend == Backend::Postgres {
            // The copied history is in its commit order already (its ids'): streams read
            // it in that order, and the events written next come after it.
            for statement in [
                "UPDATE events SET commit_seq = id WHERE commit_seq IS NULL",
                "UPDATE event_counter SET value = (SELECT COALESCE(MAX(id), 0) FROM events)",
            ] {
                sqlx::query(statement)
                    .execute(&mut *target)
                    .await
                    .map_err(query_error("ordering the copied history"))?;
            }
            // Ids given explicitly do not move an identity's sequence: the next ones
            // must come after the copied rows.
            for table in IDENTITY_TABLES {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                     COALESCE(MAX(id), 0) + 1, false) FROM {table}"
                )))
                .execute(&mut *target)
                .await
                .map_err(query_error("moving the destination's id sequences"))?;
            }
        }
        target
            .commit()
            .await
            .map_err(query_error("committing the copy"))?;
        source
            .rollback()
            .await
            .map_err(query_error("ending the read of the source"))?;
        Ok(summary)
    }
}
