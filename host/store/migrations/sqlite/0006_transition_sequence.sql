-- Every confirmed transition of a cluster has a sequence number of its own, written with
-- its outage, cascade and events in one transaction: an outage carries the number of the
-- transition that opened it, and no two outages of a cluster carry the same one.
ALTER TABLE clusters ADD COLUMN transitions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outages ADD COLUMN transition INTEGER;
CREATE UNIQUE INDEX outages_transition ON outages (cluster_id, transition);
