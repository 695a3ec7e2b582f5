-- Notifications waiting to be sent. The transaction that records a notifiable event
-- (a confirmed transition, a cascade, a recovery, a brake change, a plugin rollback)
-- writes its row here too, so a notification exists exactly when its change committed.
-- Each row's body is fixed when it is written: a delivery repeated after a crash sends the
-- same id and the same body.
CREATE TABLE outbox (
    event_id     BIGINT PRIMARY KEY,
    -- The order of delivery: the commit stamp of the row's transaction, as for events
    -- (`commit_seq`), set just before the commit; a row without one is not committed yet.
    position     BIGINT,
    txid         xid8   NOT NULL DEFAULT pg_current_xact_id(),
    at           BIGINT NOT NULL,
    kind         TEXT   NOT NULL,
    cluster_name TEXT,
    labels       TEXT   NOT NULL DEFAULT '{}',
    payload      TEXT   NOT NULL,
    -- Filled as the transaction commits, from the cluster's row as the change left it.
    reason_class TEXT,
    reason       TEXT
);

CREATE INDEX outbox_order ON outbox (position, event_id);
CREATE INDEX outbox_unsequenced ON outbox (txid) WHERE position IS NULL;

-- Where each configured sink stands: the last row it was sent (position, event_id), and
-- the failed attempts at the next one. A replica sends a sink's rows only while it holds
-- the sink's lease (`leases`, named `notify:SINK`), and moves the sink's position only
-- under it.
CREATE TABLE notify_sinks (
    name            TEXT   PRIMARY KEY,
    position        BIGINT NOT NULL,
    event_id        BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    failing_since   BIGINT,
    last_error      TEXT,
    last_attempt_at BIGINT,
    delivered       BIGINT NOT NULL DEFAULT 0
);
