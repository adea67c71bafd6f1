-- atfgraph's durable state. Every table is prefixed atfg_ because the same database file also
-- holds pyworkflow's tables. Times are seconds since the epoch (REAL); JSON values are stored as
-- UTF-8 bytes exactly as serialized, so they are sent back without re-encoding.

-- One execution of a skill (a traversal). The node version is pinned by the first claim so that
-- continuations run on workers serving the same (node id, version).
-- status: queued -> running -> waiting -> queued (continuation) -> running -> succeeded | failed
--         queued | running | waiting -> cancelled
CREATE TABLE atfg_traversers (
    id               TEXT PRIMARY KEY,
    target           TEXT    NOT NULL,
    node_id          TEXT    NOT NULL,
    skill            TEXT    NOT NULL,
    version          TEXT,
    status           TEXT    NOT NULL,
    input            BLOB    NOT NULL,
    result           BLOB,
    error            BLOB,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_worker     TEXT,
    lease_expires_at REAL,
    waiting_on       TEXT,
    -- A caller-chosen key that makes submission idempotent (a child step uses parent + step key).
    idempotency_key  TEXT UNIQUE,
    available_at     REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    finished_at      REAL
);
-- Claims: queued traversers of one node, oldest first.
CREATE INDEX atfg_traversers_ready ON atfg_traversers (node_id, available_at) WHERE status = 'queued';
-- The reaper: running traversers by lease deadline.
CREATE INDEX atfg_traversers_leases ON atfg_traversers (lease_expires_at) WHERE status = 'running';
-- Listing (`ps`-like views) by status, newest last.
CREATE INDEX atfg_traversers_by_status ON atfg_traversers (status, created_at);

-- A child step recorded in a traverser's path; a completed step is replayed, never re-run.
-- status: succeeded | failed
CREATE TABLE atfg_steps (
    traverser_id TEXT    NOT NULL,
    step_key     TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    target       TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    result       BLOB,
    error        BLOB,
    created_at   REAL    NOT NULL,
    PRIMARY KEY (traverser_id, step_key)
) WITHOUT ROWID;

-- JSON state saved by a handler on its traverser, with a compare-and-set revision.
CREATE TABLE atfg_checkpoints (
    traverser_id TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    value        BLOB    NOT NULL,
    revision     INTEGER NOT NULL,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (traverser_id, name)
) WITHOUT ROWID;

-- Scoped memory: longer-lived JSON shared between traversers, same revision rules as checkpoints.
CREATE TABLE atfg_memory (
    scope      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    revision   INTEGER NOT NULL,
    updated_at REAL    NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;

-- A request for a human decision; identity is (traverser_id, operation_key).
-- status: pending -> approved | rejected | expired (exactly one transition, by conditional update)
CREATE TABLE atfg_approvals (
    id            TEXT PRIMARY KEY,
    traverser_id  TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    prompt        BLOB    NOT NULL,
    checkpoint    BLOB,
    status        TEXT    NOT NULL,
    decided_by    TEXT,
    response      BLOB,
    created_at    REAL    NOT NULL,
    expires_at    REAL,
    decided_at    REAL,
    UNIQUE (traverser_id, operation_key)
);
-- The inbox: pending approvals, oldest first.
CREATE INDEX atfg_approvals_pending ON atfg_approvals (created_at) WHERE status = 'pending';
-- The sweeper: pending approvals by deadline.
CREATE INDEX atfg_approvals_due ON atfg_approvals (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;

-- A registered worker process and what it last reported (permits in use, counters).
CREATE TABLE atfg_workers (
    id            TEXT PRIMARY KEY,
    node_id       TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    capacity      INTEGER NOT NULL,
    stats         BLOB,
    registered_at REAL    NOT NULL,
    last_seen     REAL    NOT NULL
);
