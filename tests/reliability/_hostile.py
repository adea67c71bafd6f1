"""Replaying the hostile corpus (corpus/hostile.jsonl) against a real server, and the "changed
nothing" digest of its database: every row of every table but the audit trail (which a refusal
may add to, within its documented bounds), the notification outbox (filled when a wait is
created, emptied by the server in the background) and the tokens' last-use times."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
from atfg_harness import ServerProcess

CORPUS = Path(__file__).resolve().parent / "corpus" / "hostile.jsonl"
#: The documented bounds of one audit row (docs/operators.md, "Audit"): target characters and
#: detail bytes.
MAX_AUDIT_TARGET = 256
MAX_AUDIT_DETAIL = 16 * 1024


def load_corpus() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def _connect(server: ServerProcess) -> Any:
    if server.on_postgres:
        import psycopg

        return psycopg.connect(server.db, autocommit=True)
    return sqlite3.connect(server.db_path)


def tables(server: ServerProcess) -> dict[str, list[tuple[str, ...]]]:
    conn = _connect(server)
    try:
        if server.on_postgres:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        else:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        rows = {}
        for name in sorted(r[0] for r in conn.execute(sql).fetchall()):
            if name in ("atfg_audit", "sqlite_sequence", "atfg_wait_events"):
                continue  # the trail, its id counter, and the outbox the server drains by itself
            columns = "id, name, role, revoked_at" if name == "atfg_tokens" else "*"
            rows[name] = sorted(tuple(map(repr, r)) for r in conn.execute(f'SELECT {columns} FROM "{name}"'))
        return rows
    finally:
        conn.close()


def audit_since(server: ServerProcess, after: int) -> list[tuple[Any, ...]]:
    """(id, role, target, detail bytes) of the audit rows after id ``after``."""
    conn = _connect(server)
    try:
        sql = f"SELECT id, role, target, detail FROM atfg_audit WHERE id > {int(after)} ORDER BY id"
        return [(r[0], r[1], r[2], bytes(r[3] or b"")) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def last_audit_id(server: ServerProcess) -> int:
    rows = audit_since(server, 0)
    return int(rows[-1][0]) if rows else 0


def fill(text: str, ids: dict[str, str]) -> str:
    for key, value in ids.items():
        text = text.replace("{" + key + "}", value)
    return text


def body_bytes(raw: str | None, ids: dict[str, str]) -> bytes | None:
    if raw is None:
        return None
    text = fill(raw, ids)
    if "<<PAD:" in text:
        head, rest = text.split("<<PAD:", 1)
        size, tail = rest.split(">>", 1)
        text = head + "x" * int(size) + tail
    return text.encode("utf-8", "surrogatepass")


def send(
    http: httpx.Client, entry: dict[str, Any], ids: dict[str, str], tokens: dict[str, str]
) -> httpx.Response:
    headers = dict(entry["headers"])
    if entry["role"] in tokens:
        headers["Authorization"] = f"Bearer {tokens[entry['role']]}"
    raw = {k: v.encode("latin-1") for k, v in headers.items()}  # as sent: bytes, not re-encoded
    return http.request(
        entry["method"], fill(entry["path"], ids), content=body_bytes(entry["body"], ids), headers=raw
    )


def error_of(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's ``{"error": {"code", "message"}}``, or None if it is not exactly that."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return None
    if set(body["error"]) != {"code", "message"}:
        return None
    return dict(body["error"])
