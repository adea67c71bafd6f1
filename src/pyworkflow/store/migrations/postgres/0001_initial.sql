-- pyworkflow's durable state on PostgreSQL: the same tables, columns and meanings as the SQLite
-- migration. Times are seconds since the epoch (double precision); JSON values are stored as
-- UTF-8 bytes (bytea) exactly as serialized, so they are read back without re-encoding.

-- One execution of a workflow. Its row is the run's lock: every transaction that changes a run
-- locks this row first (SELECT ... FOR UPDATE), so writes to one run never deadlock.
-- status: pending -> running -> suspended -> running -> completed | failed | cancelled
CREATE TABLE runs (
    id            text PRIMARY KEY,
    workflow      text NOT NULL,
    status        text NOT NULL,
    input         bytea NOT NULL,
    result        bytea,
    error         bytea,
    created_at    double precision NOT NULL,
    updated_at    double precision NOT NULL,
    finished_at   double precision
);
-- Listing by status (the inbox, `ps`-like views).
CREATE INDEX runs_by_status ON runs (status, created_at);
-- Listing all runs, newest first.
CREATE INDEX runs_by_created ON runs (created_at);

-- Append-only history of a run, for inspection; replay never reads it.
CREATE TABLE events (
    run_id  text    NOT NULL,
    seq     integer NOT NULL,
    at      double precision NOT NULL,
    type    text    NOT NULL,
    key     text,
    data    bytea,
    PRIMARY KEY (run_id, seq)
);

-- A step's recorded outcome: replayed, never re-executed, once status is 'completed'.
-- status: retrying | running (suspended inside) | completed | failed
CREATE TABLE steps (
    run_id      text    NOT NULL,
    step_key    text    NOT NULL,
    status      text    NOT NULL,
    attempt     integer NOT NULL DEFAULT 0,
    result      bytea,
    error       bytea,
    delivered   integer NOT NULL DEFAULT 0,
    updated_at  double precision NOT NULL,
    PRIMARY KEY (run_id, step_key)
);

-- Everything a run can wait for: hooks, step hooks, durable sleeps (kind 'timer') and retry
-- back-offs (kind 'retry'). The timers of the engine are the pending rows with an expires_at.
-- status: pending -> received | expired | cancelled (exactly one transition, by conditional update)
CREATE TABLE waits (
    id             text PRIMARY KEY,
    run_id         text NOT NULL,
    wait_key       text NOT NULL,
    kind           text NOT NULL,
    name           text NOT NULL,
    step_key       text NOT NULL DEFAULT '',
    token_digest   bytea UNIQUE,
    status         text NOT NULL,
    notified       boolean NOT NULL DEFAULT false,
    created_at     double precision NOT NULL,
    expires_at     double precision,
    resolved_at    double precision,
    payload        bytea,
    payload_schema bytea,
    UNIQUE (run_id, wait_key)
);
-- The sweeper's work: pending waits by deadline.
CREATE INDEX waits_due ON waits (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
-- The inbox: pending waits, oldest first.
CREATE INDEX waits_pending ON waits (created_at) WHERE status = 'pending';

-- Extra tokens of a wait whose on_created callback had to be delivered again (at-least-once):
-- every token handed out stays valid until the wait leaves 'pending'.
CREATE TABLE wait_tokens (
    token_digest bytea PRIMARY KEY,
    wait_id      text NOT NULL
);

-- JSON state saved inside a step (scope = step key) with a compare-and-set revision.
CREATE TABLE checkpoints (
    run_id     text    NOT NULL,
    scope      text    NOT NULL,
    name       text    NOT NULL,
    value      bytea   NOT NULL,
    revision   integer NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (run_id, scope, name)
);

-- The runtime's work queue: one row per run that needs a turn. wake_seq counts wake-ups, so a
-- decision that arrives during a turn leaves the row in place for another turn; epoch fences the
-- lease (every write of a turn carries it); crashes counts turns whose worker died.
CREATE TABLE queue (
    run_id           text PRIMARY KEY,
    available_at     double precision NOT NULL,
    wake_seq         integer NOT NULL DEFAULT 0,
    epoch            integer NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at double precision,
    crashes          integer NOT NULL DEFAULT 0
);
CREATE INDEX queue_ready ON queue (available_at);
-- Heartbeats and dead-owner recovery touch one owner's rows.
CREATE INDEX queue_by_owner ON queue (lease_owner) WHERE lease_owner IS NOT NULL;
