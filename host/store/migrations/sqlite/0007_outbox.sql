-- Notifications waiting to be sent. The transaction that records a notifiable event
-- (a confirmed transition, a cascade, a recovery, a brake change, a plugin rollback)
-- writes its row here too, so a notification exists exactly when its change committed.
-- Each row's body is fixed when it is written: a delivery repeated after a crash sends the
-- same id and the same body.
CREATE TABLE outbox (
    event_id     INTEGER PRIMARY KEY,
    -- The order of delivery: the event's id (the one writer commits in id order).
    position     INTEGER NOT NULL,
    at           INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    cluster_name TEXT,
    labels       TEXT    NOT NULL DEFAULT '{}',
    payload      TEXT    NOT NULL,
    -- Filled as the transaction commits, from the cluster's row as the change left it.
    reason_class TEXT,
    reason       TEXT,
    sealed       INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX outbox_unsealed ON outbox (event_id) WHERE sealed = 0;

CREATE INDEX outbox_order ON outbox (position, event_id);

-- Where each configured sink stands: the last row it was sent (position, event_id), and
-- the failed attempts at the next one.
CREATE TABLE notify_sinks (
    name            TEXT    PRIMARY KEY,
    position        INTEGER NOT NULL,
    event_id        INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    failing_since   INTEGER,
    last_error      TEXT,
    last_attempt_at INTEGER,
    delivered       INTEGER NOT NULL DEFAULT 0
);
