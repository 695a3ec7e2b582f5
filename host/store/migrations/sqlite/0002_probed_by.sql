-- Which plugin, and which generation of it, produced a cluster's last outcome
-- (NULL when no plugin answered: not probeable before routing, no plugin loaded).
ALTER TABLE clusters ADD COLUMN last_plugin TEXT;
ALTER TABLE clusters ADD COLUMN last_plugin_generation INTEGER;
