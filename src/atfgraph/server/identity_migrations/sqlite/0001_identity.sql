-- Who may call the graph server. Bearer tokens are stored only as SHA-256 digests; the raw token
-- is shown once, when it is created. Its own version track (component atfgraph_identity).

-- role: owner | administrator | reviewer | worker
-- A credential is live while revoked_at is NULL.
CREATE TABLE atfg_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    role        TEXT NOT NULL,
    digest      BLOB NOT NULL,
    created_at  REAL NOT NULL,
    created_by  TEXT,
    last_used_at REAL,
    revoked_at  REAL
);

-- Every decision, every administrative change and every denied attempt: who, when, what.
CREATE TABLE atfg_audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          REAL NOT NULL,
    principal   TEXT NOT NULL,
    role        TEXT NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT,
    outcome     TEXT NOT NULL,
    detail      BLOB
);
CREATE INDEX atfg_audit_by_target ON atfg_audit (target, at);
