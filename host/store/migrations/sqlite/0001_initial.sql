-- vigil's first schema. Times are integer milliseconds since the Unix epoch.
-- Everything the health rules need survives a restart (docs/rules.md#restart-loses-nothing).

CREATE TABLE clusters (
    id                       INTEGER PRIMARY KEY,
    name                     TEXT    NOT NULL UNIQUE,
    endpoint                 TEXT    NOT NULL DEFAULT '',
    kubeconfig_secret_ref    TEXT    NOT NULL,
    source                   TEXT    NOT NULL CHECK (source IN ('discovered', 'manual')),
    -- A discovered cluster deleted through the API: kept so discovery does not re-add it.
    ignored                  INTEGER NOT NULL DEFAULT 0 CHECK (ignored IN (0, 1)),
    plugin                   TEXT,
    plugin_parameters        TEXT    NOT NULL DEFAULT '{}',
    labels                   TEXT    NOT NULL DEFAULT '{}',
    -- JSON of the policy overrides; absent fields use the global defaults.
    policy                   TEXT    NOT NULL DEFAULT '{}',
    status                   TEXT    NOT NULL DEFAULT 'UNKNOWN'
                                     CHECK (status IN ('ONLINE', 'OFFLINE', 'UNKNOWN')),
    conditions               TEXT    NOT NULL DEFAULT '[]',
    consecutive_failures     INTEGER NOT NULL DEFAULT 0,
    consecutive_successes    INTEGER NOT NULL DEFAULT 0,
    consecutive_inconclusive INTEGER NOT NULL DEFAULT 0,
    last_counted_failure     INTEGER,
    -- The brake's input: the latest conclusive outcome ('healthy' or 'failed') and its time.
    latest_conclusive        TEXT    CHECK (latest_conclusive IN ('healthy', 'failed')),
    latest_conclusive_at     INTEGER,
    next_due                 INTEGER NOT NULL,
    first_seen               INTEGER NOT NULL,
    last_probe               INTEGER,
    last_success             INTEGER,
    last_outcome             TEXT,
    last_reason              TEXT,
    last_reason_class        TEXT,
    open_outage_id           INTEGER,
    updated_at               INTEGER NOT NULL
);

CREATE INDEX clusters_due ON clusters (next_due) WHERE ignored = 0;
CREATE INDEX clusters_latest_conclusive ON clusters (latest_conclusive_at) WHERE ignored = 0;

-- One confirmed ONLINE→OFFLINE episode. Markers on apps point here.
CREATE TABLE outages (
    id         INTEGER PRIMARY KEY,
    cluster_id INTEGER NOT NULL REFERENCES clusters (id),
    opened_at  INTEGER NOT NULL,
    closed_at  INTEGER
);

CREATE INDEX outages_cluster ON outages (cluster_id);

CREATE TABLE apps (
    id                 INTEGER PRIMARY KEY,
    name               TEXT    NOT NULL UNIQUE,
    cluster_id         INTEGER NOT NULL REFERENCES clusters (id),
    status             TEXT    NOT NULL DEFAULT 'PENDING'
                               CHECK (status IN ('PENDING', 'DEPLOYED', 'DEGRADED', 'FAILED')),
    -- Set only by this engine's cascade: the outage that degraded the app
    -- (docs/rules.md#restore-exactly, docs/rules.md#marker-cleared).
    degraded_by_outage INTEGER REFERENCES outages (id),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
);

CREATE INDEX apps_cluster ON apps (cluster_id);

CREATE TABLE deployments (
    id         INTEGER PRIMARY KEY,
    app_id     INTEGER NOT NULL REFERENCES apps (id),
    cluster_id INTEGER NOT NULL REFERENCES clusters (id),
    version    TEXT,
    actor      TEXT,
    created_at INTEGER NOT NULL
);

-- The transition history: health events, cascades, brake changes and API mutations.
CREATE TABLE events (
    id           INTEGER PRIMARY KEY,
    at           INTEGER NOT NULL,
    cluster_id   INTEGER,
    cluster_name TEXT,
    outage_id    INTEGER,
    kind         TEXT    NOT NULL,
    detail       TEXT    NOT NULL DEFAULT '{}',
    actor        TEXT
);

CREATE INDEX events_cluster ON events (cluster_id, id);

-- The mass-failure brake, per group (one group, '', for the whole fleet today).
CREATE TABLE brake_state (
    group_key   TEXT    PRIMARY KEY,
    holding     INTEGER NOT NULL CHECK (holding IN (0, 1)),
    since       INTEGER,
    released_at INTEGER,
    suppressed  INTEGER NOT NULL DEFAULT 0
);
