-- Capabilities on one wait (docs/reviewers.md, "Decisions from anywhere"):
--   a decision link (kind 'page'): an unguessable, expiring, single-use URL /d/<secret> that
--     opens a minimal page to approve or reject an approval. Only the SHA-256 digest of the
--     secret is stored; used_at and the decision are written in the transaction of the decision.
--   a webhook (kind 'webhook'): POST /api/v2/webhooks/<id> resumes the wait when the body is
--     signed with HMAC-SHA256; the signing secret is derived from the server's key and the
--     webhook's id (atfg_server_keys), so no secret is stored per webhook.
-- Either one is revocable (revoked_at).
CREATE TABLE atfg_wait_links (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    wait_id     TEXT NOT NULL,
    digest      bytea,
    label       TEXT,
    created_at  double precision NOT NULL,
    created_by  TEXT NOT NULL,
    expires_at  double precision NOT NULL,
    used_at     double precision,
    decision    TEXT,
    revoked_at  double precision
);
-- The links of one wait (GET /api/v2/approvals/{id}/links).
CREATE INDEX atfg_wait_links_by_wait ON atfg_wait_links (wait_id, created_at);
-- The server's signing keys: random bytes made on first use, shared by every server on the
-- database (a webhook minted on one is verified on another).
CREATE TABLE atfg_server_keys (
    name   TEXT PRIMARY KEY,
    secret bytea NOT NULL
);

-- Notifications (docs/operators.md, "Notifications"): a wait a person answers (an approval, a
-- hook, a step hook) is announced to the server's configured endpoints. The trigger writes the
-- outbox row in the transaction that creates the wait, whoever creates it (the graph store's
-- functions, or pyworkflow's store for a run on this database), so no wait is announced that did
-- not commit and none is missed. The server's notifier expands each outbox row into one delivery
-- per endpoint (deleting it), then posts them after the commit, never in the run's path.
CREATE TABLE atfg_wait_events (
    seq        bigserial PRIMARY KEY,
    wait_id    TEXT NOT NULL,
    created_at double precision NOT NULL
);
CREATE FUNCTION atfg_wait_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO atfg_wait_events (wait_id, created_at) VALUES (NEW.id, NEW.created_at);
    RETURN NULL;
END;
$$;
CREATE TRIGGER atfg_wait_created AFTER INSERT ON waits
FOR EACH ROW WHEN (NEW.kind IN ('approval', 'hook', 'step_hook'))
EXECUTE FUNCTION atfg_wait_created();
-- One delivery of one event to one endpoint: pending (due at next_at) -> delivered | dead (after
-- the last attempt: the dead-letter list). attempts and last_error record every failure.
CREATE TABLE atfg_deliveries (
    id           TEXT PRIMARY KEY,
    wait_id      TEXT NOT NULL,
    endpoint     TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL,
    next_at      double precision NOT NULL,
    last_error   TEXT,
    created_at   double precision NOT NULL,
    delivered_at double precision
);
-- The notifier's walk: due pending deliveries, by time.
CREATE INDEX atfg_deliveries_due ON atfg_deliveries (next_at) WHERE status = 'pending';
-- The dead-letter list and the other statuses, newest first.
CREATE INDEX atfg_deliveries_by_status ON atfg_deliveries (status, created_at);

-- Reviewer policies (docs/reviewers.md, "Assigned approvals"): an approval assigned to roles or
-- named principals may be decided only by them; with an escalation, one that falls due is
-- re-assigned (once) with a new deadline instead of expiring. Written in the transaction that
-- creates the approval. roles, principals and escalate are JSON.
CREATE TABLE atfg_assignments (
    wait_id     TEXT PRIMARY KEY,
    roles       TEXT NOT NULL,
    principals  TEXT NOT NULL,
    escalate    TEXT,
    escalations INTEGER NOT NULL DEFAULT 0
);
-- The sweeper's escalations: assignments that still have one.
CREATE INDEX atfg_assignments_escalating ON atfg_assignments (wait_id) WHERE escalate IS NOT NULL;
