-- Review console sessions, in the database so that every server sharing it knows them and a
-- restart does not sign reviewers out. The cookie holds a random session id; only its SHA-256
-- digest is stored. A session re-verifies its token (by id) on every request, so revoking the
-- token ends it; one idle for 8 hours is closed.
CREATE TABLE atfg_console_sessions (
    digest     bytea PRIMARY KEY,
    token_id   TEXT NOT NULL,
    csrf       TEXT NOT NULL,
    created_at double precision NOT NULL,
    last_seen  double precision NOT NULL,
    -- messages for the next page (POST-redirect-GET): JSON [[kind, text], ...] or NULL
    flashes    bytea
);
-- Closing idle sessions.
CREATE INDEX atfg_console_sessions_idle ON atfg_console_sessions (last_seen);
