-- What a status page shows: uptime per cluster over long windows, probe latency over
-- time, and when vigil itself was watching. Times are integer milliseconds since the Unix
-- epoch; a day is a UTC day, numbered from the epoch.

-- When an engine was running: a row is opened when its worker starts, its heartbeat moves
-- on every minute, and it is closed at a clean stop. After a crash the row keeps its last
-- heartbeat (the replica's next start closes it there), and the time from it to the
-- next start is time no engine watched. Among replicas (PostgreSQL), each replica has
-- rows of its own, and the fleet was watched while any one was running.
CREATE TABLE engine_coverage (
    id        INTEGER PRIMARY KEY,
    replica   TEXT    NOT NULL DEFAULT '',
    started   INTEGER NOT NULL,
    heartbeat INTEGER NOT NULL,
    stopped   INTEGER
);

-- A cluster's finished UTC days, each split by what vigil knew: milliseconds ONLINE,
-- OFFLINE and UNKNOWN, and with no data (no engine running, the mass-failure brake
-- holding, or the cluster not yet known). Kept far longer than the history they are
-- computed from; written again (never added to) when a day is recomputed.
CREATE TABLE uptime_daily (
    cluster_id INTEGER NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    day        INTEGER NOT NULL,
    online     INTEGER NOT NULL,
    offline    INTEGER NOT NULL,
    unknown    INTEGER NOT NULL,
    no_data    INTEGER NOT NULL,
    PRIMARY KEY (cluster_id, day)
);

CREATE INDEX uptime_daily_day ON uptime_daily (day);

-- The durations of a cluster's conclusive probes, per five-minute bucket (its start):
-- how many, their sum and their maximum, in milliseconds. One upsert per probe, in the
-- probe result's own transaction; buckets older than a week are pruned.
CREATE TABLE probe_latency (
    cluster_id INTEGER NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    bucket     INTEGER NOT NULL,
    probes     INTEGER NOT NULL,
    total_ms   INTEGER NOT NULL,
    max_ms     INTEGER NOT NULL,
    PRIMARY KEY (cluster_id, bucket)
);

CREATE INDEX probe_latency_bucket ON probe_latency (bucket);
