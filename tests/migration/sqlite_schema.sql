-- table checkpoints
CREATE TABLE checkpoints (
    run_id     TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    revision   INTEGER NOT NULL,
    updated_at REAL    NOT NULL,
    PRIMARY KEY (run_id, scope, name)
) WITHOUT ROWID;

-- table events
CREATE TABLE events (
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    at      REAL    NOT NULL,
    type    TEXT    NOT NULL,
    key     TEXT,
    data    BLOB,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- table queue
CREATE TABLE "queue" (
    run_id           TEXT PRIMARY KEY,
    available_at     REAL    NOT NULL,
    wake_seq         INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at REAL,
    crashes          INTEGER NOT NULL DEFAULT 0,
    node_id          TEXT
) WITHOUT ROWID;

-- table runs
CREATE TABLE runs (
    id            TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    status        TEXT NOT NULL,
    input         BLOB NOT NULL,
    result        BLOB,
    error         BLOB,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    finished_at   REAL
, node_id TEXT, version TEXT, attempt INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER, idempotency_key TEXT, waiting_on TEXT, trace_context TEXT);

-- table schema_migrations
CREATE TABLE schema_migrations (
    component  TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL,
    PRIMARY KEY (component, version)
);

-- table steps
CREATE TABLE steps (
    run_id      TEXT    NOT NULL,
    step_key    TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    result      BLOB,
    error       BLOB,
    delivered   INTEGER NOT NULL DEFAULT 0,
    updated_at  REAL    NOT NULL, seq INTEGER, target TEXT,
    PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;

-- table wait_tokens
CREATE TABLE wait_tokens (
    token_digest BLOB PRIMARY KEY,
    wait_id      TEXT NOT NULL
) WITHOUT ROWID;

-- table waits
CREATE TABLE waits (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL,
    wait_key      TEXT NOT NULL,
    kind          TEXT NOT NULL,
    name          TEXT NOT NULL,
    step_key      TEXT NOT NULL DEFAULT '',
    token_digest  BLOB UNIQUE,
    status        TEXT NOT NULL,
    notified      INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    expires_at    REAL,
    resolved_at   REAL,
    payload       BLOB,
    payload_schema BLOB, prompt BLOB, checkpoint BLOB, decision TEXT, decided_by TEXT,
    UNIQUE (run_id, wait_key)
);

-- index queue_local_leases
CREATE INDEX queue_local_leases ON queue (node_id, lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- index queue_ready
CREATE INDEX queue_ready ON queue (node_id, available_at);

-- index runs_by_idempotency_key
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- index runs_by_status
CREATE INDEX runs_by_status ON runs (status, created_at);

-- index runs_finished
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- index runs_remote_by_status
CREATE INDEX runs_remote_by_status ON runs (status, node_id) WHERE node_id IS NOT NULL;

-- index waits_due
CREATE INDEX waits_due ON waits (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;

-- index waits_pending
CREATE INDEX waits_pending ON waits (created_at) WHERE status = 'pending';

-- index waits_pending_by_kind
CREATE INDEX waits_pending_by_kind ON waits (kind, created_at, status) WHERE status = 'pending';

