-- Who may call the graph server, on PostgreSQL: the same tables as identity_migrations/sqlite.
-- Bearer tokens are stored only as SHA-256 digests; the raw token is shown once.

-- role: owner | administrator | reviewer | worker; a credential is live while revoked_at is NULL.
CREATE TABLE atfg_tokens (
    id           text PRIMARY KEY,
    name         text  NOT NULL,
    role         text  NOT NULL,
    digest       bytea NOT NULL,
    created_at   double precision NOT NULL,
    created_by   text,
    last_used_at double precision,
    revoked_at   double precision
);

-- Every decision, every administrative change and every denied attempt: who, when, what.
CREATE TABLE atfg_audit (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        double precision NOT NULL,
    principal text NOT NULL,
    role      text NOT NULL,
    action    text NOT NULL,
    target    text,
    outcome   text NOT NULL,
    detail    bytea
);
CREATE INDEX atfg_audit_by_target ON atfg_audit (target, at);
