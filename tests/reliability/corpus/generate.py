"""Write ``hostile.jsonl``, the committed corpus of bad requests (issue 11, B.5):
``python tests/reliability/corpus/generate.py`` (then ``--record`` fills in the answers a real
server gives, for review before committing; see test_hostile_corpus.py).

One JSON object a line: ``name``, ``method``, ``path`` (sent as is, percent-escapes and all),
``role`` (``anonymous``, ``bogus`` (a well-formed token nobody minted), ``worker``, ``reviewer``
or ``owner``), ``headers``, ``body`` (the raw body as text, or null; ``<<PAD:n>>`` stands for n
``x`` characters), ``status`` and ``code`` (the expected answer). In paths and bodies ``{t}`` is
a real queued traverser, ``{a}`` a real pending approval, ``{w}`` a real worker, ``{tok}`` a real
token id; every other id names nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))

from atfgraph.server._auth import RULES  # noqa: E402 - the routes, listed from the app's rules

JSON = {"Content-Type": "application/json"}
UNKNOWN = "nothing-here-0000"
#: Path segments as sent (percent-encoded already).
HOSTILE_SEGMENTS = {
    "double-encoded NUL": "%2500",
    "NUL": "%00",
    "surrogate bytes": "%ED%A0%80",
    "overlong UTF-8 slash": "%C0%AF",
    "lone continuation byte": "%80",
    "encoded slash": "a%2Fb",
    "dot-dot": "%2E%2E",
    "CRLF": "a%0D%0ASet-Cookie:x=1",
    "right-to-left override": "%E2%80%AEevil",
    "SQL quote": "x'%20OR%20'1'='1",
    "300 characters": "y" * 300,
}
#: Raw bodies that are not one JSON object the routes take.
BAD_JSON = {
    "truncated object": '{"a": ',
    "empty body": "",
    "null": "null",
    "array": "[1, 2]",
    "number": "1",
    "string": '"text"',
    "NaN literal": '{"value": NaN}',
    "Infinity literal": '{"value": Infinity}',
    "single quotes": "{'a': 1}",
    "trailing comma": '{"a": 1,}',
    "UTF-8 BOM": '\ufeff{"a": 1}',
    "invalid escape": '{"a": "\\x41"}',
    "lone surrogate escape": '{"a": "\\ud800"}',
    "binary garbage": "\u0000\u0001\u0002\u00ff",
}
#: Routes' bodies: the route's path (ids filled) and the values tried in its fields.
BODY_ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/api/v2/traversers", {"target": "tester.pausing", "input": {}}),
    ("POST", "/api/v2/runs", {"workflow": "flows:sum", "input": {}}),
    ("POST", "/api/v2/traversers/{t}/complete", {"epoch": 99, "result": 1}),
    ("POST", "/api/v2/traversers/{t}/fail", {"epoch": 99, "error": {"code": "c", "message": "m"}}),
    ("POST", "/api/v2/traversers/{t}/release", {"epoch": 99}),
    ("PUT", "/api/v2/traversers/{t}/checkpoints/c", {"epoch": 99, "value": 1}),
    (
        "POST",
        "/api/v2/approvals",
        {"traverser_id": "{t}", "operation_key": "k", "prompt": "p", "pause": False},
    ),
    ("POST", "/api/v2/approvals/{a}/decide", {"decision": "approved"}),
    ("POST", "/api/v2/approvals/{a}/links", {"decision": "approved"}),
    ("POST", "/api/v2/waits/{a}/webhooks", {}),
    ("POST", "/api/v2/workers", {"node_id": "n", "version": "1", "capacity": 1}),
    ("POST", "/api/v2/workers/{w}/claim", {"max": 1}),
    ("POST", "/api/v2/workers/{w}/heartbeat", {"leases": []}),
    ("PUT", "/api/v2/memory/s/k", {"value": 1}),
    ("POST", "/api/v2/hooks/" + UNKNOWN + "/resume", {"payload": 1}),
    ("POST", "/api/v2/tokens", {"name": "n", "role": "reviewer"}),
]
#: Hostile values put in each field of a body (the rest of the body well-formed).
HOSTILE_VALUES: dict[str, Any] = {
    "integer beyond 64 bits": 18446744073709551617,
    "huge integer": 10**40,
    "negative": -1,
    "NUL string": "a\u0000b",
    "10,000 characters": "z" * 10_000,
    "nested 100 deep": json.loads("[" * 100 + "]" * 100),
    "boolean": True,
    "object": {"$ne": None},
}
ROLES = ("anonymous", "bogus", "worker", "reviewer")
#: Fields that take any JSON value: only values no route may store are tried in them.
ANY_JSON = {"prompt", "value", "input", "result", "payload", "response", "checkpoint"}
REFUSED_ANYWHERE = ("integer beyond 64 bits", "huge integer", "nested 100 deep")


def concrete(template: str) -> str:
    """A rule's template with real ids where the corpus has them, else an unknown id."""
    path = template
    for real, key in (("/traversers/{id}", "{t}"), ("/approvals/{id}", "{a}"), ("/workers/{id}", "{w}")):
        path = path.replace(real, real.replace("{id}", key))
    return path.replace("{id}", UNKNOWN)


def entry(
    name: str, method: str, path: str, role: str, body: str | None, headers: Any = None
) -> dict[str, Any]:
    return {
        "name": name,
        "method": method,
        "path": path,
        "role": role,
        "headers": JSON if headers is None and body is not None else (headers or {}),
        "body": body,
        "status": None,
        "code": None,
    }


def good_body(method: str, path: str) -> str | None:
    for m, p, body in BODY_ROUTES:
        if (m, p) == (method, path):
            return json.dumps(body)
    return "{}" if method in ("POST", "PUT") else None


def generate() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    routes = [(r.method, r.template, r) for r in RULES]
    # 1. every route with a role it does not allow, and without a usable credential
    for method, template, rule in routes:
        path = concrete(template)
        for role in ROLES:
            allowed = {p.value for p in rule.allowed}
            if role == "worker" and "work" in allowed:
                continue  # the worker's own protocol: tried by the lease tests
            if role == "reviewer" and allowed & {"read", "decide"}:
                continue
            out.append(entry(f"{role} on {method} {template}", method, path, role, good_body(method, path)))
    # 2. every route with an id, with hostile and unknown ids (an owner: past authorization)
    for method, template, _ in routes:
        if "{id}" not in template:
            continue
        for label, segment in {**HOSTILE_SEGMENTS, "unknown id": UNKNOWN}.items():
            path = template.replace("{id}", segment)
            out.append(
                entry(
                    f"{label} id on {method} {template}", method, path, "owner", good_body(method, template)
                )
            )
    # 3. bad JSON, wrong content types and oversize bodies on every route that reads a body
    for method, path, body in BODY_ROUTES:
        for label, raw in BAD_JSON.items():
            out.append(entry(f"{label} to {method} {path}", method, path, "owner", raw))
        out.append(
            entry(
                f"text/plain to {method} {path}",
                method,
                path,
                "owner",
                json.dumps(body),
                {"Content-Type": "text/plain"},
            )
        )
        out.append(
            entry(
                f"form to {method} {path}",
                method,
                path,
                "owner",
                "a=1&b=2",
                {"Content-Type": "application/x-www-form-urlencoded"},
            )
        )
        out.append(entry(f"1.1 MiB to {method} {path}", method, path, "owner", '{"pad": "<<PAD:1153434>>"}'))
        # 4. hostile values in each field
        for field in body:
            for label, value in HOSTILE_VALUES.items():
                if field in ANY_JSON and label not in REFUSED_ANYWHERE:
                    continue
                bad = {**body, field: value}
                out.append(
                    entry(f"{label} in {field} of {method} {path}", method, path, "owner", json.dumps(bad))
                )
    # 5. query strings of the list and read routes
    queries = {
        "/api/v2/traversers": ["limit=-1", "limit=abc", "limit=" + "9" * 40, "status=%00", "limit=1e3"],
        "/api/v2/approvals": ["status=bogus", "limit=0", "traverser_id=" + "q" * 300, "status=%2500"],
        "/api/v2/runs": ["limit=-5", "status=nope", "cursor=%00%00", "limit=NaN"],
        "/api/v2/audit": ["limit=100000", "after=-1", "after=x"],
        "/api/v2/workers": ["limit=0", "limit=1001"],
        "/api/v2/hooks": ["limit=-1"],
        "/api/v2/inbox": ["limit=abc"],
        "/api/v2/traversers/{t}/checkpoints/c": ["epoch=-1", "epoch=x", "worker_id=" + "w" * 300],
        "/api/v2/memory/s/k": ["epoch=-1", "traverser_id=" + "t" * 300],
    }
    for path, qs in queries.items():
        for q in qs:
            out.append(entry(f"query {q[:40]} on GET {path}", "GET", f"{path}?{q}", "owner", None))
    # 6. routes and methods that do not exist, and a webhook without a good signature
    out += [
        entry("DELETE on the traversers", "DELETE", "/api/v2/traversers", "owner", None),
        entry("PATCH an approval", "PATCH", "/api/v2/approvals/{a}", "owner", "{}"),
        entry("unknown route", "GET", "/api/v2/nothing", "owner", None),
        entry("API v1", "GET", "/api/v1/traversers", "owner", None),
        entry("unsigned webhook", "POST", f"/webhooks/{UNKNOWN}", "anonymous", '{"decision": "approved"}'),
        entry(
            "stale signature",
            "POST",
            f"/webhooks/{UNKNOWN}",
            "anonymous",
            '{"decision": "approved"}',
            {"Content-Type": "application/json", "X-Atfg-Timestamp": "1", "X-Atfg-Signature": "sha256=00"},
        ),
        entry(
            "malformed bearer",
            "GET",
            "/api/v2/traversers",
            "anonymous",
            None,
            {"Authorization": "Bearer \u00e9\u00e9"},
        ),
        entry("basic auth", "GET", "/api/v2/traversers", "anonymous", None, {"Authorization": "Basic YTpi"}),
        entry("empty bearer", "GET", "/api/v2/traversers", "anonymous", None, {"Authorization": "Bearer"}),
    ]
    return out


if __name__ == "__main__":
    entries = generate()
    target = HERE / "hostile.jsonl"
    target.write_text("".join(json.dumps(e, ensure_ascii=True) + "\n" for e in entries))
    print(f"{len(entries)} requests in {target}")
