//! Sharing the fleet between replicas on PostgreSQL: claims on clusters, leases on work
//! that is not a probe, and the replicas' heartbeats — all judged on the database's clock.
//!
//! A replica claims due clusters before probing them (`FOR UPDATE SKIP LOCKED`: two
//! replicas never claim the same cluster, and neither waits for the other). Each claim
//! bumps the cluster's claim epoch and lasts a lease; the write of the result checks that
//! the claim is still the replica's, under the same epoch, and ends it. A result whose
//! claim lapsed (its replica paused, or cut off from the database, past the lease) and was
//! taken by another replica changes nothing ([`StoreError::StaleClaim`]). A replica that
//! dies loses its claims when their leases end; one that stops releases them at once.
//! Nothing here uses session-level advisory locks: they break behind a transaction-mode
//! pooler and vanish silently with a dropped connection.

use std::time::Duration;

use vigil_decision::ClusterId;

use super::{Backend, CLUSTER_COLUMNS, ClusterRecord, ClusterRow, Store, StoreError, query_error};

/// The database's clock in milliseconds since the Unix epoch (PostgreSQL): the time at the
/// moment the statement reads it, not when its transaction began.
pub(crate) const DB_NOW: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";

/// A replica's claim on a cluster, carried by the result of the probe made under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The replica that holds it.
    pub replica: String,
    /// The claim's epoch: the cluster's count of claims when it was taken.
    pub epoch: i64,
    /// The shortest lease of the replica's claims, in milliseconds: how long, beyond an
    /// interval, a failure waits for another replica's opinion.
    pub lease_millis: i64,
}

/// A cluster claimed for a probe.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The cluster, as it stood when claimed.
    pub record: ClusterRecord,
    /// The claim its result must carry.
    pub claim: Claim,
}

#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    row: ClusterRow,
    claim_epoch: i64,
}

/// How long a claim lasts, beyond the cluster's own probe timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The shortest lease.
    pub minimum: Duration,
    /// Added to a cluster's probe timeout (its policy's, when it has one): the grace a
    /// plugin has past its deadline, and the time to write the result.
    pub margin: Duration,
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn unsupported(what: &'static str) -> StoreError {
    StoreError::Unsupported {
        what,
        backend: Backend::Sqlite.as_str(),
    }
}

impl Store {
    /// Claims up to `limit` clusters due now for `replica`, most overdue first, other than
    /// `excluded` and other than those another replica holds, nor, for one lease, those
    /// whose last counted failure is this replica's while another eligible replica lives
    /// (the second opinion must come from another). Each claim lasts the lease:
    /// at least `lease.minimum`, and the cluster's probe timeout plus `lease.margin`.
    pub async fn claim_due(
        &self,
        replica: &str,
        excluded: &[i64],
        limit: usize,
        lease: Lease,
        default_timeout: Duration,
    ) -> Result<Vec<Claimed>, StoreError> {
        if self.backend != Backend::Postgres {
            return Err(unsupported("claims"));
        }
        let excluded = serde_json::to_string(excluded).unwrap_or_else(|_| "[]".to_owned());
        let ids = self.backend.ids_of_json(2);
        let sql = format!(
            "UPDATE clusters SET claimed_by = $1, claim_epoch = claim_epoch + 1, \
             claim_expires = {DB_NOW} + GREATEST($3, \
               COALESCE((policy::jsonb->>'timeout_seconds')::bigint * 1000, $4) + $5) \
             WHERE id IN (SELECT id FROM clusters WHERE ignored = 0 AND next_due <= {DB_NOW} \
               AND (claim_expires IS NULL OR claim_expires <= {DB_NOW}) \
               AND NOT COALESCE(last_counted_failure_by = $1 \
                 AND last_counted_failure > {DB_NOW} - $3 \
                 AND EXISTS (SELECT 1 FROM replicas r WHERE r.id <> $1 \
                   AND r.heartbeat > {DB_NOW} - $7 \
                   AND NOT EXISTS (SELECT 1 FROM brake_state b \
                     WHERE b.group_key = 'replica:' || r.id AND b.holding = 1)), FALSE) \
               AND id NOT IN ({ids}) \
               ORDER BY next_due, id LIMIT $6 FOR UPDATE SKIP LOCKED) \
             RETURNING {CLUSTER_COLUMNS}, claim_epoch"
        );
        let rows: Vec<ClaimedRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(replica)
            .bind(excluded)
            .bind(millis(lease.minimum))
            .bind(millis(default_timeout))
            .bind(millis(lease.margin))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(super::HEARTBEAT_LIFETIME_MILLIS)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("claiming due clusters"))?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            claimed.push(Claimed {
                claim: Claim {
                    replica: replica.to_owned(),
                    epoch: row.claim_epoch,
                    lease_millis: millis(lease.minimum),
                },
                record: ClusterRecord::try_from(row.row)?,
            });
        }
        // Most overdue first, as the claim's inner query ordered them.
        claimed.sort_by_key(|c| (c.record.next_due, c.record.id.0));
        Ok(claimed)
    }

    /// Claims one cluster now, due or not (a probe asked for through the API): `None`
    /// when another replica holds it.
    pub async fn claim_now(
        &self,
        replica: &str,
        cluster: ClusterId,
        lease: Lease,
        default_timeout: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        if self.backend != Backend::Postgres {
            return Err(unsupported("claims"));
        }
        let sql = format!(
            "UPDATE clusters SET claimed_by = $1, claim_epoch = claim_epoch + 1, \
             claim_expires = {DB_NOW} + GREATEST($3, \
               COALESCE((policy::jsonb->>'timeout_seconds')::bigint * 1000, $4) + $5) \
             WHERE id = $2 AND (claimed_by IS NULL OR claimed_by = $1 \
               OR claim_expires <= {DB_NOW}) \
             RETURNING claim_epoch"
        );
        let epoch: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(replica)
            .bind(cluster.0)
            .bind(millis(lease.minimum))
            .bind(millis(default_timeout))
            .bind(millis(lease.margin))
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("claiming a cluster"))?;
        Ok(epoch.map(|epoch| Claim {
            replica: replica.to_owned(),
            epoch,
            lease_millis: millis(lease.minimum),
        }))
    }

    /// Ends every claim `replica` holds (it is stopping: the others may take its clusters
    /// at once). Returns how many it held.
    pub async fn release_claims(&self, replica: &str) -> Result<u64, StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(0);
        }
        let done = sqlx::query(
            "UPDATE clusters SET claimed_by = NULL, claim_expires = NULL WHERE claimed_by = $1",
        )
        .bind(replica)
        .execute(&self.pool)
        .await
        .map_err(query_error("releasing claims"))?;
        Ok(done.rows_affected())
    }

    /// Whether `replica` is cut off: its own recent outcomes fail while the other
    /// replicas' do not (its brake holds).
    pub async fn replica_cut_off(&self, replica: &str) -> Result<bool, StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(false);
        }
        let holding: Option<i64> =
            sqlx::query_scalar("SELECT holding FROM brake_state WHERE group_key = $1")
                .bind(super::replica_group(replica))
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error("reading a replica's brake"))?;
        Ok(holding.is_some_and(|holding| holding != 0))
    }

    /// How many claims `replica` holds now.
    pub async fn claims_held(&self, replica: &str) -> Result<u64, StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(0);
        }
        let held: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM clusters WHERE claimed_by = $1 AND claim_expires > {DB_NOW}"
        )))
        .bind(replica)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("counting claims"))?;
        Ok(held.unsigned_abs())
    }

    /// How long until `replica` can claim a cluster other than `excluded` (zero when it
    /// can now), as [`Self::claim_due`] judges it: the cluster's next due time, the end of
    /// another replica's claim on it, and the end of the lease during which a cluster whose
    /// last counted failure is this replica's waits for another replica — whichever is
    /// latest; `None` when there is no cluster.
    pub async fn next_claimable_in(
        &self,
        replica: &str,
        excluded: &[i64],
        lease: Lease,
    ) -> Result<Option<Duration>, StoreError> {
        if self.backend != Backend::Postgres {
            return Err(unsupported("claims"));
        }
        let excluded = serde_json::to_string(excluded).unwrap_or_else(|_| "[]".to_owned());
        let ids = self.backend.ids_of_json(1);
        let wait: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT MIN(GREATEST(next_due, COALESCE(claim_expires, 0), \
               CASE WHEN last_counted_failure_by = $2 AND EXISTS (SELECT 1 FROM replicas r \
                 WHERE r.id <> $2 AND r.heartbeat > {DB_NOW} - $4 \
                 AND NOT EXISTS (SELECT 1 FROM brake_state b \
                   WHERE b.group_key = 'replica:' || r.id AND b.holding = 1)) \
               THEN COALESCE(last_counted_failure, 0) + $3 ELSE 0 END)) - {DB_NOW} \
             FROM clusters WHERE ignored = 0 AND id NOT IN ({ids})"
        )))
        .bind(excluded)
        .bind(replica)
        .bind(millis(lease.minimum))
        .bind(super::HEARTBEAT_LIFETIME_MILLIS)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("finding the next claimable cluster"))?;
        Ok(wait.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    /// Takes, or keeps, the lease on the work called `name` for `holder`, for `ttl`:
    /// `true` while `holder` holds it. Another holder's lease is taken over only once it
    /// has lapsed.
    pub async fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        if self.backend != Backend::Postgres {
            // One engine per SQLite file: it holds every lease.
            return Ok(true);
        }
        let held: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "INSERT INTO leases (name, holder, epoch, expires) VALUES ($1, $2, 1, {DB_NOW} + $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
               epoch = leases.epoch + CASE WHEN leases.holder = excluded.holder THEN 0 ELSE 1 END, \
               expires = excluded.expires \
             WHERE leases.holder = excluded.holder OR leases.expires <= {DB_NOW} \
             RETURNING epoch"
        )))
        .bind(name)
        .bind(holder)
        .bind(millis(ttl))
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("taking a lease"))?;
        Ok(held.is_some())
    }

    /// Gives up the leases `holder` holds.
    pub async fn release_leases(&self, holder: &str) -> Result<(), StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        sqlx::query("DELETE FROM leases WHERE holder = $1")
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(query_error("releasing leases"))?;
        Ok(())
    }

    /// Records that `replica` is alive (on `node`, when known), written by the process
    /// `instance`. Answers `false`, writing nothing, when another process writes this
    /// replica's heartbeat and it is still alive (its heartbeat younger than its
    /// lifetime): two processes share the replica id.
    pub async fn heartbeat(
        &self,
        replica: &str,
        instance: &str,
        node: Option<&str>,
    ) -> Result<bool, StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(true);
        }
        let written = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO replicas (id, node, started, heartbeat, instance) \
             VALUES ($1, $2, {DB_NOW}, {DB_NOW}, $3) \
             ON CONFLICT (id) DO UPDATE SET node = excluded.node, \
               heartbeat = excluded.heartbeat, instance = excluded.instance, \
               started = CASE WHEN replicas.instance = excluded.instance \
                 THEN replicas.started ELSE excluded.started END \
             WHERE replicas.instance IS NULL OR replicas.instance = excluded.instance \
               OR replicas.heartbeat <= {DB_NOW} - $4"
        )))
        .bind(replica)
        .bind(node)
        .bind(instance)
        .bind(super::HEARTBEAT_LIFETIME_MILLIS)
        .execute(&self.pool)
        .await
        .map_err(query_error("recording a heartbeat"))?;
        Ok(written.rows_affected() == 1)
    }

    /// When `replica`'s heartbeat was last written (database clock), if it is known.
    pub async fn replica_heartbeat(&self, replica: &str) -> Result<Option<i64>, StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(None);
        }
        sqlx::query_scalar("SELECT heartbeat FROM replicas WHERE id = $1")
            .bind(replica)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("reading a heartbeat"))
    }

    /// Removes `replica` from the replicas (it is stopping).
    pub async fn leave(&self, replica: &str) -> Result<(), StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        sqlx::query("DELETE FROM replicas WHERE id = $1")
            .bind(replica)
            .execute(&self.pool)
            .await
            .map_err(query_error("leaving the replicas"))?;
        Ok(())
    }

    /// Fleet-wide, the clusters due for longer than `after` and how long the oldest of them
    /// has been due: orphans, when replicas should have probed them.
    pub async fn overdue(&self, after: Duration) -> Result<(u64, Duration), StoreError> {
        let now = match self.backend {
            Backend::Sqlite => {
                "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)".to_owned()
            }
            Backend::Postgres => DB_NOW.to_owned(),
        };
        let (count, oldest): (i64, Option<i64>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*), MIN(next_due) - {now} FROM clusters \
             WHERE ignored = 0 AND next_due < {now} - $1"
        )))
        .bind(millis(after))
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("counting overdue clusters"))?;
        let oldest = Duration::from_millis(oldest.map_or(0, i64::unsigned_abs));
        Ok((count.unsigned_abs(), oldest))
    }
}
