//! The store: every cluster, outage, app, deployment, event and the brake state,
//! on SQLite through sqlx (runtime queries, no database needed at build time).
//!
//! Each probe result is applied in its own `BEGIN IMMEDIATE` transaction
//! ([`Store::apply_probe`]), so one cluster's failure rolls back that cluster
//! only, and a process stopped mid-tick leaves every cluster either fully
//! updated or untouched. Everything the rules need is persisted
//! (docs/rules.md#persistence). The lock file of [`lock`] keeps one engine per
//! database file.

#![forbid(unsafe_code)]

mod audits;
pub mod availability;
pub mod backup;
mod claims;
mod copy;
pub mod lock;
mod operator;
pub mod outbox;
mod uptime;

pub use self::audits::{
    AppliedAudit, AuditFailure, AuditRecord, AuditResult, Finding, ObjectRef, Severity,
};
pub use self::claims::{Claim, Claimed, Lease};
pub use self::copy::CopySummary;
pub use self::operator::{ClusterFilter, ClusterPatch, DeploymentRecord, NewCluster, PageEntry};
pub use self::uptime::{
    COVERAGE_HEARTBEAT, ClusterUptime, CoverageId, DayUptime, FleetSummary, LATENCY_BUCKET_MILLIS,
    LatencyBucket, RolledUp,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::any::AnyPoolOptions;
use sqlx::{Any, AnyConnection, AnyPool, FromRow, Transaction};
use vigil_decision::brake::{self, BrakeAssessment};
use vigil_decision::{
    AppId, AppStatus, AppView, BrakeConfig, BrakeVerdict, Cascade, ClusterHealth, ClusterId,
    ClusterStatus, Condition, Decision, HealthEvent, HealthPolicy, NotCounted, OutageId,
    PolicyOverrides, ProbeInput, ProbeOutcome, ProbedBy, ReplicaView, SecondOpinion, Timestamp,
    counts_as_failure, decide, set_probing_disabled,
};

/// A transaction of the store, on either backend.
type Tx = Transaction<'static, Any>;

/// The database behind a [`Store`]. The store speaks one SQL to both, but for the few
/// statements where their dialects differ (JSON, row locks), which [`Backend::of`] a
/// connection tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One file, one engine: the zero-set-up default.
    Sqlite,
    /// A server shared by any number of replicas.
    Postgres,
}

impl Backend {
    /// The backend a connection talks to.
    fn of(conn: &AnyConnection) -> Self {
        if conn.backend_name() == <sqlx::Postgres as sqlx::Database>::NAME {
            Self::Postgres
        } else {
            Self::Sqlite
        }
    }

    /// The backend a `DATABASE_URL` selects.
    pub fn of_url(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Self::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else {
            Err(StoreError::UnsupportedUrl {
                url: redact_url(url),
                reason: "expected a URL starting with sqlite:, postgres: or postgresql:".to_owned(),
            })
        }
    }

    /// `sqlite` or `postgres`, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }

    /// A subquery giving the ids of a JSON array of integers bound as parameter `n`.
    fn ids_of_json(self, n: u8) -> String {
        match self {
            Self::Sqlite => format!("SELECT value FROM json_each(${n})"),
            Self::Postgres => {
                format!("SELECT value::bigint FROM jsonb_array_elements_text(${n}::jsonb)")
            }
        }
    }

    /// The clause that locks the rows a `SELECT` reads until the transaction ends, so
    /// that a decision is made on a state no other transaction can change meanwhile.
    /// SQLite's `BEGIN IMMEDIATE` already holds the whole database.
    fn lock_for_update(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR UPDATE",
        }
    }

    /// The clause that keeps the rows a guard reads from changing until the transaction
    /// ends, without keeping other guards from reading them.
    fn lock_for_share(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR SHARE",
        }
    }
}

/// The one brake group of the fleet (the brake function takes a grouping key so
/// that a later version can brake per zone).
const FLEET_GROUP: &str = "";

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `DATABASE_URL` is not a database vigil can use.
    #[error("unsupported DATABASE_URL {url}: {reason}")]
    UnsupportedUrl {
        /// The URL, with any password redacted.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The database could not be opened or migrated.
    #[error("cannot open database {url}")]
    Open {
        /// The URL, with any password redacted.
        url: String,
        /// The cause.
        #[source]
        source: DatabaseError,
    },
    /// The migrations could not be applied.
    #[error("cannot migrate database {url}")]
    Migrate {
        /// The URL, with any password redacted.
        url: String,
        /// The cause.
        #[source]
        source: DatabaseError,
    },
    /// A query failed.
    #[error("database error while {doing}")]
    Query {
        /// What the store was doing.
        doing: &'static str,
        /// The cause.
        #[source]
        source: DatabaseError,
    },
    /// A stored value could not be read back.
    #[error("stored {what} is invalid: {reason}")]
    Corrupt {
        /// Which value.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The named object does not exist.
    #[error("{kind} `{name}` does not exist")]
    NotFound {
        /// `cluster` or `app`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// An object with this name exists already.
    #[error("{kind} `{name}` already exists")]
    AlreadyExists {
        /// `cluster` or `app`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The deployment guard (docs/rules.md#deployment-guard): the target cluster is OFFLINE.
    #[error("cluster `{cluster}` is OFFLINE: deployments and reassignments to it are refused")]
    ClusterOffline {
        /// The cluster's name.
        cluster: String,
    },
    /// The result of a probe made under a claim that is no longer its replica's: the
    /// claim lapsed and another replica took the cluster. Nothing of it was written.
    #[error(
        "the claim on cluster {cluster} lapsed before its result was written: the result is discarded"
    )]
    StaleClaim {
        /// The cluster's id.
        cluster: i64,
    },
    /// What this backend does not do.
    #[error("{what} need PostgreSQL; this store is on {backend}")]
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// The store's backend.
        backend: &'static str,
    },
    /// A copy's destination already holds data.
    #[error(
        "the destination database is not empty (table `{table}` has rows): vigil migrate copies into a new database only"
    )]
    NotEmpty {
        /// A table that has rows.
        table: &'static str,
    },
    /// A cluster cannot be deleted while apps remain on it.
    #[error("cluster `{cluster}` still has apps ({}): reassign or remove them first", apps.join(", "))]
    HasApps {
        /// The cluster's name.
        cluster: String,
        /// The apps on it.
        apps: Vec<String>,
    },
}

impl StoreError {
    /// Whether the store is busy rather than broken: SQLite stayed busy or locked past the
    /// busy timeout, or no connection came free within the pool's acquire timeout. The same
    /// request may well succeed a moment later.
    pub fn is_busy(&self) -> bool {
        match self {
            Self::Query { source, .. } | Self::Open { source, .. } => source.is_busy(),
            _ => false,
        }
    }

    /// What a failed write was, in words an operator who only sees `/readyz` can act on:
    /// the SQLite result codes that name a cause (disk full, read-only, I/O error, locked),
    /// else a general phrase.
    pub fn write_failure_reason(&self) -> &'static str {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(cause) = source {
            if let Some(database) = cause.downcast_ref::<DatabaseError>() {
                if let Some(primary) = database.primary_code() {
                    return match primary {
                        13 => "the database's disk is full",
                        8 => "the database is read-only",
                        10 => "the database's disk fails (I/O error)",
                        5 | 6 => "the database stays locked",
                        _ => "the database refused the write",
                    };
                }
                if let Some(state) = database.postgres_state() {
                    return match state.as_str() {
                        "53100" => "the database's disk is full",
                        "25006" => "the database is read-only",
                        "58030" => "the database's disk fails (I/O error)",
                        "40P01" | "55P03" => "the database stays locked",
                        _ => "the database refused the write",
                    };
                }
            }
            source = cause.source();
        }
        "the database could not be written"
    }
}

/// An error of the database client. Opaque outside the store: callers ask it what they
/// need ([`StoreError::is_busy`], [`StoreError::write_failure_reason`]) and never see the
/// client library's types.
#[derive(Debug)]
pub struct DatabaseError(DatabaseCause);

#[derive(Debug)]
enum DatabaseCause {
    Client(sqlx::Error),
    Migrate(sqlx::migrate::MigrateError),
}

impl DatabaseError {
    /// A pool that gave no connection in time, as the client reports it (for the callers'
    /// tests of how a busy store is answered).
    pub fn pool_timed_out() -> Self {
        Self(DatabaseCause::Client(sqlx::Error::PoolTimedOut))
    }

    /// A query that found no row, as the client reports it (for the callers' tests of how
    /// an unexpected database error is answered).
    pub fn row_not_found() -> Self {
        Self(DatabaseCause::Client(sqlx::Error::RowNotFound))
    }

    /// SQLite's primary result code of a database error: the low byte of every extended
    /// code derived from it (`SQLITE_BUSY_SNAPSHOT` is `SQLITE_BUSY`, …).
    fn primary_code(&self) -> Option<i64> {
        match &self.0 {
            DatabaseCause::Client(sqlx::Error::Database(database))
                if database
                    .try_downcast_ref::<sqlx::sqlite::SqliteError>()
                    .is_some() =>
            {
                database
                    .code()
                    .and_then(|code| code.parse::<i64>().ok())
                    .map(|code| code & 0xff)
            }
            _ => None,
        }
    }

    /// PostgreSQL's SQLSTATE of a database error.
    fn postgres_state(&self) -> Option<String> {
        match &self.0 {
            DatabaseCause::Client(sqlx::Error::Database(database)) => database
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .map(|error| error.code().to_owned()),
            _ => None,
        }
    }

    /// Whether the database was busy (`SQLITE_BUSY`, `SQLITE_LOCKED`; on PostgreSQL a
    /// deadlock broken, a lock not available, a serialisation failure, no connection
    /// slot) or the pool gave no connection in time: the caller may retry.
    fn is_busy(&self) -> bool {
        const SQLITE_BUSY: i64 = 5;
        const SQLITE_LOCKED: i64 = 6;
        matches!(&self.0, DatabaseCause::Client(sqlx::Error::PoolTimedOut))
            || self
                .primary_code()
                .is_some_and(|code| matches!(code, SQLITE_BUSY | SQLITE_LOCKED))
            || self.postgres_state().is_some_and(|state| {
                matches!(
                    state.as_str(),
                    "40001" | "40P01" | "55P03" | "53300" | "57P03"
                )
            })
    }
}

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            DatabaseCause::Client(error) => error.fmt(f),
            DatabaseCause::Migrate(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            DatabaseCause::Client(error) => error.source(),
            DatabaseCause::Migrate(error) => error.source(),
        }
    }
}

impl From<sqlx::Error> for DatabaseError {
    fn from(error: sqlx::Error) -> Self {
        Self(DatabaseCause::Client(error))
    }
}

impl From<sqlx::migrate::MigrateError> for DatabaseError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        Self(DatabaseCause::Migrate(error))
    }
}

fn query_error(doing: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query {
        doing,
        source: source.into(),
    }
}

/// Where a cluster comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterSource {
    /// Found by discovery in a kubeconfig.
    Discovered,
    /// Registered through the API.
    Manual,
}

impl ClusterSource {
    /// Its name in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Discovered => "discovered",
            Self::Manual => "manual",
        }
    }
}

/// A cluster as stored.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterRecord {
    /// Its id.
    pub id: ClusterId,
    /// Its unique name (the context name for discovered clusters).
    pub name: String,
    /// The API server address.
    pub endpoint: String,
    /// The reference to its credentials; a reference, never secret material.
    pub kubeconfig_secret_ref: String,
    /// Where it comes from.
    pub source: ClusterSource,
    /// Deleted through the API while discovered: kept so discovery skips it.
    pub ignored: bool,
    /// The plugin explicitly chosen for it, if any.
    pub plugin: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its plugin parameters; credential values are stored as references, never resolved.
    pub parameters: BTreeMap<String, String>,
    /// Its policy overrides.
    pub policy: PolicyOverrides,
    /// Its health: status, conditions, counters and times.
    pub health: ClusterHealth,
    /// When it is due for its next probe.
    pub next_due: Timestamp,
    /// The label of the last outcome (`healthy`, `unhealthy`, …).
    pub last_outcome: Option<String>,
    /// The message of the last non-healthy outcome.
    pub last_reason: Option<String>,
    /// The reason class of the last non-healthy outcome.
    pub last_reason_class: Option<String>,
    /// The plugin generation that produced the last outcome, if a plugin answered.
    pub last_probed_by: Option<ProbedBy>,
}

#[derive(FromRow)]
struct ClusterRow {
    id: i64,
    name: String,
    endpoint: String,
    kubeconfig_secret_ref: String,
    source: String,
    ignored: i64,
    plugin: Option<String>,
    plugin_parameters: String,
    labels: String,
    policy: String,
    status: String,
    conditions: String,
    consecutive_failures: i64,
    consecutive_successes: i64,
    consecutive_inconclusive: i64,
    last_counted_failure: Option<i64>,
    next_due: i64,
    first_seen: i64,
    last_probe: Option<i64>,
    last_success: Option<i64>,
    last_outcome: Option<String>,
    last_reason: Option<String>,
    last_reason_class: Option<String>,
    open_outage_id: Option<i64>,
    last_plugin: Option<String>,
    last_plugin_generation: Option<i64>,
}

const CLUSTER_COLUMNS: &str = "id, name, endpoint, kubeconfig_secret_ref, source, ignored, plugin, \
     plugin_parameters, labels, policy, status, conditions, consecutive_failures, consecutive_successes, \
     consecutive_inconclusive, last_counted_failure, next_due, first_seen, last_probe, \
     last_success, last_outcome, last_reason, last_reason_class, open_outage_id, last_plugin, \
     last_plugin_generation";

fn counter(value: i64) -> u32 {
    u32::try_from(value.max(0)).unwrap_or(u32::MAX)
}

impl TryFrom<ClusterRow> for ClusterRecord {
    type Error = StoreError;

    fn try_from(row: ClusterRow) -> Result<Self, StoreError> {
        let corrupt = |what: &'static str| {
            move |e: &dyn std::fmt::Display| StoreError::Corrupt {
                what,
                reason: e.to_string(),
            }
        };
        let status = ClusterStatus::from_str(&row.status).map_err(|e| corrupt("status")(&e))?;
        let conditions: Vec<Condition> =
            serde_json::from_str(&row.conditions).map_err(|e| corrupt("conditions")(&e))?;
        let policy: PolicyOverrides =
            serde_json::from_str(&row.policy).map_err(|e| corrupt("policy")(&e))?;
        let labels = string_map(&row.labels).map_err(|e| corrupt("labels")(&e))?;
        let parameters =
            string_map(&row.plugin_parameters).map_err(|e| corrupt("plugin parameters")(&e))?;
        let source = match row.source.as_str() {
            "manual" => ClusterSource::Manual,
            _ => ClusterSource::Discovered,
        };
        Ok(Self {
            id: ClusterId(row.id),
            name: row.name,
            endpoint: row.endpoint,
            kubeconfig_secret_ref: row.kubeconfig_secret_ref,
            source,
            ignored: row.ignored != 0,
            plugin: row.plugin,
            labels,
            parameters,
            policy,
            health: ClusterHealth {
                status,
                conditions,
                consecutive_failures: counter(row.consecutive_failures),
                consecutive_successes: counter(row.consecutive_successes),
                consecutive_inconclusive: counter(row.consecutive_inconclusive),
                last_counted_failure: row.last_counted_failure.map(Timestamp),
                first_seen: Timestamp(row.first_seen),
                last_probe: row.last_probe.map(Timestamp),
                last_success: row.last_success.map(Timestamp),
                open_outage: row.open_outage_id.map(OutageId),
            },
            next_due: Timestamp(row.next_due),
            last_outcome: row.last_outcome,
            last_reason: row.last_reason,
            last_reason_class: row.last_reason_class,
            last_probed_by: row.last_plugin.map(|plugin| ProbedBy {
                plugin,
                generation: row
                    .last_plugin_generation
                    .and_then(|g| u64::try_from(g).ok())
                    .unwrap_or(0),
            }),
        })
    }
}

/// A JSON object of names to values, as labels and parameters are stored. Values that are
/// not strings (a number, a boolean) are taken as their JSON text, so that one cluster's
/// odd value never stops the worker from reading the fleet.
fn string_map(json: &str) -> Result<BTreeMap<String, String>, serde_json::Error> {
    let raw: BTreeMap<String, serde_json::Value> = serde_json::from_str(json)?;
    Ok(raw
        .into_iter()
        .map(|(name, value)| match value {
            serde_json::Value::String(text) => (name, text),
            other => (name, other.to_string()),
        })
        .collect())
}

/// An app as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppRecord {
    /// Its id.
    pub id: AppId,
    /// Its unique name.
    pub name: String,
    /// The cluster it is assigned to.
    pub cluster: String,
    /// Its status.
    pub status: AppStatus,
    /// The outage that degraded it, if this engine did.
    pub degraded_by: Option<OutageId>,
}

#[derive(FromRow)]
struct AppRow {
    id: i64,
    name: String,
    cluster_id: i64,
    cluster: String,
    status: String,
    degraded_by_outage: Option<i64>,
}

impl AppRow {
    fn status(&self) -> Result<AppStatus, StoreError> {
        AppStatus::from_str(&self.status).map_err(|e| StoreError::Corrupt {
            what: "app status",
            reason: e.to_string(),
        })
    }

    fn view(&self) -> Result<AppView, StoreError> {
        Ok(AppView {
            id: AppId(self.id),
            cluster: ClusterId(self.cluster_id),
            status: self.status()?,
            degraded_by: self.degraded_by_outage.map(OutageId),
        })
    }

    fn record(self) -> Result<AppRecord, StoreError> {
        Ok(AppRecord {
            status: self.status()?,
            id: AppId(self.id),
            name: self.name,
            cluster: self.cluster,
            degraded_by: self.degraded_by_outage.map(OutageId),
        })
    }
}

const APP_SELECT: &str = "SELECT a.id, a.name, a.cluster_id, c.name AS cluster, a.status, \
     a.degraded_by_outage FROM apps a JOIN clusters c ON c.id = a.cluster_id";

/// One recorded event of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow)]
pub struct EventRecord {
    /// Its id, increasing.
    pub id: i64,
    /// When it happened.
    pub at: i64,
    /// The cluster concerned, if any.
    pub cluster_name: Option<String>,
    /// The outage concerned, if any.
    pub outage_id: Option<i64>,
    /// Its kind (`status-changed`, `apps-degraded`, `brake-engaged`, …).
    pub kind: String,
    /// Its details, as JSON.
    pub detail: String,
    /// Who caused it, for API mutations.
    pub actor: Option<String>,
    /// Where it stands in the order event streams read: its id on SQLite, its
    /// transaction's commit stamp on PostgreSQL (see [`Store::events_after`]). Read only
    /// by [`Store::events_after`].
    #[serde(skip)]
    #[sqlx(default)]
    pub position: i64,
}

/// An outage as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, FromRow)]
pub struct OutageRecord {
    /// Its id.
    pub id: i64,
    /// The cluster.
    pub cluster_id: i64,
    /// When ONLINE→OFFLINE was confirmed.
    pub opened_at: i64,
    /// When the cluster came back ONLINE.
    pub closed_at: Option<i64>,
}

/// The persisted state of the brake for the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BrakeState {
    /// The current verdict.
    pub verdict: BrakeVerdict,
    /// Failures suppressed while it held, in total.
    pub suppressed: u64,
}

/// A cluster found by discovery, as the store upserts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredClusterRow {
    /// The context name.
    pub name: String,
    /// The API server address.
    pub endpoint: String,
    /// `PATH#CONTEXT`.
    pub reference: String,
}

/// What an upsert of discovered clusters did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpsertSummary {
    /// Newly inserted (UNKNOWN, due at once).
    pub inserted: Vec<String>,
    /// Endpoint or reference changed.
    pub updated: Vec<String>,
    /// Already known and unchanged.
    pub unchanged: Vec<String>,
    /// A manually registered cluster of the same name exists: left untouched.
    pub kept_manual: Vec<String>,
    /// Deleted through the API earlier: not re-added.
    pub ignored: Vec<String>,
    /// For each cluster of `updated`, the fields that changed.
    pub changes: BTreeMap<String, Vec<FieldChange>>,
}

/// One field of a discovered cluster that an upsert changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// `endpoint` or `reference`.
    pub field: &'static str,
    /// The stored value.
    pub from: String,
    /// The value discovery found.
    pub to: String,
}

/// The settings under which probe results are applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApplySettings {
    /// The global policy defaults.
    pub defaults: HealthPolicy,
    /// The brake's settings.
    pub brake: BrakeConfig,
    /// Whether `brake.window_millis` was set explicitly. Otherwise the window
    /// is the largest effective interval of the fleet (docs/rules.md#brake).
    pub brake_window_explicit: bool,
    /// Among replicas, the safeguards against a replica that is itself cut off.
    pub replicas: ReplicaSafeguards,
}

/// What keeps a replica that is itself cut off from calling outages
/// (docs/rules.md#replicas-second-opinion); both on unless switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaSafeguards {
    /// A replica's own brake: its failures are not counted while its outcomes fail and
    /// the other replicas' do not (`VIGIL_REPLICA_BRAKE`).
    pub brake: bool,
    /// The failure that takes a cluster OFFLINE must come from another replica than the
    /// previous counted failure, while one could give it (`VIGIL_SECOND_OPINION`).
    pub second_opinion: bool,
}

impl Default for ReplicaSafeguards {
    fn default() -> Self {
        Self {
            brake: true,
            second_opinion: true,
        }
    }
}

/// What [`Store::apply_probe`] did.
#[derive(Debug, Clone)]
pub struct AppliedProbe {
    /// The cluster's name.
    pub cluster: String,
    /// The decision that was persisted.
    pub decision: Decision,
    /// The outage opened by this probe, if any.
    pub opened_outage: Option<OutageId>,
    /// The brake's assessment, when this probe re-evaluated it.
    pub brake: Option<BrakeAssessment>,
    /// The brake's verdict before this probe.
    pub brake_before: BrakeVerdict,
}

/// The schema migrations of each backend, embedded at build time. Each backend has its
/// own versions; a database with a version this vigil does not know (written by a newer
/// one) is refused.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

impl Backend {
    fn migrator(self) -> &'static sqlx::migrate::Migrator {
        match self {
            Self::Sqlite => &MIGRATOR,
            Self::Postgres => &POSTGRES_MIGRATOR,
        }
    }
}

/// Released migrations whose text changed afterwards in comments only, each with the
/// checksum (SHA-384 of its text) it was released with. sqlx refuses a database whose
/// applied migration has another checksum than the embedded one, so
/// [`adopt_reworded_migrations`] gives such a database the current checksum first.
pub const REWORDED_MIGRATIONS: [(i64, &str); 2] = [
    (
        1,
        "91b4b306bc6b5ae18273f12652468dd85d97c4a0b77cdbcb4984f48a3643c90960b6b8aa867bae519f06641f811d79b5",
    ),
    (
        3,
        "26be6afa190ff595ef00759bc16c5fe9f52815099b1779292d2e92121ddcab0789d10e68658aaacce16a9d2bff192911",
    ),
];

/// Records the current checksum of each reworded migration (see [`REWORDED_MIGRATIONS`])
/// in a database that applied it under its released text — and only then: a database
/// whose migration differs in any other way is still refused by the migrator. (Only
/// SQLite databases were released before a migration was reworded.)
async fn adopt_reworded_migrations(pool: &AnyPool) -> Result<(), sqlx::Error> {
    let recorded: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_one(pool)
    .await?;
    if recorded == 0 {
        return Ok(());
    }
    for (version, released) in REWORDED_MIGRATIONS {
        let Some(current) = MIGRATOR.iter().find(|m| m.version == version) else {
            continue;
        };
        sqlx::query(
            "UPDATE _sqlx_migrations SET checksum = $1 WHERE version = $2 AND checksum = $3",
        )
        .bind(current.checksum.as_ref())
        .bind(version)
        .bind(hex_bytes(released))
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// The bytes of a hexadecimal text (pairs of digits; anything else is dropped).
fn hex_bytes(text: &str) -> Vec<u8> {
    text.as_bytes()
        .chunks(2)
        .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// A database opened by [`Store::open_existing`].
#[derive(Debug)]
pub enum ExistingDatabase {
    /// Its schema is this vigil's.
    Ready(Store),
    /// It holds no table at all: `vigil serve` would create the schema, and every
    /// discovered cluster would be new.
    Blank,
    /// Its schema is not this vigil's (older: `vigil serve` would migrate it first;
    /// newer, or foreign: `vigil serve` would refuse it).
    SchemaMismatch {
        /// The migration versions applied to it.
        applied: Vec<i64>,
        /// This vigil's migration versions.
        expected: Vec<i64>,
    },
}

/// Handle on the database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

/// SQLite's `synchronous` setting for every connection of the engine: `FULL`, so that in WAL
/// mode each commit syncs the log before it returns. A probe's result, a registration or a
/// deployment acknowledged by the API is then still there after a power loss or an operating
/// system crash; with `NORMAL`, the last commits before one can be lost, and with them an
/// outage opened or closed. What it costs is measured in BENCHMARKS.md ("Commit durability").
pub const SYNCHRONOUS: CommitDurability = CommitDurability::Full;

/// How far a commit is on disk before it returns (SQLite's `synchronous` setting in WAL
/// mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitDurability {
    /// `FULL`: each commit syncs the log; nothing acknowledged is lost on power loss.
    Full,
    /// `NORMAL`: the log is synced at checkpoints; the last commits before a power loss or
    /// an operating system crash can be lost.
    Normal,
}

impl CommitDurability {
    /// The value of SQLite's `synchronous` pragma.
    fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// What stands for a redacted secret.
const REDACTED: &str = "***";

/// `DATABASE_URL` with every secret replaced by `***`, for messages and logs: the password of
/// its user information, and the value of every password-like query parameter
/// (`password`, `sslpassword`, `passwd`, `pwd`, anything with `secret`, `token` or `key` in
/// its name).
///
/// The URL is read with a URL parser, as a database client would, when its user information
/// is delimited: the text between `//` and the first `/`, `?` or `#` holds the `@`. When an
/// `@` only comes later, the password most likely holds an unencoded `/`, `?` or `#` (the
/// parser would read part of it as host, port or path): everything after the scheme is
/// redacted then, as nothing can tell the password from the rest.
pub fn redact_url(text: &str) -> String {
    if let Some((scheme, rest)) = text.split_once("://") {
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(authority_end);
        if !authority.contains('@') && after.contains('@') {
            return format!("{scheme}://{REDACTED}");
        }
        let Ok(url) = url::Url::parse(text) else {
            // Not a URL (a bad port, say), but its user information is delimited: redact it
            // and whatever follows a `?`, which cannot be read parameter by parameter.
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, host)) if userinfo.contains(':') => {
                    let user = userinfo.split(':').next().unwrap_or_default();
                    format!("{user}:{REDACTED}@{host}")
                }
                _ => authority.to_owned(),
            };
            let after = match after.split_once('?') {
                Some((path, _)) => format!("{path}?{REDACTED}"),
                None => after.to_owned(),
            };
            return format!("{scheme}://{authority}{after}");
        };
        return redact_parsed(text, url);
    }
    // `sqlite:vigil.db?…`: no authority, but a query can still carry a secret.
    match url::Url::parse(text) {
        Ok(url) => redact_parsed(text, url),
        Err(_) => match text.split_once('?') {
            Some((path, _)) => format!("{path}?{REDACTED}"),
            None => text.to_owned(),
        },
    }
}

/// [`redact_url`] of a URL the parser read; `text` is given back unchanged when it holds no
/// secret, so that a message quotes the setting as the operator wrote it.
fn redact_parsed(text: &str, mut url: url::Url) -> String {
    let mut changed = false;
    if url.password().is_some() {
        // Only a URL that cannot have a password refuses a new one, and this one has one.
        changed |= url.set_password(Some(REDACTED)).is_ok();
    }
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    if let Some(first_secret) = pairs.iter().position(|(name, _)| is_secret_parameter(name)) {
        // Everything from the first secret on is redacted, names too: a value holding an
        // unencoded `&` or `#` would otherwise show its tail as a parameter or a fragment.
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query.extend_pairs(&pairs[..first_secret]);
        query.append_pair(&pairs[first_secret].0, REDACTED);
        let mut query = query.finish();
        if first_secret + 1 < pairs.len() {
            query.push('&');
            query.push_str(REDACTED);
        }
        url.set_query(Some(&query));
        if url.fragment().is_some() {
            url.set_fragment(Some(REDACTED));
        }
        changed = true;
    }
    if changed {
        url.to_string()
    } else {
        text.to_owned()
    }
}

/// Whether a URL query parameter's (decoded) name says that its value is a secret.
fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "passwd", "pwd", "secret", "token", "key"]
        .iter()
        .any(|word| name.contains(word))
        || name == "pass"
}

/// The SQLite file a `DATABASE_URL` names, if it names one (`None` for an in-memory
/// SQLite database and for PostgreSQL).
pub fn sqlite_path(url: &str) -> Result<Option<PathBuf>, StoreError> {
    let unsupported = |reason: &str| StoreError::UnsupportedUrl {
        url: redact_url(url),
        reason: reason.to_owned(),
    };
    let Some(rest) = url.strip_prefix("sqlite:") else {
        if Backend::of_url(url)? == Backend::Postgres {
            return Ok(None);
        }
        return Err(unsupported("expected a URL starting with sqlite:"));
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path == ":memory:" {
        return Ok(None);
    }
    Ok(Some(PathBuf::from(path)))
}

/// Commits `tx`. On PostgreSQL, the events it wrote are first stamped with the next
/// value of the event counter, whose row stays locked until the commit: stamps follow the
/// commit order, which is the order event streams read (see the schema's `commit_seq`).
/// On SQLite the one writer commits in id order already. Either way the notifications
/// the transaction wrote are completed first ([`outbox::seal`]).
async fn commit(mut tx: Tx, doing: &'static str) -> Result<(), StoreError> {
    let mut stamped = None;
    if Backend::of(&tx) == Backend::Postgres {
        let stamp: Option<i64> = sqlx::query_scalar(
            "UPDATE event_counter SET value = value + 1 WHERE id = 1 AND EXISTS \
             (SELECT 1 FROM events WHERE commit_seq IS NULL AND txid = pg_current_xact_id()) \
             RETURNING value",
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        if let Some(stamp) = stamp {
            sqlx::query(
                "UPDATE events SET commit_seq = $1 \
                 WHERE commit_seq IS NULL AND txid = pg_current_xact_id()",
            )
            .bind(stamp)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
        }
        stamped = stamp;
    }
    outbox::seal(&mut tx, stamped).await?;
    tx.commit().await.map_err(query_error(doing))
}

/// `url` with SQLite's `mode` parameter set (`rwc` creates the file, `rw` does not),
/// unless the URL sets one itself.
fn with_sqlite_mode(url: &str, mode: &str) -> String {
    if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode={mode}")
    } else {
        format!("{url}?mode={mode}")
    }
}

/// Whether a connection given back to the pool may be used again: only outside a
/// transaction. When a `COMMIT` fails on a full disk or an I/O error, SQLite has already
/// rolled the transaction back, so the `ROLLBACK` of the dropped transaction fails too and
/// the driver still counts the connection as inside one: every later `BEGIN` on it would
/// fail. Such a connection is closed (the pool opens a fresh one), so that once the disk
/// has room again the results are written again.
async fn release_outside_transaction(conn: &mut AnyConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection as _;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A dropped transaction queues its rollback on the connection's worker; a ping is
    // queued behind it, so once it answers, the rollback has run (or failed).
    if conn.ping().await.is_err() {
        return Ok(false);
    }
    Ok(!conn.is_in_transaction())
}

impl Store {
    /// Opens (creating if needed) the database at `url` and applies the migrations.
    ///
    /// On SQLite the file is created if missing and runs in WAL mode with a busy
    /// timeout, so readers never block the writer and concurrent writers wait instead of
    /// failing, and with [`SYNCHRONOUS`], so that a commit is on disk before it is
    /// acknowledged. On PostgreSQL the database must exist; the schema is created in it.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with_synchronous(url, SYNCHRONOUS).await
    }

    /// [`Store::open`] with another `synchronous` setting on SQLite, to measure what
    /// durability costs (BENCHMARKS.md, "Commit durability"). The engine opens with
    /// [`SYNCHRONOUS`]; PostgreSQL keeps the server's own setting.
    pub async fn open_with_synchronous(
        url: &str,
        synchronous: CommitDurability,
    ) -> Result<Self, StoreError> {
        let backend = Backend::of_url(url)?;
        let open_error = |source: sqlx::Error| StoreError::Open {
            url: redact_url(url),
            source: source.into(),
        };
        let mut options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(30));
        let connect_url = match backend {
            Backend::Sqlite => {
                sqlite_path(url)?;
                options = options
                    .max_connections(8)
                    // A SQLite connection is a file handle, not a network link that can
                    // drop: pinging it before each use only cost every query a second
                    // round trip to its worker thread (BENCHMARKS.md, "REST API under load").
                    .test_before_acquire(false)
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            let pragmas = format!(
                                "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; \
                                 PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON;",
                                synchronous.pragma()
                            );
                            sqlx::raw_sql(sqlx::AssertSqlSafe(pragmas))
                                .execute(conn)
                                .await
                                .map(drop)
                        })
                    })
                    .after_release(|conn, _| Box::pin(release_outside_transaction(conn)));
                with_sqlite_mode(url, "rwc")
            }
            Backend::Postgres => {
                options = options.max_connections(16);
                url.to_owned()
            }
        };
        sqlx::any::install_default_drivers();
        if backend == Backend::Postgres {
            // One connection first: a pool retries a server that refuses until its
            // acquire timeout, then says only that it timed out; this names the cause.
            use sqlx::Connection as _;
            AnyConnection::connect(&connect_url)
                .await
                .map_err(open_error)?
                .close()
                .await
                .map_err(open_error)?;
        }
        let pool = options.connect(&connect_url).await.map_err(open_error)?;
        if backend == Backend::Sqlite {
            adopt_reworded_migrations(&pool)
                .await
                .map_err(|source| StoreError::Migrate {
                    url: redact_url(url),
                    source: source.into(),
                })?;
        }
        backend
            .migrator()
            .run(&pool)
            .await
            .map_err(|source| StoreError::Migrate {
                url: redact_url(url),
                source: source.into(),
            })?;
        Ok(Self { pool, backend })
    }

    /// Opens a database that must already exist, for a preview that must never write
    /// it: a SQLite file is not created, its journal mode is left as it is and no
    /// migration runs. Says whether its schema is this vigil's, so that a plan made
    /// on it is the plan `vigil serve` would carry out.
    pub async fn open_existing(url: &str) -> Result<ExistingDatabase, StoreError> {
        let backend = Backend::of_url(url)?;
        let open_error = |source: sqlx::Error| StoreError::Open {
            url: redact_url(url),
            source: source.into(),
        };
        let connect_url = match backend {
            Backend::Sqlite => {
                sqlite_path(url)?;
                with_sqlite_mode(url, "rw")
            }
            Backend::Postgres => url.to_owned(),
        };
        sqlx::any::install_default_drivers();
        if backend == Backend::Postgres {
            use sqlx::Connection as _;
            AnyConnection::connect(&connect_url)
                .await
                .map_err(open_error)?
                .close()
                .await
                .map_err(open_error)?;
        }
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&connect_url)
            .await
            .map_err(open_error)?;
        let store = Self { pool, backend };
        match store.schema_versions().await {
            Ok(state) => {
                if let ExistingDatabase::Ready(_) = state {
                    return Ok(ExistingDatabase::Ready(store));
                }
                store.close().await;
                Ok(state)
            }
            Err(error) => {
                store.close().await;
                Err(error)
            }
        }
    }

    /// Compares the migrations applied to this database with this vigil's.
    async fn schema_versions(&self) -> Result<ExistingDatabase, StoreError> {
        let tables_sql = match self.backend {
            Backend::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'table'",
            Backend::Postgres => {
                "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()"
            }
        };
        let tables: Vec<String> = sqlx::query_scalar(tables_sql)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("reading the schema"))?;
        if tables.is_empty() {
            return Ok(ExistingDatabase::Blank);
        }
        let expected: Vec<i64> = self.backend.migrator().iter().map(|m| m.version).collect();
        let applied: Vec<i64> = if tables.iter().any(|t| t == "_sqlx_migrations") {
            sqlx::query_scalar(
                "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
            )
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("reading the applied migrations"))?
        } else {
            Vec::new()
        };
        if applied == expected {
            // The store is handed out by the caller, which owns the pool.
            Ok(ExistingDatabase::Ready(self.clone()))
        } else {
            Ok(ExistingDatabase::SchemaMismatch { applied, expected })
        }
    }

    /// Opens the SQLite file at `path`.
    pub async fn open_path(path: &Path) -> Result<Self, StoreError> {
        Self::open(&format!("sqlite://{}", path.display())).await
    }

    /// The database behind this store.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The underlying pool, for the few callers that need raw SQL (tests).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The database's clock, in milliseconds since the Unix epoch. Replicas sharing a
    /// PostgreSQL server judge leases and spacing on this one clock, never on their own;
    /// on SQLite, one process on one machine, it is that machine's clock.
    pub async fn now(&self) -> Result<Timestamp, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
            }
            Backend::Postgres => "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
        };
        let millis: i64 = sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("reading the database's clock"))?;
        Ok(Timestamp(millis))
    }

    async fn begin_write(&self) -> Result<Tx, StoreError> {
        let begin = match self.backend {
            // A deferred BEGIN that reads and then writes cannot upgrade its lock when
            // another connection committed in between; IMMEDIATE takes the write lock
            // up front and lets the busy timeout do the waiting.
            Backend::Sqlite => "BEGIN IMMEDIATE",
            // READ COMMITTED: what a transaction decides on, it locks first (the
            // statements that read a cluster's row to decide say `FOR UPDATE`).
            Backend::Postgres => "BEGIN",
        };
        self.pool
            .begin_with(begin)
            .await
            .map_err(query_error("beginning a transaction"))
    }

    /// Inserts newly discovered clusters as UNKNOWN (due at once) and updates the
    /// endpoint and reference of known discovered clusters that changed. Never
    /// deletes; never touches manual or ignored clusters.
    pub async fn upsert_discovered(
        &self,
        clusters: &[DiscoveredClusterRow],
        now: Timestamp,
    ) -> Result<UpsertSummary, StoreError> {
        let mut tx = self.begin_write().await?;
        let summary = upsert_discovered_in_tx(&mut tx, clusters, now).await?;
        commit(tx, "committing discovery").await?;
        Ok(summary)
    }

    /// What [`Store::upsert_discovered`] would do with `clusters`, without doing it:
    /// the very same upsert runs in a transaction that is then rolled back, so the
    /// plan cannot drift from what the engine does. Nothing is ever committed.
    pub async fn plan_discovered(
        &self,
        clusters: &[DiscoveredClusterRow],
        now: Timestamp,
    ) -> Result<UpsertSummary, StoreError> {
        let mut tx = self.begin_write().await?;
        let summary = upsert_discovered_in_tx(&mut tx, clusters, now).await?;
        tx.rollback()
            .await
            .map_err(query_error("rolling back a discovery plan"))?;
        Ok(summary)
    }

    /// Registers a cluster by hand (source `manual`), UNKNOWN and due at once.
    pub async fn register_cluster(
        &self,
        name: &str,
        endpoint: &str,
        reference: &str,
        policy: &PolicyOverrides,
        now: Timestamp,
    ) -> Result<ClusterId, StoreError> {
        let policy = serde_json::to_string(policy).map_err(|e| StoreError::Corrupt {
            what: "policy",
            reason: e.to_string(),
        })?;
        let mut tx = self.begin_write().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM clusters WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error("checking a cluster name"))?;
        if exists.is_some() {
            return Err(StoreError::AlreadyExists {
                kind: "cluster",
                name: name.to_owned(),
            });
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO clusters (name, endpoint, kubeconfig_secret_ref, source, policy, \
             next_due, first_seen, updated_at) VALUES ($1, $2, $3, 'manual', $4, $5, $6, $7) RETURNING id",
        )
        .bind(name)
        .bind(endpoint)
        .bind(reference)
        .bind(policy)
        .bind(now.0)
        .bind(now.0)
        .bind(now.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error("registering a cluster"))?;
        insert_event(
            &mut tx,
            now,
            Some((id, name)),
            None,
            "cluster-registered",
            &serde_json::json!({ "endpoint": endpoint }),
            None,
        )
        .await?;
        commit(tx, "committing a registration").await?;
        Ok(ClusterId(id))
    }

    /// Replaces a cluster's policy overrides.
    pub async fn set_cluster_policy(
        &self,
        name: &str,
        policy: &PolicyOverrides,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let policy = serde_json::to_string(policy).map_err(|e| StoreError::Corrupt {
            what: "policy",
            reason: e.to_string(),
        })?;
        let done = sqlx::query("UPDATE clusters SET policy = $1, updated_at = $2 WHERE name = $3")
            .bind(policy)
            .bind(now.0)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(query_error("updating a cluster's policy"))?;
        if done.rows_affected() == 0 {
            return Err(not_found("cluster", name));
        }
        Ok(())
    }

    /// Every cluster, ignored ones included, by name.
    pub async fn clusters(&self) -> Result<Vec<ClusterRecord>, StoreError> {
        let sql = format!("SELECT {CLUSTER_COLUMNS} FROM clusters ORDER BY name");
        let rows: Vec<ClusterRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("listing clusters"))?;
        rows.into_iter().map(ClusterRecord::try_from).collect()
    }

    /// The cluster of the given name.
    pub async fn cluster(&self, name: &str) -> Result<ClusterRecord, StoreError> {
        let sql = format!("SELECT {CLUSTER_COLUMNS} FROM clusters WHERE name = $1");
        let row: Option<ClusterRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("reading a cluster"))?;
        row.ok_or_else(|| not_found("cluster", name))?.try_into()
    }

    /// Clusters due at `now` (not ignored), most overdue first, at most `limit`.
    pub async fn due_clusters(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<ClusterRecord>, StoreError> {
        let sql = format!(
            "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE ignored = 0 AND next_due <= $1 \
             ORDER BY next_due, id LIMIT $2"
        );
        let rows: Vec<ClusterRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(now.0)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("listing due clusters"))?;
        rows.into_iter().map(ClusterRecord::try_from).collect()
    }

    /// [`Self::due_clusters`] other than `excluded` (the worker excludes the clusters
    /// whose probe is in flight or held back), so that `limit` is the number of probes
    /// it can start.
    pub async fn due_clusters_excluding(
        &self,
        now: Timestamp,
        excluded: &[i64],
        limit: usize,
    ) -> Result<Vec<ClusterRecord>, StoreError> {
        let excluded = serde_json::to_string(excluded).unwrap_or_else(|_| "[]".to_owned());
        let ids = self.backend.ids_of_json(2);
        let sql = format!(
            "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE ignored = 0 AND next_due <= $1 \
             AND id NOT IN ({ids}) ORDER BY next_due, id LIMIT $3"
        );
        let rows: Vec<ClusterRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(now.0)
            .bind(excluded)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("listing due clusters"))?;
        rows.into_iter().map(ClusterRecord::try_from).collect()
    }

    /// The earliest `next_due` among clusters that are probed, if any.
    pub async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT MIN(next_due) FROM clusters WHERE ignored = 0")
                .fetch_one(&self.pool)
                .await
                .map_err(query_error("finding the next due cluster"))?;
        Ok(next.map(Timestamp))
    }

    /// The earliest `next_due` among probed clusters other than `excluded`
    /// (the worker excludes clusters whose probe is in flight).
    pub async fn next_due_excluding(
        &self,
        excluded: &[i64],
    ) -> Result<Option<Timestamp>, StoreError> {
        let excluded = serde_json::to_string(excluded).unwrap_or_else(|_| "[]".to_owned());
        let ids = self.backend.ids_of_json(1);
        let next: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT MIN(next_due) FROM clusters WHERE ignored = 0 AND id NOT IN ({ids})"
        )))
        .bind(excluded)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("finding the next due cluster"))?;
        Ok(next.map(Timestamp))
    }

    /// Applies one probe outcome to one cluster, in one transaction: brake
    /// evaluation, the transition, the cascade on apps and outages, the events,
    /// and the cluster's next due time. Returns `None` if the cluster is gone
    /// or ignored since the probe started.
    pub async fn apply_probe(
        &self,
        cluster: ClusterId,
        outcome: &ProbeOutcome,
        now: Timestamp,
        next_due: Timestamp,
        settings: &ApplySettings,
    ) -> Result<Option<AppliedProbe>, StoreError> {
        self.apply_probe_by(cluster, outcome, None, now, next_due, settings)
            .await
    }

    /// [`Self::apply_probe`], recording which plugin generation produced the outcome.
    pub async fn apply_probe_by(
        &self,
        cluster: ClusterId,
        outcome: &ProbeOutcome,
        by: Option<&ProbedBy>,
        now: Timestamp,
        next_due: Timestamp,
        settings: &ApplySettings,
    ) -> Result<Option<AppliedProbe>, StoreError> {
        let result = ProbeResult {
            cluster,
            outcome,
            by,
            now,
            next_due,
            claim: None,
            duration: None,
        };
        self.apply_probes(&[result], settings)
            .await?
            .into_iter()
            .next()
            .unwrap_or(Ok(None))
    }

    /// Applies several probes' results in one transaction, each as
    /// [`Self::apply_probe_by`] would, inside a savepoint of its own: a result that
    /// cannot be applied is rolled back alone (its entry is the error) and the others
    /// are committed. One commit — one sync of the log — for the whole batch is what
    /// lets a busy engine get past the single writer.
    ///
    /// # Errors
    ///
    /// The outer error when the transaction could not begin or commit, or when the
    /// database rolled the whole transaction back: then nothing of the batch was
    /// written.
    pub async fn apply_probes(
        &self,
        results: &[ProbeResult<'_>],
        settings: &ApplySettings,
    ) -> Result<Vec<Result<Option<AppliedProbe>, StoreError>>, StoreError> {
        let mut tx = self.begin_write().await?;
        if let [result] = results {
            // Alone in its transaction, a result needs no savepoint: its failure rolls
            // back only itself.
            let applied = apply_probe_in_tx(&mut tx, result, settings).await;
            if applied.is_ok() {
                commit(tx, "committing a probe result").await?;
            }
            return Ok(vec![applied]);
        }
        let mut applied = Vec::with_capacity(results.len());
        for result in results {
            sqlx::query("SAVEPOINT probe_result")
                .execute(&mut *tx)
                .await
                .map_err(query_error("opening a probe result's savepoint"))?;
            match apply_probe_in_tx(&mut tx, result, settings).await {
                Ok(done) => {
                    sqlx::query("RELEASE probe_result")
                        .execute(&mut *tx)
                        .await
                        .map_err(query_error("releasing a probe result's savepoint"))?;
                    applied.push(Ok(done));
                }
                Err(error) => {
                    // Fails when the database already rolled the whole transaction
                    // back (a full disk, an I/O error): then the batch failed whole.
                    sqlx::query("ROLLBACK TO probe_result")
                        .execute(&mut *tx)
                        .await
                        .map_err(query_error("rolling back one probe result"))?;
                    sqlx::query("RELEASE probe_result")
                        .execute(&mut *tx)
                        .await
                        .map_err(query_error("releasing a probe result's savepoint"))?;
                    applied.push(Err(error));
                }
            }
        }
        commit(tx, "committing probe results").await?;
        Ok(applied)
    }

    /// Records that a cluster's policy disables probing (or no longer does),
    /// without probing it, and schedules its next look.
    pub async fn apply_disabled(
        &self,
        cluster: ClusterId,
        disabled: bool,
        now: Timestamp,
        next_due: Timestamp,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let Some(record) = cluster_in_tx(&mut tx, cluster).await? else {
            return Ok(());
        };
        let decision = set_probing_disabled(&record.health, disabled, now);
        for event in &decision.events {
            let (kind, detail) = event_parts(event);
            insert_event(
                &mut tx,
                now,
                Some((cluster.0, &record.name)),
                None,
                &kind,
                &detail,
                None,
            )
            .await?;
        }
        save_health(&mut tx, cluster, &decision.health, next_due, now, None).await?;
        commit(tx, "committing a disabled cluster").await?;
        Ok(())
    }

    /// The brake's persisted state.
    pub async fn brake_state(&self) -> Result<BrakeState, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(query_error("reading the brake"))?;
        brake_state_in_tx(&mut conn, false).await
    }

    /// Registers an app on a cluster with the given status.
    pub async fn register_app(
        &self,
        name: &str,
        cluster: &str,
        status: AppStatus,
        now: Timestamp,
    ) -> Result<AppId, StoreError> {
        self.register_app_as(name, cluster, status, None, now)
            .await
            .map(|app| app.id)
    }

    /// The app of the given name.
    pub async fn app(&self, name: &str) -> Result<AppRecord, StoreError> {
        let row: Option<AppRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{APP_SELECT} WHERE a.name = $1"
        )))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("reading an app"))?;
        row.ok_or_else(|| not_found("app", name))?.record()
    }

    /// Every app, by name.
    pub async fn apps(&self) -> Result<Vec<AppRecord>, StoreError> {
        let rows: Vec<AppRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{APP_SELECT} ORDER BY a.name")))
                .fetch_all(&self.pool)
                .await
                .map_err(query_error("listing apps"))?;
        rows.into_iter().map(AppRow::record).collect()
    }

    /// The platform sets an app's status; this clears its degraded-by marker
    /// (docs/rules.md#marker-cleared).
    pub async fn set_app_status(
        &self,
        name: &str,
        status: AppStatus,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.set_app_status_as(name, status, None, now)
            .await
            .map(drop)
    }

    /// Reassigns an app to another cluster, refused while the target is OFFLINE
    /// (docs/rules.md#deployment-guard, checked inside the writing transaction); clears
    /// the marker.
    pub async fn reassign_app(
        &self,
        name: &str,
        cluster: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.reassign_app_as(name, cluster, None, now)
            .await
            .map(drop)
    }

    /// Records a deployment of an app on its cluster, refused while the cluster
    /// is OFFLINE (docs/rules.md#deployment-guard, inside the transaction); sets DEPLOYED
    /// and clears the marker.
    pub async fn record_deployment(
        &self,
        app: &str,
        version: Option<&str>,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<i64, StoreError> {
        let mut tx = self.begin_write().await?;
        let app_row: Option<(i64, String)> = sqlx::query_as(
            "SELECT a.id, c.name FROM apps a JOIN clusters c ON c.id = a.cluster_id WHERE a.name = $1",
        )
        .bind(app)
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error("reading an app"))?;
        let (app_id, cluster) = app_row.ok_or_else(|| not_found("app", app))?;
        let cluster_id = guarded_cluster(&mut tx, &cluster).await?;
        sqlx::query(
            "UPDATE apps SET status = 'DEPLOYED', degraded_by_outage = NULL, updated_at = $1 \
             WHERE id = $2",
        )
        .bind(now.0)
        .bind(app_id)
        .execute(&mut *tx)
        .await
        .map_err(query_error("marking an app deployed"))?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO deployments (app_id, cluster_id, version, actor, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(app_id)
        .bind(cluster_id.0)
        .bind(version)
        .bind(actor)
        .bind(now.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error("recording a deployment"))?;
        insert_event(
            &mut tx,
            now,
            Some((cluster_id.0, &cluster)),
            None,
            "app-deployed",
            &serde_json::json!({ "app": app, "version": version, "deployment": id }),
            actor,
        )
        .await?;
        commit(tx, "committing a deployment").await?;
        Ok(id)
    }

    /// The outages of a cluster, oldest first.
    pub async fn outages(&self, cluster: &str) -> Result<Vec<OutageRecord>, StoreError> {
        sqlx::query_as(
            "SELECT o.id, o.cluster_id, o.opened_at, o.closed_at FROM outages o \
             JOIN clusters c ON c.id = o.cluster_id WHERE c.name = $1 ORDER BY o.id",
        )
        .bind(cluster)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("listing outages"))
    }

    /// The history of a cluster (or of the whole engine with `None`), oldest first.
    pub async fn events(&self, cluster: Option<&str>) -> Result<Vec<EventRecord>, StoreError> {
        sqlx::query_as(
            "SELECT id, at, cluster_name, outage_id, kind, detail, actor FROM events \
             WHERE $1 IS NULL OR cluster_name = $2 ORDER BY id",
        )
        .bind(cluster)
        .bind(cluster)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("listing events"))
    }

    /// Deletes the history older than `before` (docs/rules.md#history-retention): events, then closed
    /// outages. Kept whatever their age: the events of an open outage (those that
    /// name it, and those of its cluster since it opened), the open outage itself,
    /// and every outage that an app's degraded-by marker, a cluster or a kept
    /// event still points at. Deployments are records of what was deployed, not
    /// history, and are never pruned.
    ///
    /// Events go in batches of [`PRUNE_BATCH`], each in its own short
    /// transaction, so a large backlog never holds the write lock long enough to
    /// delay the health worker.
    pub async fn prune_history(&self, before: Timestamp) -> Result<PrunedHistory, StoreError> {
        let mut pruned = PrunedHistory::default();
        loop {
            let mut tx = self.begin_write().await?;
            let done = sqlx::query(
                "DELETE FROM events WHERE id IN (\
                   SELECT e.id FROM events e WHERE e.at < $1 \
                   AND NOT EXISTS (SELECT 1 FROM outages o \
                     WHERE o.id = e.outage_id AND o.closed_at IS NULL) \
                   AND NOT EXISTS (SELECT 1 FROM outages o \
                     WHERE o.cluster_id = e.cluster_id AND o.closed_at IS NULL AND e.at >= o.opened_at) \
                   ORDER BY e.id LIMIT $2)",
            )
            .bind(before.0)
            .bind(PRUNE_BATCH)
            .execute(&mut *tx)
            .await
            .map_err(query_error("pruning events"))?;
            commit(tx, "committing pruned events").await?;
            pruned.events += done.rows_affected();
            if done.rows_affected() < PRUNE_BATCH.unsigned_abs() {
                break;
            }
            // Let the worker's writes in between two batches.
            tokio::task::yield_now().await;
        }
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "DELETE FROM outages WHERE closed_at IS NOT NULL AND closed_at < $1 \
             AND id NOT IN (SELECT degraded_by_outage FROM apps WHERE degraded_by_outage IS NOT NULL) \
             AND id NOT IN (SELECT open_outage_id FROM clusters WHERE open_outage_id IS NOT NULL) \
             AND id NOT IN (SELECT outage_id FROM events WHERE outage_id IS NOT NULL)",
        )
        .bind(before.0)
        .execute(&mut *tx)
        .await
        .map_err(query_error("pruning outages"))?;
        commit(tx, "committing pruned outages").await?;
        pruned.outages = done.rows_affected();
        Ok(pruned)
    }

    // Aggregates for the metrics, read at each scrape: one query each, whatever the
    // fleet's size. Ignored clusters (deleted through the API) are not counted.

    /// How many clusters have each status (statuses with no cluster are absent).
    pub async fn status_counts(&self) -> Result<BTreeMap<ClusterStatus, u64>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, COUNT(*) FROM clusters WHERE ignored = 0 GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("counting clusters by status"))?;
        rows.into_iter()
            .map(|(status, count)| Ok((parse_status(&status)?, count.unsigned_abs())))
            .collect()
    }

    /// How many clusters carry each condition (conditions no cluster carries are absent).
    pub async fn condition_counts(
        &self,
    ) -> Result<BTreeMap<vigil_decision::ConditionType, u64>, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT json_extract(condition.value, '$.type') AS kind, \
                 COUNT(DISTINCT clusters.id) FROM clusters, json_each(clusters.conditions) AS condition \
                 WHERE clusters.ignored = 0 GROUP BY kind"
            }
            Backend::Postgres => {
                "SELECT condition.value->>'type' AS kind, COUNT(DISTINCT clusters.id) \
                 FROM clusters, jsonb_array_elements(clusters.conditions::jsonb) AS condition \
                 WHERE clusters.ignored = 0 GROUP BY kind"
            }
        };
        let rows: Vec<(Option<String>, i64)> = sqlx::query_as(sql)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("counting clusters by condition"))?;
        rows.into_iter()
            .map(|(kind, count)| {
                let kind = kind.unwrap_or_default();
                let kind = vigil_decision::ConditionType::from_str(&kind).map_err(|e| {
                    StoreError::Corrupt {
                        what: "conditions",
                        reason: e.to_string(),
                    }
                })?;
                Ok((kind, count.unsigned_abs()))
            })
            .collect()
    }

    /// Every cluster's name and status, by name.
    pub async fn cluster_statuses(&self) -> Result<Vec<(String, ClusterStatus)>, StoreError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT name, status FROM clusters WHERE ignored = 0 ORDER BY name")
                .fetch_all(&self.pool)
                .await
                .map_err(query_error("listing cluster statuses"))?;
        rows.into_iter()
            .map(|(name, status)| Ok((name, parse_status(&status)?)))
            .collect()
    }
}

/// How many events [`Store::prune_history`] deletes per transaction.
pub const PRUNE_BATCH: i64 = 5_000;

/// What [`Store::prune_history`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PrunedHistory {
    /// Events deleted.
    pub events: u64,
    /// Closed outages deleted.
    pub outages: u64,
}

/// The upsert of discovered clusters inside the caller's transaction, shared by
/// [`Store::upsert_discovered`] (which commits) and [`Store::plan_discovered`]
/// (which rolls back).
async fn upsert_discovered_in_tx(
    tx: &mut Tx,
    clusters: &[DiscoveredClusterRow],
    now: Timestamp,
) -> Result<UpsertSummary, StoreError> {
    let mut summary = UpsertSummary::default();
    for cluster in clusters {
        let existing: Option<(i64, String, i64, String, String)> = sqlx::query_as(
            "SELECT id, source, ignored, endpoint, kubeconfig_secret_ref \
             FROM clusters WHERE name = $1",
        )
        .bind(&cluster.name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(query_error("reading a discovered cluster"))?;
        let name = cluster.name.clone();
        match existing {
            None => {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO clusters (name, endpoint, kubeconfig_secret_ref, source, \
                     next_due, first_seen, updated_at) \
                     VALUES ($1, $2, $3, 'discovered', $4, $5, $6) RETURNING id",
                )
                .bind(&cluster.name)
                .bind(&cluster.endpoint)
                .bind(&cluster.reference)
                .bind(now.0)
                .bind(now.0)
                .bind(now.0)
                .fetch_one(&mut **tx)
                .await
                .map_err(query_error("inserting a discovered cluster"))?;
                insert_event(
                    tx,
                    now,
                    Some((id, &cluster.name)),
                    None,
                    "cluster-discovered",
                    &serde_json::json!({ "endpoint": cluster.endpoint, "reference": cluster.reference }),
                    None,
                )
                .await?;
                summary.inserted.push(name);
            }
            Some((_, source, _, _, _)) if source == ClusterSource::Manual.as_str() => {
                summary.kept_manual.push(name);
            }
            Some((_, _, ignored, _, _)) if ignored != 0 => summary.ignored.push(name),
            Some((id, _, _, endpoint, reference))
                if endpoint != cluster.endpoint || reference != cluster.reference =>
            {
                sqlx::query(
                    "UPDATE clusters SET endpoint = $1, kubeconfig_secret_ref = $2, \
                     updated_at = $3 WHERE id = $4",
                )
                .bind(&cluster.endpoint)
                .bind(&cluster.reference)
                .bind(now.0)
                .bind(id)
                .execute(&mut **tx)
                .await
                .map_err(query_error("updating a discovered cluster"))?;
                insert_event(
                    tx,
                    now,
                    Some((id, &cluster.name)),
                    None,
                    "cluster-rediscovered",
                    &serde_json::json!({
                        "endpoint": { "from": endpoint, "to": cluster.endpoint },
                        "reference": { "from": reference, "to": cluster.reference },
                    }),
                    None,
                )
                .await?;
                let changes = [
                    ("endpoint", endpoint, &cluster.endpoint),
                    ("reference", reference, &cluster.reference),
                ]
                .into_iter()
                .filter(|(_, from, to)| from != *to)
                .map(|(field, from, to)| FieldChange {
                    field,
                    from,
                    to: to.clone(),
                })
                .collect();
                summary.changes.insert(name.clone(), changes);
                summary.updated.push(name);
            }
            Some(_) => summary.unchanged.push(name),
        }
    }
    Ok(summary)
}

fn parse_status(text: &str) -> Result<ClusterStatus, StoreError> {
    ClusterStatus::from_str(text).map_err(|e| StoreError::Corrupt {
        what: "status",
        reason: e.to_string(),
    })
}

fn not_found(kind: &'static str, name: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        name: name.to_owned(),
    }
}

fn ids_json(ids: &[AppId]) -> String {
    serde_json::to_string(&ids.iter().map(|id| id.0).collect::<Vec<_>>())
        .unwrap_or_else(|_| "[]".to_owned())
}

/// Splits a health event into its kind (the serde tag) and its JSON details.
fn event_parts(event: &HealthEvent) -> (String, serde_json::Value) {
    let mut value = serde_json::to_value(event).unwrap_or_default();
    let kind = value
        .as_object_mut()
        .and_then(|map| map.remove("event"))
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "event".to_owned());
    (kind, value)
}

async fn insert_event(
    tx: &mut Tx,
    now: Timestamp,
    cluster: Option<(i64, &str)>,
    outage: Option<OutageId>,
    kind: &str,
    detail: &serde_json::Value,
    actor: Option<&str>,
) -> Result<(), StoreError> {
    // A cascade names its apps by id; the history also keeps their names, which outlive
    // a deleted app and are what a reader wants.
    let named;
    let cascade = matches!(kind, "apps-degraded" | "apps-restored");
    let names = if cascade {
        outbox::app_names(tx, detail).await?
    } else {
        None
    };
    let detail = match names {
        Some(names) => {
            let mut with_names = detail.clone();
            with_names["app_names"] = names.into();
            named = with_names;
            &named
        }
        None => detail,
    };
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO events (at, cluster_id, cluster_name, outage_id, kind, detail, actor) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(now.0)
    .bind(cluster.map(|c| c.0))
    .bind(cluster.map(|c| c.1))
    .bind(outage.map(|o| o.0))
    .bind(kind)
    .bind(detail.to_string())
    .bind(actor)
    .fetch_one(&mut **tx)
    .await
    .map_err(query_error("recording an event"))?;
    // A notifiable event's notification is written with it, in the same transaction.
    outbox::enqueue(tx, id, now, cluster, outage.map(|o| o.0), kind, detail).await
}

/// A cluster's row, read to decide on it: on PostgreSQL the row stays locked until the
/// transaction ends, so the decision is made on a state nothing else changes meanwhile.
async fn cluster_in_tx(
    tx: &mut Tx,
    cluster: ClusterId,
) -> Result<Option<ClusterRecord>, StoreError> {
    let lock = Backend::of(tx).lock_for_update();
    let sql = format!("SELECT {CLUSTER_COLUMNS} FROM clusters WHERE id = $1{lock}");
    let row: Option<ClusterRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(cluster.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(query_error("reading a cluster"))?;
    row.map(ClusterRecord::try_from).transpose()
}

async fn cluster_id_by_name(tx: &mut Tx, name: &str) -> Result<ClusterId, StoreError> {
    let id: Option<i64> = sqlx::query_scalar("SELECT id FROM clusters WHERE name = $1")
        .bind(name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(query_error("reading a cluster"))?;
    id.map(ClusterId).ok_or_else(|| not_found("cluster", name))
}

/// The id of a cluster that may receive a deployment: anything but OFFLINE
/// (docs/rules.md#deployment-guard).
async fn guarded_cluster(tx: &mut Tx, name: &str) -> Result<ClusterId, StoreError> {
    // Shared: a status change waits for the guarded write to commit, and the guard waits
    // for a status change in flight, then reads its result.
    let lock = Backend::of(tx).lock_for_share();
    let row: Option<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, status FROM clusters WHERE name = $1{lock}"
    )))
    .bind(name)
    .fetch_optional(&mut **tx)
    .await
    .map_err(query_error("reading a cluster"))?;
    let (id, status) = row.ok_or_else(|| not_found("cluster", name))?;
    if status == ClusterStatus::Offline.as_str() {
        return Err(StoreError::ClusterOffline {
            cluster: name.to_owned(),
        });
    }
    Ok(ClusterId(id))
}

/// What a probe writes into its cluster's row beside the health.
struct OutcomeColumns<'a> {
    outcome: &'a ProbeOutcome,
    /// `failed` or `healthy` for a conclusive outcome, which the brake considers.
    conclusive: Option<&'static str>,
    by: Option<&'a ProbedBy>,
    /// Among replicas (PostgreSQL): the replica that probed, and the one that counted the
    /// cluster's last failure now.
    judged_by: Option<(&'a str, Option<&'a str>)>,
}

/// Writes a cluster's health and next due time and, for a probe, its outcome: one
/// statement either way (each statement is a round trip to the database's thread, and
/// each round trip costs two thread wake-ups).
async fn save_health(
    tx: &mut Tx,
    cluster: ClusterId,
    health: &ClusterHealth,
    next_due: Timestamp,
    now: Timestamp,
    probe: Option<OutcomeColumns<'_>>,
) -> Result<(), StoreError> {
    let conditions =
        serde_json::to_string(&health.conditions).map_err(|e| StoreError::Corrupt {
            what: "conditions",
            reason: e.to_string(),
        })?;
    let outcome_columns = match &probe {
        Some(OutcomeColumns {
            judged_by: Some(_), ..
        }) => {
            ", last_outcome = $13, last_reason = $14, last_reason_class = $15, \
             latest_conclusive = COALESCE($16, latest_conclusive), \
             latest_conclusive_at = CASE WHEN $17 IS NULL THEN latest_conclusive_at ELSE $18 END, \
             last_plugin = $19, last_plugin_generation = $20, \
             last_counted_failure_by = $21, \
             latest_conclusive_by = CASE WHEN $16 IS NULL THEN latest_conclusive_by ELSE $22 END"
        }
        Some(_) => {
            ", last_outcome = $13, last_reason = $14, last_reason_class = $15, \
             latest_conclusive = COALESCE($16, latest_conclusive), \
             latest_conclusive_at = CASE WHEN $17 IS NULL THEN latest_conclusive_at ELSE $18 END, \
             last_plugin = $19, last_plugin_generation = $20"
        }
        None => "",
    };
    // Writing the cluster's state ends any claim on it (PostgreSQL).
    let release = match Backend::of(tx) {
        Backend::Sqlite => "",
        Backend::Postgres => ", claimed_by = NULL, claim_expires = NULL",
    };
    // The cluster's id is `$12` whether the outcome's columns follow or not.
    let mut query = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE clusters SET status = $1, conditions = $2, consecutive_failures = $3, \
         consecutive_successes = $4, consecutive_inconclusive = $5, last_counted_failure = $6, \
         last_probe = $7, last_success = $8, open_outage_id = $9, next_due = $10, updated_at = $11\
         {release}{outcome_columns} WHERE id = $12"
    )))
    .bind(health.status.as_str())
    .bind(conditions)
    .bind(i64::from(health.consecutive_failures))
    .bind(i64::from(health.consecutive_successes))
    .bind(i64::from(health.consecutive_inconclusive))
    .bind(health.last_counted_failure.map(|t| t.0))
    .bind(health.last_probe.map(|t| t.0))
    .bind(health.last_success.map(|t| t.0))
    .bind(health.open_outage.map(|o| o.0))
    .bind(next_due.0)
    .bind(now.0)
    .bind(cluster.0);
    if let Some(OutcomeColumns {
        outcome,
        conclusive,
        by,
        judged_by,
    }) = probe
    {
        query = query
            .bind(outcome.label())
            .bind(outcome.message())
            .bind(outcome.class().map(|c| c.as_str()))
            .bind(conclusive)
            .bind(conclusive)
            .bind(now.0)
            .bind(by.map(|by| by.plugin.as_str()))
            .bind(by.map(|by| i64::try_from(by.generation).unwrap_or(i64::MAX)));
        if let Some((replica, counted_by)) = judged_by {
            query = query.bind(counted_by).bind(replica);
        }
    }
    query
        .execute(&mut **tx)
        .await
        .map_err(query_error(if outcome_columns.is_empty() {
            "saving a cluster's health"
        } else {
            "recording a probe outcome"
        }))?;
    Ok(())
}

/// The brake's state; with `lock`, its row stays locked until the transaction ends (on
/// PostgreSQL: two replicas counting failures at once then count one after the other).
async fn brake_state_in_tx(conn: &mut AnyConnection, lock: bool) -> Result<BrakeState, StoreError> {
    group_brake_in_tx(conn, FLEET_GROUP, lock).await
}

/// The brake of group `group` (the fleet's is [`FLEET_GROUP`], a replica's
/// [`replica_group`]); with `lock`, its row stays locked until the transaction ends.
async fn group_brake_in_tx(
    conn: &mut AnyConnection,
    group: &str,
    lock: bool,
) -> Result<BrakeState, StoreError> {
    let lock = if lock {
        Backend::of(conn).lock_for_update()
    } else {
        ""
    };
    let row: Option<(i64, Option<i64>, Option<i64>, i64)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT holding, since, released_at, suppressed FROM brake_state \
             WHERE group_key = $1{lock}"
        )))
        .bind(group)
        .fetch_optional(&mut *conn)
        .await
        .map_err(query_error("reading the brake"))?;
    Ok(match row {
        None => BrakeState {
            verdict: BrakeVerdict::NEVER_ENGAGED,
            suppressed: 0,
        },
        Some((holding, since, released_at, suppressed)) => BrakeState {
            verdict: if holding != 0 {
                BrakeVerdict::Holding {
                    since: Timestamp(since.unwrap_or_default()),
                }
            } else {
                BrakeVerdict::Released {
                    since: released_at.map(Timestamp),
                }
            },
            suppressed: u64::try_from(suppressed).unwrap_or_default(),
        },
    })
}

async fn save_brake(tx: &mut Tx, verdict: BrakeVerdict) -> Result<(), StoreError> {
    save_group_brake(tx, FLEET_GROUP, verdict).await
}

/// The brake group of one replica: its own outcomes, judged against the others'.
pub(crate) fn replica_group(replica: &str) -> String {
    format!("replica:{replica}")
}

async fn save_group_brake(
    tx: &mut Tx,
    group: &str,
    verdict: BrakeVerdict,
) -> Result<(), StoreError> {
    let (holding, since, released) = match verdict {
        BrakeVerdict::Holding { since } => (true, Some(since.0), None),
        BrakeVerdict::Released { since } => (false, None, since.map(|t| t.0)),
    };
    sqlx::query(
        "INSERT INTO brake_state (group_key, holding, since, released_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (group_key) DO UPDATE SET holding = excluded.holding, \
         since = COALESCE(excluded.since, brake_state.since), \
         released_at = COALESCE(excluded.released_at, brake_state.released_at)",
    )
    .bind(group)
    .bind(i64::from(holding))
    .bind(since)
    .bind(released)
    .execute(&mut **tx)
    .await
    .map_err(query_error("saving the brake"))?;
    Ok(())
}

/// The largest interval override of the fleet, in milliseconds (0 if none).
async fn largest_interval_millis(tx: &mut Tx) -> Result<i64, StoreError> {
    let sql = match Backend::of(tx) {
        Backend::Sqlite => {
            "SELECT MAX(CAST(json_extract(policy, '$.interval_seconds') AS INTEGER)) \
             FROM clusters WHERE ignored = 0"
        }
        Backend::Postgres => {
            "SELECT MAX((policy::jsonb->>'interval_seconds')::bigint) \
             FROM clusters WHERE ignored = 0"
        }
    };
    let largest: Option<i64> = sqlx::query_scalar(sql)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error("reading the fleet's intervals"))?;
    Ok(largest.unwrap_or(0).saturating_mul(1000))
}

/// One probe's result, as the worker hands it to [`Store::apply_probes`].
#[derive(Debug, Clone, Copy)]
pub struct ProbeResult<'a> {
    /// The cluster probed.
    pub cluster: ClusterId,
    /// What the probe found.
    pub outcome: &'a ProbeOutcome,
    /// The plugin generation that produced it, when a plugin did.
    pub by: Option<&'a ProbedBy>,
    /// When the probe ended.
    pub now: Timestamp,
    /// When the cluster is next due.
    pub next_due: Timestamp,
    /// The claim the probe was made under, when replicas share the fleet: the result is
    /// written only while the claim is still the replica's, and its times are then taken
    /// from the database's clock.
    pub claim: Option<&'a Claim>,
    /// How long the probe took: a conclusive probe's duration is added to its cluster's
    /// latency history, in the same transaction.
    pub duration: Option<Duration>,
}

/// The body of [`Store::apply_probe_by`], inside a transaction the caller commits.
async fn apply_probe_in_tx(
    tx: &mut Tx,
    result: &ProbeResult<'_>,
    settings: &ApplySettings,
) -> Result<Option<AppliedProbe>, StoreError> {
    let &ProbeResult {
        cluster,
        outcome,
        by,
        mut now,
        mut next_due,
        claim,
        duration,
    } = result;
    let mut previous_counted_by: Option<String> = None;
    if let Some(claim) = claim {
        // Fencing: the result stands only under the claim it was probed under; a claim
        // that lapsed and was taken again has another epoch or another replica. The row
        // stays locked until the result is written.
        let held: Option<(Option<String>, i64, i64, Option<String>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT claimed_by, claim_epoch, {}, last_counted_failure_by FROM clusters \
                 WHERE id = $1 FOR UPDATE",
                claims::DB_NOW
            )))
            .bind(cluster.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(query_error("checking a claim"))?;
        let Some((holder, epoch, database_now, counted_by)) = held else {
            return Ok(None);
        };
        previous_counted_by = counted_by;
        if holder.as_deref() != Some(claim.replica.as_str()) || epoch != claim.epoch {
            return Err(StoreError::StaleClaim { cluster: cluster.0 });
        }
        // Replicas' clocks differ; the database's is the one they share.
        next_due = Timestamp(database_now.saturating_add(next_due.millis_since(now).max(0)));
        now = Timestamp(database_now);
    }
    let Some(record) = cluster_in_tx(tx, cluster).await? else {
        return Ok(None);
    };
    if record.ignored {
        return Ok(None);
    }
    let policy = settings.defaults.with_overrides(&record.policy);
    let failed = counts_as_failure(outcome, &policy);

    // Among replicas: whether the one that probed is cut off, and whether this failure
    // needs a second opinion.
    let replicas = match claim {
        Some(claim) if outcome.is_conclusive() => {
            let judged = Judged {
                cluster,
                replica: &claim.replica,
                failed,
                now,
                previous_counted_by: previous_counted_by.as_deref(),
                last_counted_failure: record.health.last_counted_failure,
                wait_millis: i64::from(policy.interval_seconds) * 1000 + claim.lease_millis,
            };
            replica_view(tx, &judged, settings).await?
        }
        _ => ReplicaView::default(),
    };
    // A cut-off replica's failure is its own, not the fleet's: it is left out of the
    // fleet's brake. A result that may count a failure locks the brake's row first.
    let fleet_failed = failed && !replicas.cut_off;
    let brake_before = brake_state_in_tx(tx, fleet_failed).await?.verdict;
    let assessment = if brake::needs_assessment(
        brake_before,
        fleet_failed,
        outcome.is_conclusive() && !replicas.cut_off,
        &settings.brake,
    ) {
        let config = brake_config(tx, settings).await?;
        // A failure that continues this cluster's streak is judged on the fleet since the
        // streak's previous counted failure (docs/rules.md#mass-failure-brake).
        let streak = (fleet_failed && record.health.consecutive_failures > 0)
            .then_some(record.health.last_counted_failure)
            .flatten();
        evaluate_brake(
            tx,
            cluster,
            fleet_failed,
            now,
            streak,
            &config,
            brake_before,
        )
        .await?
    } else {
        None
    };
    let brake_now = assessment.map_or(brake_before, |a| a.verdict);

    // Only the app lists of a cascade depend on the apps; whether there is one, the
    // health and the other events do not. Most probes change nothing, so the apps are
    // read only when the decision made without them cascades, and it is made again
    // with them.
    let decide_with = |apps: &[AppView]| {
        decide(&ProbeInput {
            cluster,
            health: &record.health,
            policy: &policy,
            outcome,
            now,
            brake: brake_now,
            apps,
            replicas,
        })
    };
    let mut decision = decide_with(&[]);
    if !matches!(decision.cascade, Cascade::None) {
        let apps: Vec<AppRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{APP_SELECT} WHERE a.cluster_id = $1 ORDER BY a.id"
        )))
        .bind(cluster.0)
        .fetch_all(&mut **tx)
        .await
        .map_err(query_error("reading a cluster's apps"))?;
        let apps: Vec<AppView> = apps.iter().map(AppRow::view).collect::<Result<_, _>>()?;
        decision = decide_with(&apps);
    }

    if let Some(assessment) = assessment
        && assessment.changed_from(brake_before)
    {
        let kind = if assessment.verdict.holds() {
            "brake-engaged"
        } else {
            "brake-released"
        };
        insert_event(
            tx,
            now,
            None,
            None,
            kind,
            &serde_json::json!({ "considered": assessment.considered, "failed": assessment.failed }),
            None,
        )
        .await?;
    }
    if let Some(assessment) = assessment
        && assessment.changed_from(brake_before)
    {
        save_brake(tx, assessment.verdict).await?;
    }

    // A confirmed transition takes the cluster's next transition number, under the row's
    // lock: its outage carries it, and a second outage with the same number is refused.
    let transition: Option<i64> = if decision
        .events
        .iter()
        .any(|e| matches!(e, HealthEvent::StatusChanged { .. }))
    {
        Some(
            sqlx::query_scalar(
                "UPDATE clusters SET transitions = transitions + 1 WHERE id = $1 \
                 RETURNING transitions",
            )
            .bind(cluster.0)
            .fetch_one(&mut **tx)
            .await
            .map_err(query_error("numbering a transition"))?,
        )
    } else {
        None
    };
    let mut opened_outage = None;
    match &decision.cascade {
        Cascade::None => {}
        Cascade::Degrade { apps } => {
            let outage: i64 = sqlx::query_scalar(
                "INSERT INTO outages (cluster_id, opened_at, transition) VALUES ($1, $2, $3) \
                 RETURNING id",
            )
            .bind(cluster.0)
            .bind(now.0)
            .bind(transition)
            .fetch_one(&mut **tx)
            .await
            .map_err(query_error("opening an outage"))?;
            let ids = Backend::of(tx).ids_of_json(4);
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE apps SET status = 'DEGRADED', degraded_by_outage = $1, updated_at = $2 \
                 WHERE cluster_id = $3 AND status = 'DEPLOYED' AND id IN ({ids})"
            )))
            .bind(outage)
            .bind(now.0)
            .bind(cluster.0)
            .bind(ids_json(apps))
            .execute(&mut **tx)
            .await
            .map_err(query_error("degrading apps"))?;
            decision.health.open_outage = Some(OutageId(outage));
            opened_outage = Some(OutageId(outage));
        }
        Cascade::Restore { outage, apps } => {
            sqlx::query("UPDATE outages SET closed_at = $1 WHERE id = $2")
                .bind(now.0)
                .bind(outage.0)
                .execute(&mut **tx)
                .await
                .map_err(query_error("closing an outage"))?;
            let ids = Backend::of(tx).ids_of_json(4);
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE apps SET status = 'DEPLOYED', degraded_by_outage = NULL, updated_at = $1 \
                 WHERE cluster_id = $2 AND status = 'DEGRADED' AND degraded_by_outage = $3 \
                 AND id IN ({ids})"
            )))
            .bind(now.0)
            .bind(cluster.0)
            .bind(outage.0)
            .bind(ids_json(apps))
            .execute(&mut **tx)
            .await
            .map_err(query_error("restoring apps"))?;
        }
    }

    let outage_of_events = opened_outage.or(match &decision.cascade {
        Cascade::Restore { outage, .. } => Some(*outage),
        _ => None,
    });
    for event in &decision.events {
        let (kind, mut detail) = event_parts(event);
        if let (HealthEvent::StatusChanged { .. }, Some(number), Some(fields)) =
            (event, transition, detail.as_object_mut())
        {
            fields.insert("transition".to_owned(), serde_json::json!(number));
        }
        insert_event(
            tx,
            now,
            Some((cluster.0, &record.name)),
            outage_of_events,
            &kind,
            &detail,
            None,
        )
        .await?;
    }
    let suppressed_by_brake = decision.events.iter().any(|e| {
        matches!(
            e,
            HealthEvent::FailureNotCounted {
                why: NotCounted::Brake,
                ..
            }
        )
    });
    let suppressed_by_replica_brake = decision.events.iter().any(|e| {
        matches!(
            e,
            HealthEvent::FailureNotCounted {
                why: NotCounted::ReplicaCutOff,
                ..
            }
        )
    });
    let suppressed_in = if suppressed_by_brake {
        Some(FLEET_GROUP.to_owned())
    } else if suppressed_by_replica_brake {
        claim.map(|claim| replica_group(&claim.replica))
    } else {
        None
    };
    if let Some(group) = suppressed_in {
        sqlx::query("UPDATE brake_state SET suppressed = suppressed + 1 WHERE group_key = $1")
            .bind(group)
            .execute(&mut **tx)
            .await
            .map_err(query_error("counting a suppressed failure"))?;
    }
    // Among replicas: which replica's outcome the brake's input is, and which replica
    // counted the last failure (a second opinion must come from another).
    let judged_by = claim.map(|claim| {
        let counted = decision
            .events
            .iter()
            .any(|e| matches!(e, HealthEvent::FailureCounted { .. }));
        let counted_by = if counted {
            Some(claim.replica.as_str())
        } else if decision.health.last_counted_failure.is_none() {
            None
        } else {
            previous_counted_by.as_deref()
        };
        (claim.replica.as_str(), counted_by)
    });

    let conclusive = outcome
        .is_conclusive()
        .then_some(if failed { "failed" } else { "healthy" });
    save_health(
        tx,
        cluster,
        &decision.health,
        next_due,
        now,
        Some(OutcomeColumns {
            outcome,
            conclusive,
            by,
            judged_by,
        }),
    )
    .await?;
    if let Some(duration) = duration.filter(|_| outcome.is_conclusive()) {
        uptime::record_latency(tx, cluster, now, duration).await?;
    }

    Ok(Some(AppliedProbe {
        cluster: record.name,
        decision,
        opened_outage,
        brake: assessment,
        brake_before,
    }))
}

/// The brake's settings in force: the window widened to the fleet's largest interval
/// unless it was set explicitly.
async fn brake_config(tx: &mut Tx, settings: &ApplySettings) -> Result<BrakeConfig, StoreError> {
    Ok(if settings.brake_window_explicit {
        settings.brake
    } else {
        settings.brake.for_fleet(largest_interval_millis(tx).await?)
    })
}

/// One replica's conclusive outcome on a cluster, as [`replica_view`] judges it.
struct Judged<'a> {
    cluster: ClusterId,
    replica: &'a str,
    failed: bool,
    now: Timestamp,
    /// The replica that counted the cluster's last failure, if one is counted.
    previous_counted_by: Option<&'a str>,
    last_counted_failure: Option<Timestamp>,
    /// How long a failure waits for another replica's opinion: an interval and a lease.
    wait_millis: i64,
}

/// How long a replica's heartbeat stays fresh: a replica whose last heartbeat is older is
/// not eligible to confirm a failure.
pub const HEARTBEAT_LIFETIME_MILLIS: i64 = 15_000;

/// Whether the replica that probed is cut off (its own brake: its recent outcomes fail
/// while the other replicas' do not), and whether its failure needs another replica's
/// opinion (docs/rules.md#replicas-second-opinion). Updates the replica's brake.
async fn replica_view(
    tx: &mut Tx,
    judged: &Judged<'_>,
    settings: &ApplySettings,
) -> Result<ReplicaView, StoreError> {
    let safeguards = settings.replicas;
    let group = replica_group(judged.replica);
    // Locked only by a failure, which may engage it; a success only reads it.
    let before = if safeguards.brake {
        group_brake_in_tx(tx, &group, judged.failed).await?.verdict
    } else {
        BrakeVerdict::NEVER_ENGAGED
    };
    let mut view = ReplicaView::default();
    if safeguards.brake && (judged.failed || before.holds()) {
        // The window (read from the fleet's intervals) only when there is something to
        // count: most results are successes of a replica that is not cut off.
        let config = &brake_config(tx, settings).await?;
        let window_start = judged.now.plus_millis(-config.window_millis.max(0));
        // This replica's latest outcomes in the window, and the other replicas' (those
        // whose own brake holds left out).
        let (own, own_failed, others, others_failed): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT \
               COUNT(*) FILTER (WHERE latest_conclusive_by = $2), \
               COUNT(*) FILTER (WHERE latest_conclusive_by = $2 AND latest_conclusive = 'failed'), \
               COUNT(*) FILTER (WHERE latest_conclusive_by <> $2), \
               COUNT(*) FILTER (WHERE latest_conclusive_by <> $2 AND latest_conclusive = 'failed') \
             FROM clusters WHERE ignored = 0 AND id <> $1 AND latest_conclusive_at >= $3 \
             AND latest_conclusive IS NOT NULL AND latest_conclusive_by IS NOT NULL \
             AND ('replica:' || latest_conclusive_by) NOT IN \
               (SELECT group_key FROM brake_state WHERE holding = 1 AND group_key <> $4)",
        )
        .bind(judged.cluster.0)
        .bind(judged.replica)
        .bind(window_start.0)
        .bind(&group)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error("counting the replicas' latest outcomes"))?;
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        let own_assessment = brake::assess(
            count(own).saturating_add(1),
            count(own_failed).saturating_add(u32::from(judged.failed)),
            before,
            config,
            judged.now,
        );
        // Cut off only while the others answer and are not failing as a whole: a fleet
        // that fails everywhere is the fleet brake's to judge.
        let others_fine = others > others_failed
            && !brake::assess(
                count(others),
                count(others_failed),
                BrakeVerdict::NEVER_ENGAGED,
                config,
                judged.now,
            )
            .verdict
            .holds();
        let verdict = match (before.holds(), own_assessment.verdict.holds()) {
            (false, true) if !others_fine => before,
            _ => own_assessment.verdict,
        };
        if verdict.holds() != before.holds() {
            save_group_brake(tx, &group, verdict).await?;
            let kind = if verdict.holds() {
                "replica-cut-off"
            } else {
                "replica-reconnected"
            };
            insert_event(
                tx,
                judged.now,
                None,
                None,
                kind,
                &serde_json::json!({
                    "replica": judged.replica,
                    "considered": own_assessment.considered,
                    "failed": own_assessment.failed,
                }),
                None,
            )
            .await?;
        }
        view.cut_off = verdict.holds();
    }
    if safeguards.second_opinion && judged.failed && !view.cut_off {
        // The replica that counted the last failure, or this one for a first failure: a
        // second opinion is required when another live, uncut replica, on another node
        // when nodes are known, could give it.
        let last = judged.previous_counted_by.unwrap_or(judged.replica);
        // How many replicas could give the second opinion, and whether this replica runs
        // on the node of the one that counted the last failure (then it is no other
        // opinion).
        let (eligible, same_node): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT \
               (SELECT COUNT(*) FROM replicas r WHERE r.id <> $1 \
                 AND r.heartbeat > {now} - $2 \
                 AND NOT EXISTS (SELECT 1 FROM brake_state b \
                   WHERE b.group_key = 'replica:' || r.id AND b.holding = 1) \
                 AND (r.node IS NULL OR r.node IS DISTINCT FROM \
                   (SELECT node FROM replicas WHERE id = $1))), \
               (SELECT COUNT(*) FROM replicas a, replicas b \
                 WHERE a.id = $1 AND b.id = $3 AND a.id <> b.id AND a.node = b.node)",
            now = claims::DB_NOW
        )))
        .bind(last)
        .bind(HEARTBEAT_LIFETIME_MILLIS)
        .bind(judged.replica)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error(
            "counting the replicas that may confirm a failure",
        ))?;
        if eligible > 0 {
            let confirms = same_node == 0
                && judged
                    .previous_counted_by
                    .is_some_and(|previous| previous != judged.replica);
            let waited_out = judged
                .last_counted_failure
                .is_some_and(|at| judged.now.millis_since(at) >= judged.wait_millis);
            view.opinion = SecondOpinion::Required {
                confirms,
                waited_out,
            };
        }
    }
    Ok(view)
}

/// Re-evaluates the fleet's brake with this probe's outcome included. For a failure that
/// continues the cluster's failure streak, `streak` is the streak's previous counted
/// failure: an outcome of another cluster from before it is no evidence that the fleet
/// answers while this cluster fails, so the window starts there at the earliest. (Without
/// it, a healthy outcome taken just before a fleet-wide failure stays in the window until
/// one interval later — the very moment the first clusters confirm their outage.)
async fn evaluate_brake(
    tx: &mut Tx,
    cluster: ClusterId,
    failed: bool,
    now: Timestamp,
    streak: Option<Timestamp>,
    config: &BrakeConfig,
    before: BrakeVerdict,
) -> Result<Option<BrakeAssessment>, StoreError> {
    let window_start = now.plus_millis(-config.window_millis.max(0));
    let window_start = streak.map_or(window_start, |since| {
        Timestamp(window_start.0.max(since.0.min(now.0)))
    });
    // With a ratio of 1 the brake engages only when no cluster answered inside the window:
    // one that did settles that a released brake stays released, found without counting
    // the fleet (while most clusters still answer, among the first rows read). `None`:
    // assessed, unchanged, and the counts not taken.
    if !before.holds() && config.ratio >= 1.0 {
        let answered: i64 = sqlx::query_scalar(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM clusters WHERE ignored = 0 AND id <> $1 \
             AND latest_conclusive_at >= $2 AND latest_conclusive = 'healthy') THEN 1 ELSE 0 END",
        )
        .bind(cluster.0)
        .bind(window_start.0)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error("looking for a cluster that answered"))?;
        if answered != 0 || !failed {
            return Ok(None);
        }
    }
    // Counted by the database: one row comes back however large the fleet, rather than
    // every cluster's outcome for each failure while the brake is being decided.
    // Among replicas, the outcomes of a replica whose own brake holds (it is cut off)
    // are left out: they say nothing about the fleet.
    let without_cut_off = match Backend::of(tx) {
        Backend::Sqlite => "",
        Backend::Postgres => {
            " AND (latest_conclusive_by IS NULL OR ('replica:' || latest_conclusive_by) \
             NOT IN (SELECT group_key FROM brake_state WHERE holding = 1))"
        }
    };
    let (others, others_failed): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN latest_conclusive = 'failed' THEN 1 ELSE 0 END), 0) \
         FROM clusters \
         WHERE ignored = 0 AND id <> $1 AND latest_conclusive_at >= $2 \
         AND latest_conclusive IS NOT NULL{without_cut_off}"
    )))
    .bind(cluster.0)
    .bind(window_start.0)
    .fetch_one(&mut **tx)
    .await
    .map_err(query_error("counting the fleet's latest outcomes"))?;
    // This cluster's outcome, now, in place of its previous one.
    let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    let considered = count(others).saturating_add(1);
    let failed_count = count(others_failed).saturating_add(u32::from(failed));
    Ok(Some(brake::assess(
        considered,
        failed_count,
        before,
        config,
        now,
    )))
}
