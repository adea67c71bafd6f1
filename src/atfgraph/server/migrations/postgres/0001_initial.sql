-- atfgraph's durable state on PostgreSQL: the same tables, columns, indexes and meanings as the
-- SQLite migration (see migrations/sqlite/0001_initial.sql for what each holds). Times are
-- seconds since the epoch (double precision); JSON values are UTF-8 bytes (bytea) exactly as
-- serialized. A traverser's row is its lock: every transition locks it (SELECT ... FOR UPDATE)
-- before it reads the state it checks, so servers sharing this database serialize per traverser.

-- status: queued -> running -> waiting -> queued (continuation) -> running -> succeeded | failed
--         queued | running | waiting -> cancelled
CREATE TABLE atfg_traversers (
    id               text PRIMARY KEY,
    target           text    NOT NULL,
    node_id          text    NOT NULL,
    skill            text    NOT NULL,
    version          text,
    status           text    NOT NULL,
    input            bytea   NOT NULL,
    result           bytea,
    error            bytea,
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    epoch            integer NOT NULL DEFAULT 0,
    lease_worker     text,
    lease_expires_at double precision,
    waiting_on       text,
    idempotency_key  text UNIQUE,
    available_at     double precision NOT NULL,
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    finished_at      double precision
);
CREATE INDEX atfg_traversers_ready ON atfg_traversers (node_id, available_at) WHERE status = 'queued';
CREATE INDEX atfg_traversers_leases ON atfg_traversers (lease_expires_at) WHERE status = 'running';
CREATE INDEX atfg_traversers_by_status ON atfg_traversers (status, created_at);

CREATE TABLE atfg_steps (
    traverser_id text    NOT NULL,
    step_key     text    NOT NULL,
    seq          integer NOT NULL,
    target       text    NOT NULL,
    status       text    NOT NULL,
    attempt      integer NOT NULL,
    result       bytea,
    error        bytea,
    created_at   double precision NOT NULL,
    PRIMARY KEY (traverser_id, step_key)
);

CREATE TABLE atfg_checkpoints (
    traverser_id text    NOT NULL,
    name         text    NOT NULL,
    value        bytea   NOT NULL,
    revision     integer NOT NULL,
    updated_at   double precision NOT NULL,
    PRIMARY KEY (traverser_id, name)
);

CREATE TABLE atfg_memory (
    scope      text    NOT NULL,
    key        text    NOT NULL,
    value      bytea   NOT NULL,
    revision   integer NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (scope, key)
);

-- status: pending -> approved | rejected | expired (exactly one transition, by conditional update)
CREATE TABLE atfg_approvals (
    id            text PRIMARY KEY,
    traverser_id  text    NOT NULL,
    operation_key text    NOT NULL,
    prompt        bytea   NOT NULL,
    checkpoint    bytea,
    status        text    NOT NULL,
    decided_by    text,
    response      bytea,
    created_at    double precision NOT NULL,
    expires_at    double precision,
    decided_at    double precision,
    UNIQUE (traverser_id, operation_key)
);
CREATE INDEX atfg_approvals_pending ON atfg_approvals (created_at) WHERE status = 'pending';
CREATE INDEX atfg_approvals_due ON atfg_approvals (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;

CREATE TABLE atfg_workers (
    id            text PRIMARY KEY,
    node_id       text    NOT NULL,
    version       text    NOT NULL,
    capacity      integer NOT NULL,
    stats         bytea,
    registered_at double precision NOT NULL,
    last_seen     double precision NOT NULL
);
