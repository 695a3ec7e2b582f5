//! What operators and the platform change through the API: clusters registered, updated
//! and deleted by hand, apps, deployments — each change in one transaction with its
//! history event, which names the caller. Guards (docs/rules.md#deployment-guard) are checked inside the writing
//! transaction.

use std::collections::{BTreeMap, HashMap};

use vigil_decision::{
    AppStatus, ClusterId, ClusterStatus, ConditionType, PolicyOverrides, Timestamp,
};

use super::{
    APP_SELECT, AppRecord, AppRow, Backend, CLUSTER_COLUMNS, ClusterRecord, ClusterRow,
    ClusterSource, EventRecord, Store, StoreError, cluster_id_by_name, commit, guarded_cluster,
    insert_event, not_found, query_error,
};

/// A cluster of a page ([`Store::list_clusters`]).
#[derive(Debug)]
pub enum PageEntry {
    /// The caller holds a current view of it: its row is still at `revision`.
    Known {
        /// Its id.
        id: ClusterId,
        /// Its name.
        name: String,
        /// The revision of its row.
        revision: i64,
    },
    /// Read for this page.
    Read {
        /// The cluster.
        record: Box<ClusterRecord>,
        /// The revision of its row.
        revision: i64,
    },
}

/// A deployment as recorded ([`Store::record_deployment`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeploymentRecord {
    /// Its id, increasing.
    pub id: i64,
    /// The app deployed.
    pub app: String,
    /// The cluster it was deployed on (the app's cluster at the time).
    pub cluster: String,
    /// The version deployed, if the platform gave one.
    pub version: Option<String>,
    /// Who recorded it: the API token's name.
    pub actor: Option<String>,
    /// When it was recorded (milliseconds since the epoch).
    pub at: i64,
}

const DEPLOYMENT_SELECT: &str = "SELECT d.id, a.name AS app, c.name AS cluster, d.version, \
     d.actor, d.created_at AS at FROM deployments d \
     JOIN apps a ON a.id = d.app_id JOIN clusters c ON c.id = d.cluster_id";

/// A cluster row with its revision.
#[derive(sqlx::FromRow)]
struct RevisedRow {
    #[sqlx(flatten)]
    row: ClusterRow,
    revision: i64,
}

/// A cluster registered by hand.
#[derive(Debug, Clone, Default)]
pub struct NewCluster {
    /// Its unique name.
    pub name: String,
    /// The API server address.
    pub endpoint: String,
    /// The reference to its credentials, already checked by the caller.
    pub reference: String,
    /// The plugin chosen for it, if any.
    pub plugin: Option<String>,
    /// Plugin parameters; credential values are references.
    pub parameters: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Policy overrides.
    pub policy: PolicyOverrides,
}

/// A change to a cluster: each `Some` field replaces the stored one.
#[derive(Debug, Clone, Default)]
pub struct ClusterPatch {
    /// New policy overrides.
    pub policy: Option<PolicyOverrides>,
    /// New labels.
    pub labels: Option<BTreeMap<String, String>>,
    /// New plugin parameters.
    pub parameters: Option<BTreeMap<String, String>>,
    /// The plugin: `Some(None)` returns the cluster to routing by priority.
    pub plugin: Option<Option<String>>,
}

/// Which clusters a list returns. Every `Some` field must match.
#[derive(Debug, Clone, Default)]
pub struct ClusterFilter {
    /// The status.
    pub status: Option<ClusterStatus>,
    /// A condition the cluster has.
    pub condition: Option<ConditionType>,
    /// Where it comes from.
    pub source: Option<ClusterSource>,
    /// A label it carries, `(key, value)`.
    pub label: Option<(String, String)>,
    /// The plugin chosen for it.
    pub plugin: Option<String>,
}

fn to_json<T: serde::Serialize>(what: &'static str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        what,
        reason: e.to_string(),
    })
}

impl Store {
    /// Registers a cluster by hand. A discovered cluster that was deleted (and so is
    /// remembered as ignored) is registered again under the same name, now manual.
    pub async fn register(
        &self,
        cluster: &NewCluster,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<ClusterId, StoreError> {
        let policy = to_json("policy", &cluster.policy)?;
        let labels = to_json("labels", &cluster.labels)?;
        let parameters = to_json("plugin parameters", &cluster.parameters)?;
        let mut tx = self.begin_write().await?;
        let existing: Option<(i64, i64)> =
            sqlx::query_as("SELECT id, ignored FROM clusters WHERE name = $1")
                .bind(&cluster.name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error("checking a cluster name"))?;
        let id: i64 = match existing {
            Some((_, 0)) => {
                return Err(StoreError::AlreadyExists {
                    kind: "cluster",
                    name: cluster.name.clone(),
                });
            }
            Some((id, _)) => {
                sqlx::query(
                    "UPDATE clusters SET endpoint = $1, kubeconfig_secret_ref = $2, source = 'manual', \
                     ignored = 0, plugin = $3, plugin_parameters = $4, labels = $5, policy = $6, \
                     next_due = $7, updated_at = $8 WHERE id = $9",
                )
                .bind(&cluster.endpoint)
                .bind(&cluster.reference)
                .bind(&cluster.plugin)
                .bind(&parameters)
                .bind(&labels)
                .bind(&policy)
                .bind(now.0)
                .bind(now.0)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(query_error("registering a cluster again"))?;
                id
            }
            None => sqlx::query_scalar(
                "INSERT INTO clusters (name, endpoint, kubeconfig_secret_ref, source, plugin, \
                 plugin_parameters, labels, policy, next_due, first_seen, updated_at) \
                 VALUES ($1, $2, $3, 'manual', $4, $5, $6, $7, $8, $9, $10) RETURNING id",
            )
            .bind(&cluster.name)
            .bind(&cluster.endpoint)
            .bind(&cluster.reference)
            .bind(&cluster.plugin)
            .bind(&parameters)
            .bind(&labels)
            .bind(&policy)
            .bind(now.0)
            .bind(now.0)
            .bind(now.0)
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error("registering a cluster"))?,
        };
        insert_event(
            &mut tx,
            now,
            Some((id, &cluster.name)),
            None,
            "cluster-registered",
            &serde_json::json!({
                "endpoint": cluster.endpoint,
                "reference": cluster.reference,
                "plugin": cluster.plugin,
            }),
            actor,
        )
        .await?;
        commit(tx, "committing a registration").await?;
        Ok(ClusterId(id))
    }

    /// Changes a cluster's policy, labels, parameters or plugin. The history records
    /// which fields changed, never parameter values (they may be credential references).
    pub async fn update_cluster(
        &self,
        name: &str,
        patch: &ClusterPatch,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<ClusterRecord, StoreError> {
        let mut tx = self.begin_write().await?;
        let id = cluster_id_by_name(&mut tx, name).await?.0;
        let policy = patch
            .policy
            .as_ref()
            .map(|p| to_json("policy", p))
            .transpose()?;
        let labels = patch
            .labels
            .as_ref()
            .map(|l| to_json("labels", l))
            .transpose()?;
        let parameters = patch
            .parameters
            .as_ref()
            .map(|p| to_json("plugin parameters", p))
            .transpose()?;
        // One statement: an absent field keeps its stored value.
        sqlx::query(
            "UPDATE clusters SET policy = COALESCE($1, policy), labels = COALESCE($2, labels), \
             plugin_parameters = COALESCE($3, plugin_parameters), \
             plugin = CASE WHEN $4 THEN $5 ELSE plugin END, updated_at = $6 WHERE id = $7",
        )
        .bind(&policy)
        .bind(&labels)
        .bind(&parameters)
        .bind(patch.plugin.is_some())
        .bind(patch.plugin.clone().flatten())
        .bind(now.0)
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(query_error("updating a cluster"))?;
        let changed: Vec<&str> = [
            ("policy", policy.is_some()),
            ("labels", labels.is_some()),
            ("parameters", parameters.is_some()),
            ("plugin", patch.plugin.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, given)| given.then_some(field))
        .collect();
        insert_event(
            &mut tx,
            now,
            Some((id, name)),
            None,
            "cluster-updated",
            &serde_json::json!({ "changed": changed }),
            actor,
        )
        .await?;
        let sql = format!("SELECT {CLUSTER_COLUMNS} FROM clusters WHERE id = $1");
        let row: ClusterRow = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error("reading a cluster"))?;
        commit(tx, "committing a cluster update").await?;
        row.try_into()
    }

    /// Deletes a cluster, refused while apps remain on it. A discovered cluster is kept
    /// as ignored, so that discovery does not add it back; a manual one is removed with
    /// its outages and deployment records.
    pub async fn delete_cluster(
        &self,
        name: &str,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let row: Option<(i64, String)> =
            sqlx::query_as("SELECT id, source FROM clusters WHERE name = $1 AND ignored = 0")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error("reading a cluster"))?;
        let (id, source) = row.ok_or_else(|| not_found("cluster", name))?;
        let apps: Vec<String> =
            sqlx::query_scalar("SELECT name FROM apps WHERE cluster_id = $1 ORDER BY name")
                .bind(id)
                .fetch_all(&mut *tx)
                .await
                .map_err(query_error("listing a cluster's apps"))?;
        if !apps.is_empty() {
            return Err(StoreError::HasApps {
                cluster: name.to_owned(),
                apps,
            });
        }
        if source == ClusterSource::Discovered.as_str() {
            sqlx::query("UPDATE clusters SET ignored = 1, updated_at = $1 WHERE id = $2")
                .bind(now.0)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(query_error("ignoring a cluster"))?;
        } else {
            for sql in [
                "DELETE FROM deployments WHERE cluster_id = $1",
                "DELETE FROM audits WHERE cluster_id = $1",
                "DELETE FROM outages WHERE cluster_id = $1",
                "DELETE FROM clusters WHERE id = $1",
            ] {
                sqlx::query(sql)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error("deleting a cluster"))?;
            }
        }
        insert_event(
            &mut tx,
            now,
            Some((id, name)),
            None,
            "cluster-deleted",
            &serde_json::json!({ "remembered_as_ignored": source == ClusterSource::Discovered.as_str() }),
            actor,
        )
        .await?;
        commit(tx, "committing a deletion").await?;
        Ok(())
    }

    /// One page of the clusters matching `filter` (ignored ones never), by name, those
    /// after `after`, read in one snapshot. `reuse` is shown each cluster's id and
    /// revision (a revision changes with every write to the row and is never given
    /// twice) and answers which of them the caller already holds a current view of:
    /// those come back as [`PageEntry::Known`], the others with their record.
    pub async fn list_clusters(
        &self,
        filter: &ClusterFilter,
        after: Option<&str>,
        limit: u32,
        reuse: impl FnOnce(&[(ClusterId, i64)]) -> Vec<bool>,
    ) -> Result<Vec<PageEntry>, StoreError> {
        // `name > ?7` only when paging: written as `(?7 IS NULL OR name > ?7)` it keeps
        // SQLite from seeking the name index, and a page deep in the fleet would read
        // every cluster before it (5,000 rows for the middle of 10,000).
        let after_clause = if after.is_some() { "AND name > $7" } else { "" };
        // The page's keys come back as one JSON array, in one row: handing 500 rows over
        // from the database thread one by one cost more than reading them.
        let (keys_json, has_condition, has_label) = match self.backend {
            Backend::Sqlite => (
                "json_group_array(json_array(id, name, revision) ORDER BY name)",
                "EXISTS (SELECT 1 FROM json_each(conditions) \
                 WHERE json_extract(value, '$.type') = $2)",
                "EXISTS (SELECT 1 FROM json_each(labels) WHERE key = $4 AND value = $5)",
            ),
            Backend::Postgres => (
                "COALESCE(json_agg(json_build_array(id, name, revision) ORDER BY name), '[]')::text",
                "EXISTS (SELECT 1 FROM jsonb_array_elements(conditions::jsonb) AS c (value) \
                 WHERE c.value->>'type' = $2)",
                "EXISTS (SELECT 1 FROM jsonb_each_text(labels::jsonb) AS l \
                 WHERE l.key = $4 AND l.value = $5)",
            ),
        };
        let sql = format!(
            "SELECT {keys_json} FROM \
             (SELECT id, name, revision FROM clusters WHERE ignored = 0 \
             AND ($1 IS NULL OR status = $1) \
             AND ($2 IS NULL OR {has_condition}) \
             AND ($3 IS NULL OR source = $3) \
             AND ($4 IS NULL OR {has_label}) \
             AND ($6 IS NULL OR plugin = $6) \
             {after_clause} ORDER BY name LIMIT $8) AS page"
        );
        let (label_key, label_value) = filter
            .label
            .as_ref()
            .map_or((None, None), |(k, v)| (Some(k.as_str()), Some(v.as_str())));
        // A read transaction: the page and the records read for it are one snapshot.
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        let mut tx = self
            .pool
            .begin_with(begin)
            .await
            .map_err(query_error("starting to read a page of clusters"))?;
        let keys: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(filter.status.map(ClusterStatus::as_str))
            .bind(filter.condition.map(ConditionType::as_str))
            .bind(filter.source.map(ClusterSource::as_str))
            .bind(label_key)
            .bind(label_value)
            .bind(filter.plugin.as_deref())
            .bind(after)
            .bind(i64::from(limit))
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error("listing clusters"))?;
        let keys: Vec<(i64, String, i64)> =
            serde_json::from_str(&keys).map_err(|error| StoreError::Corrupt {
                what: "page of cluster keys",
                reason: error.to_string(),
            })?;
        let revisions: Vec<(ClusterId, i64)> = keys
            .iter()
            .map(|(id, _, revision)| (ClusterId(*id), *revision))
            .collect();
        let known = reuse(&revisions);
        let wanted: Vec<i64> = keys
            .iter()
            .zip(known.iter().chain(std::iter::repeat(&false)))
            .filter(|(_, known)| !**known)
            .map(|((id, _, _), _)| *id)
            .collect();
        let mut read: HashMap<i64, RevisedRow> = HashMap::with_capacity(wanted.len());
        if !wanted.is_empty() {
            let ids = format!(
                "[{}]",
                wanted
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let ids_of_json = self.backend.ids_of_json(1);
            let sql = format!(
                "SELECT {CLUSTER_COLUMNS}, revision FROM clusters WHERE id IN ({ids_of_json})"
            );
            let rows: Vec<RevisedRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(ids)
                .fetch_all(&mut *tx)
                .await
                .map_err(query_error("reading clusters"))?;
            read.extend(rows.into_iter().map(|row| (row.row.id, row)));
        }
        tx.commit()
            .await
            .map_err(query_error("ending a read of clusters"))?;
        keys.into_iter()
            .map(|(id, name, revision)| match read.remove(&id) {
                Some(row) => Ok(PageEntry::Read {
                    revision: row.revision,
                    record: Box::new(row.row.try_into()?),
                }),
                None => Ok(PageEntry::Known {
                    id: ClusterId(id),
                    name,
                    revision,
                }),
            })
            .collect()
    }

    /// A page of a cluster's history, newest first, those before event `before`.
    pub async fn cluster_history(
        &self,
        name: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT id FROM clusters WHERE name = $1 AND ignored = 0")
                .bind(name)
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error("reading a cluster"))?;
        exists.ok_or_else(|| not_found("cluster", name))?;
        sqlx::query_as(
            "SELECT id, at, cluster_name, outage_id, kind, detail, actor FROM events \
             WHERE cluster_name = $1 AND ($2 IS NULL OR id < $3) ORDER BY id DESC LIMIT $4",
        )
        .bind(name)
        .bind(before)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading a cluster's history"))
    }

    /// Events after event `after`, in the order their transactions committed, at most
    /// `limit` (the SSE stream; `after` is the id a client last saw, 0 for the start).
    ///
    /// A reader that resumes after the last id it saw must never find, later, an event
    /// before it: on SQLite the one writer commits in id order; on PostgreSQL ids are
    /// handed out at insert and transactions commit in another order, so events are read
    /// in the order of their transactions' commit stamps, then ids, resuming after the
    /// stamp of event `after` (when `after` was pruned meanwhile, after the stamps of the
    /// events before it).
    pub async fn events_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT id, at, cluster_name, outage_id, kind, detail, actor, id AS position \
                 FROM events WHERE id > $1 ORDER BY id LIMIT $2"
            }
            Backend::Postgres => {
                "SELECT id, at, cluster_name, outage_id, kind, detail, actor, \
                 commit_seq AS position FROM events \
                 WHERE commit_seq IS NOT NULL AND (commit_seq, id) > (COALESCE(\
                   (SELECT commit_seq FROM events WHERE id = $1), \
                   (SELECT COALESCE(MAX(commit_seq), 0) FROM events WHERE id < $1)), $1) \
                 ORDER BY commit_seq, id LIMIT $2"
            }
        };
        sqlx::query_as(sql)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("reading events"))
    }

    /// How many clusters known at `since` are still UNKNOWN without a probe since then
    /// (readiness: a status persisted from before counts as known; clusters registered
    /// later do not hold readiness back).
    pub async fn awaiting_first_probe(&self, since: Timestamp) -> Result<i64, StoreError> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM clusters WHERE ignored = 0 AND status = 'UNKNOWN' \
             AND first_seen <= $1 AND (last_probe IS NULL OR last_probe < $1)",
        )
        .bind(since.0)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("counting unprobed clusters"))
    }

    /// Records what happened to the plugins: `plugins-reloaded` (a reload asked through
    /// the API, with what it did and who asked), or a change of a plugin's generations
    /// (`plugin-promoted`, `plugin-refused`, `plugin-probation-passed`,
    /// `plugin-rolled-back`, `plugin-retired`; no actor). An event of the fleet, not of
    /// a cluster: the event stream shows it.
    pub async fn record_plugin_event(
        &self,
        kind: &str,
        detail: &serde_json::Value,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        insert_event(&mut tx, now, None, None, kind, detail, actor).await?;
        commit(tx, "recording a plugin event").await
    }

    /// The id of the newest event, 0 when there is none.
    pub async fn last_event_id(&self) -> Result<i64, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite => "SELECT COALESCE(MAX(id), 0) FROM events",
            // The last in the order streams read (see `events_after`).
            Backend::Postgres => {
                "SELECT COALESCE((SELECT id FROM events WHERE commit_seq IS NOT NULL \
                 ORDER BY commit_seq DESC, id DESC LIMIT 1), 0)"
            }
        };
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("reading the last event"))
    }

    /// The [`EventRecord::position`] of the last event streams can read: it grows with
    /// every commit that writes events, so a poller compares it to wake its streams.
    pub async fn last_event_position(&self) -> Result<i64, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite => "SELECT COALESCE(MAX(id), 0) FROM events",
            Backend::Postgres => "SELECT COALESCE(MAX(commit_seq), 0) FROM events",
        };
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("reading the last event"))
    }

    /// Registers an app on a cluster with `status` (the API registers apps PENDING).
    pub async fn register_app_as(
        &self,
        name: &str,
        cluster: &str,
        status: AppStatus,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<AppRecord, StoreError> {
        let mut tx = self.begin_write().await?;
        let cluster_id = cluster_id_by_name(&mut tx, cluster).await?.0;
        let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM apps WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error("checking an app name"))?;
        if exists.is_some() {
            return Err(StoreError::AlreadyExists {
                kind: "app",
                name: name.to_owned(),
            });
        }
        sqlx::query(
            "INSERT INTO apps (name, cluster_id, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(name)
        .bind(cluster_id)
        .bind(status.as_str())
        .bind(now.0)
        .bind(now.0)
        .execute(&mut *tx)
        .await
        .map_err(query_error("registering an app"))?;
        insert_event(
            &mut tx,
            now,
            Some((cluster_id, cluster)),
            None,
            "app-registered",
            &serde_json::json!({ "app": name }),
            actor,
        )
        .await?;
        let app = app_in(&mut tx, name).await?;
        commit(tx, "committing an app").await?;
        Ok(app)
    }

    /// The platform sets an app's status; this clears its degraded-by marker
    /// (docs/rules.md#marker-cleared).
    pub async fn set_app_status_as(
        &self,
        name: &str,
        status: AppStatus,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<AppRecord, StoreError> {
        let mut tx = self.begin_write().await?;
        let before = app_in(&mut tx, name).await?;
        sqlx::query(
            "UPDATE apps SET status = $1, degraded_by_outage = NULL, updated_at = $2 WHERE id = $3",
        )
        .bind(status.as_str())
        .bind(now.0)
        .bind(before.id.0)
        .execute(&mut *tx)
        .await
        .map_err(query_error("setting an app's status"))?;
        insert_event(
            &mut tx,
            now,
            None,
            None,
            "app-status-set",
            &serde_json::json!({
                "app": name,
                "cluster": before.cluster,
                "from": before.status.as_str(),
                "to": status.as_str(),
                "marker_cleared": before.degraded_by.is_some(),
            }),
            actor,
        )
        .await?;
        let app = app_in(&mut tx, name).await?;
        commit(tx, "committing an app status").await?;
        Ok(app)
    }

    /// Removes an app and its deployment records, with an `app-deleted` event in the
    /// history of the cluster it was on (naming the caller). Allowed whatever that
    /// cluster's status: removing an app deploys nothing there. Once a cluster's apps
    /// are moved or removed, the cluster can be deleted.
    pub async fn delete_app_as(
        &self,
        name: &str,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let app = app_in(&mut tx, name).await?;
        let deployments = sqlx::query("DELETE FROM deployments WHERE app_id = $1")
            .bind(app.id.0)
            .execute(&mut *tx)
            .await
            .map_err(query_error("deleting an app's deployments"))?
            .rows_affected();
        sqlx::query("DELETE FROM apps WHERE id = $1")
            .bind(app.id.0)
            .execute(&mut *tx)
            .await
            .map_err(query_error("deleting an app"))?;
        let cluster_id = cluster_id_by_name(&mut tx, &app.cluster).await?.0;
        insert_event(
            &mut tx,
            now,
            Some((cluster_id, &app.cluster)),
            None,
            "app-deleted",
            &serde_json::json!({
                "app": name,
                "status": app.status.as_str(),
                "deployments": deployments,
            }),
            actor,
        )
        .await?;
        commit(tx, "committing an app's deletion").await
    }

    /// Moves an app to another cluster, refused while the target is OFFLINE (inside the
    /// transaction, docs/rules.md#deployment-guard); clears the marker.
    pub async fn reassign_app_as(
        &self,
        name: &str,
        cluster: &str,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<AppRecord, StoreError> {
        let mut tx = self.begin_write().await?;
        let before = app_in(&mut tx, name).await?;
        let target = guarded_cluster(&mut tx, cluster).await?;
        sqlx::query(
            "UPDATE apps SET cluster_id = $1, degraded_by_outage = NULL, updated_at = $2 WHERE id = $3",
        )
        .bind(target.0)
        .bind(now.0)
        .bind(before.id.0)
        .execute(&mut *tx)
        .await
        .map_err(query_error("reassigning an app"))?;
        insert_event(
            &mut tx,
            now,
            Some((target.0, cluster)),
            None,
            "app-reassigned",
            &serde_json::json!({ "app": name, "from": before.cluster, "to": cluster }),
            actor,
        )
        .await?;
        let app = app_in(&mut tx, name).await?;
        commit(tx, "committing a reassignment").await?;
        Ok(app)
    }

    /// Records a deployment (see [`Store::record_deployment`]) with its history event,
    /// and returns the app as it now is.
    pub async fn deploy_as(
        &self,
        app: &str,
        version: Option<&str>,
        actor: Option<&str>,
        now: Timestamp,
    ) -> Result<(i64, AppRecord), StoreError> {
        let id = self.record_deployment(app, version, actor, now).await?;
        Ok((id, self.app(app).await?))
    }

    /// One recorded deployment.
    pub async fn deployment(&self, id: i64) -> Result<DeploymentRecord, StoreError> {
        let row: Option<DeploymentRecord> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{DEPLOYMENT_SELECT} WHERE d.id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("reading a deployment"))?;
        row.ok_or_else(|| not_found("deployment", &id.to_string()))
    }

    /// The deployments of an app, newest first: at most `limit`, older than deployment
    /// `before` if given. The app must exist; its deployments on a cluster since deleted
    /// went with that cluster.
    pub async fn deployments_of(
        &self,
        app: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<DeploymentRecord>, StoreError> {
        let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM apps WHERE name = $1")
            .bind(app)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("reading an app"))?;
        let app_id = exists.ok_or_else(|| not_found("app", app))?;
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{DEPLOYMENT_SELECT} WHERE d.app_id = $1 AND ($2 IS NULL OR d.id < $3) \
             ORDER BY d.id DESC LIMIT $4"
        )))
        .bind(app_id)
        .bind(before)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading an app's deployments"))
    }

    /// The apps on a cluster, by name.
    pub async fn apps_on(&self, cluster: &str) -> Result<Vec<AppRecord>, StoreError> {
        let rows: Vec<AppRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{APP_SELECT} WHERE c.name = $1 ORDER BY a.name"
        )))
        .bind(cluster)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("listing a cluster's apps"))?;
        rows.into_iter().map(AppRow::record).collect()
    }
}

async fn app_in(tx: &mut super::Tx, name: &str) -> Result<AppRecord, StoreError> {
    let row: Option<AppRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{APP_SELECT} WHERE a.name = $1"
    )))
    .bind(name)
    .fetch_optional(&mut **tx)
    .await
    .map_err(query_error("reading an app"))?;
    row.ok_or_else(|| not_found("app", name))?.record()
}
