-- The token a worker registered with (atfg_tokens.id). A worker credential then acts only on
-- the workers it registered itself: claims, heartbeats, releases and leases under another
-- worker's id are refused (docs/operators.md, "Worker scope"). NULL for workers registered
-- before this migration: they keep working until they re-register (a restarted worker does).
ALTER TABLE atfg_workers ADD COLUMN token_id TEXT;
