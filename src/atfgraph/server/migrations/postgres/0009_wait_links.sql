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
