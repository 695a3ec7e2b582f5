-- The latest drain-readiness audit of each cluster (docs/rules.md#conditions): the findings of the
-- last audit that could read everything, kept when a later one fails; the failure of
-- the last audit that could not; and when the next audit is due.
CREATE TABLE audits (
    cluster_id INTEGER PRIMARY KEY REFERENCES clusters (id),
    -- The last audit that produced findings.
    audited_at INTEGER,
    audit_plugin TEXT,
    audit_plugin_generation INTEGER,
    kinds_read TEXT NOT NULL DEFAULT '[]',
    findings TEXT NOT NULL DEFAULT '[]',
    -- The last audit that could not read what it needed (NULL once one succeeds).
    error_kind TEXT,
    error_message TEXT,
    error_at INTEGER,
    next_audit INTEGER NOT NULL
);
