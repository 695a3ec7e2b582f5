-- A revision for every cluster row, that changes with every write to the row and is never
-- given twice, even when SQLite gives a deleted row's id to a new one: a view rendered from
-- a row is current exactly while the row keeps its revision, which is how the API reuses
-- the views of a list page. An update adds one; an insert starts the row in a range of its
-- own, 2^32 revisions wide, drawn from a counter that only grows (rows already stored
-- start at 0, below every range).
ALTER TABLE clusters ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;

CREATE TABLE cluster_revisions (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO cluster_revisions (id, value) VALUES (1, 0);

CREATE TRIGGER clusters_revision_on_insert AFTER INSERT ON clusters
BEGIN
    UPDATE cluster_revisions SET value = value + 1 WHERE id = 1;
    UPDATE clusters SET revision = (SELECT value FROM cluster_revisions WHERE id = 1) << 32
        WHERE id = NEW.id;
END;

-- `WHEN`: the trigger's own update (which changes the revision) does not count again.
CREATE TRIGGER clusters_revision_on_update AFTER UPDATE ON clusters
WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE clusters SET revision = OLD.revision + 1 WHERE id = NEW.id;
END;

-- What a list page reads first, by name: the ids and revisions of its clusters, from the
-- index alone.
CREATE INDEX clusters_page ON clusters (name, revision) WHERE ignored = 0;
