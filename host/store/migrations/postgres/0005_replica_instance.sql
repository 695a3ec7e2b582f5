-- Which process writes a replica's heartbeat: a value each `vigil serve` draws at start.
-- A second process started with the same replica id finds the heartbeat written by
-- another, still alive, and refuses to start rather than share the id's claims and leases.
ALTER TABLE replicas ADD COLUMN instance TEXT;
