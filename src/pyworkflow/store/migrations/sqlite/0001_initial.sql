-- pyworkflow's durable state. Times are seconds since the epoch (REAL); JSON values are stored as
-- UTF-8 bytes exactly as serialized, so they are read back without re-encoding.

-- One execution of a workflow.
-- status: pending -> running -> suspended -> running -> completed | failed | cancelled
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
);
-- Listing by status (the inbox, `ps`-like views), newest last.
CREATE INDEX runs_by_status ON runs (status, created_at);

-- Append-only history of a run, for inspection; replay never reads it.
CREATE TABLE events (
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    at      REAL    NOT NULL,
    type    TEXT    NOT NULL,
    key     TEXT,
    data    BLOB,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- A step's recorded outcome: replayed, never re-executed, once status is 'completed'.
-- status: retrying (failed attempts so far, more allowed) | running (suspended inside) | completed | failed
CREATE TABLE steps (
    run_id      TEXT    NOT NULL,
    step_key    TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    result      BLOB,
    error       BLOB,
    delivered   INTEGER NOT NULL DEFAULT 0,
    updated_at  REAL    NOT NULL,
    PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;

-- Everything a run can wait for: hooks, step hooks, durable sleeps (kind 'timer') and retry
-- back-offs (kind 'retry'). The timers of the engine are the pending rows with an expires_at.
-- status: pending -> received | expired | cancelled (exactly one transition, by conditional update)
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
    payload_schema BLOB,
    UNIQUE (run_id, wait_key)
);
-- The sweeper's work: pending waits by deadline.
CREATE INDEX waits_due ON waits (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
-- The inbox: pending waits, oldest first.
CREATE INDEX waits_pending ON waits (created_at) WHERE status = 'pending';

-- Extra tokens of a wait whose on_created callback had to be delivered again (at-least-once):
-- every token handed out stays valid until the wait leaves 'pending'.
CREATE TABLE wait_tokens (
    token_digest BLOB PRIMARY KEY,
    wait_id      TEXT NOT NULL
) WITHOUT ROWID;

-- JSON state saved inside a step (scope = step key) with a compare-and-set revision.
CREATE TABLE checkpoints (
    run_id     TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    revision   INTEGER NOT NULL,
    updated_at REAL    NOT NULL,
    PRIMARY KEY (run_id, scope, name)
) WITHOUT ROWID;

-- The runtime's work queue: one row per run that needs a turn. wake_seq counts wake-ups, so a
-- decision that arrives during a turn leaves the row in place for another turn; epoch fences the
-- lease (every write of a turn carries it); crashes counts turns whose worker died.
CREATE TABLE queue (
    run_id           TEXT PRIMARY KEY,
    available_at     REAL    NOT NULL,
    wake_seq         INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at REAL,
    crashes          INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX queue_ready ON queue (available_at);
