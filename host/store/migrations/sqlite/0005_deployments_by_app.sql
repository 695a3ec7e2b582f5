-- An app's deployments, newest first (`GET /api/v1/apps/{name}/deployments`, keyset-paged
-- by id), read through an index instead of a scan of every deployment ever recorded
-- (deployments are never pruned).
CREATE INDEX deployments_app ON deployments (app_id, id);
