-- A notification a sink's receiver refused for good (a 4xx other than 408 and 429) or
-- after too many attempts is passed over so that the ones after it still go out: the
-- sink's position moves past it, and the sink counts it here, with the last one's event
-- and why.
ALTER TABLE notify_sinks ADD COLUMN dead_letters INTEGER NOT NULL DEFAULT 0;
ALTER TABLE notify_sinks ADD COLUMN last_dead_letter_event INTEGER;
ALTER TABLE notify_sinks ADD COLUMN last_dead_letter_error TEXT;
ALTER TABLE notify_sinks ADD COLUMN last_dead_letter_at INTEGER;
