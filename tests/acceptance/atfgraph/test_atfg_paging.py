"""Cursor pagination on a live server: every list route pages with ``limit`` and ``after`` and
says ``next_cursor`` (null on the last page); walking the pages gives every item once, in order,
with nothing cut off; filters narrow the list; a bad cursor, or one of another list, is a 422
that changes nothing; and the CLI's ``--limit``/``--after``/``--all`` walk the same pages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from atfg_harness import ServerProcess


def _walk(server: ServerProcess, path: str, limit: int, **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every item of a list, a page of ``limit`` at a time; and the number of pages."""
    items: list[dict[str, Any]] = []
    after: str | None = None
    pages = 0
    while True:
        query = {**params, "limit": limit, **({"after": after} if after else {})}
        answer = server.get(path, **query)
        pages += 1
        assert len(answer["items"]) <= limit
        items += answer["items"]
        after = answer["next_cursor"]
        if after is None:
            return items, pages


def _atfg(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    atfg = str(Path(sys.executable).parent / "atfg")
    return subprocess.run([atfg, *args], env=server.env, capture_output=True, text=True, timeout=60)


def test_every_list_pages_without_losing_or_repeating_an_item(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=30) as http:
        _check_pages(server, http)


def _check_pages(server: ServerProcess, http: httpx.Client) -> None:
    for i in range(7):
        assert http.post("/tokens", json={"name": f"reader-{i}", "role": "reviewer"}).status_code == 201
    for _ in range(5):
        assert (
            http.post("/workers", json={"node_id": "pager", "version": "1", "capacity": 1}).status_code == 201
        )
    submitted = [http.post("/traversers", json={"target": f"pager.s{i % 2}"}).json()["id"] for i in range(11)]

    tokens, pages = _walk(server, "/tokens", 3)
    assert (len(tokens), pages) == (9, 3)  # 7 and the owner's and worker's of the first start
    assert len({t["id"] for t in tokens}) == 9
    assert [t["created_at"] for t in tokens] == sorted(t["created_at"] for t in tokens)

    audit, _ = _walk(server, "/audit", 4)
    assert [e["id"] for e in audit] == sorted((e["id"] for e in audit), reverse=True)
    assert [e["id"] for e in audit] == [e["id"] for e in server.get("/audit", limit=1000)["items"]]
    created = _walk(server, "/audit", 2, action="token.create")[0]
    assert len(created) == 7 and all(e["action"] == "token.create" for e in created)

    workers, _ = _walk(server, "/workers", 2)
    assert len(workers) == 5

    runs, pages = _walk(server, "/runs", 4, kind="traverser")
    assert sorted(r["id"] for r in runs) == sorted(submitted) and pages == 3
    assert [r["created_at"] for r in runs] == sorted((r["created_at"] for r in runs), reverse=True)
    queued, _ = _walk(server, "/traversers", 5, status="queued")
    assert [t["id"] for t in queued] == [r["id"] for r in runs]
    # Filters: target, several statuses, an id prefix, a time range.
    s0 = _walk(server, "/runs", 2, target="pager.s0")[0]
    assert sorted(r["id"] for r in s0) == sorted(submitted[0::2])
    assert len(_walk(server, "/runs", 3, status=["queued", "failed"])[0]) == 11
    assert [r["id"] for r in server.get("/runs", id_prefix=submitted[3][:12])["items"]] == [submitted[3]]
    middle = runs[5]["created_at"]
    newer = _walk(server, "/runs", 2, created_after=middle)[0]
    assert [r["id"] for r in newer] == [r["id"] for r in runs[:6]]

    # Empty lists are one page; the inbox, hooks, approvals and deliveries page the same way.
    for path in ("/inbox", "/hooks", "/approvals", "/notifications"):
        assert server.get(path, limit=1) == {"items": [], "next_cursor": None}

    # A cursor is for its own list; garbage or another list's cursor is refused.
    cursor = server.get("/runs", limit=1)["next_cursor"]
    for path, after in (("/tokens", cursor), ("/runs", "not-a-cursor"), ("/runs", "e30")):
        refused = http.get(path, params={"after": after})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] in ("invalid_cursor", "validation_error")
    assert http.get("/runs", params={"limit": 1001}).status_code == 422

    # The CLI walks the same pages, and says when more remain (on stderr).
    first = _atfg(server, "runs", "list", "--kind", "traverser", "--limit", "4", "-o", "jsonl")
    assert first.returncode == 0, first.stderr
    assert [json.loads(line)["id"] for line in first.stdout.splitlines()] == [r["id"] for r in runs[:4]]
    assert "--after " in first.stderr
    after = first.stderr.split("--after ")[1].split()[0]
    second = _atfg(
        server, "runs", "list", "--kind", "traverser", "--limit", "4", "--after", after, "-o", "jsonl"
    )
    assert [json.loads(line)["id"] for line in second.stdout.splitlines()] == [r["id"] for r in runs[4:8]]
    every = _atfg(server, "runs", "list", "--kind", "traverser", "--limit", "3", "--all", "-o", "json")
    assert [r["id"] for r in json.loads(every.stdout)] == [r["id"] for r in runs]
    assert every.stderr == ""
    listed = _atfg(server, "tokens", "list", "--all", "--limit", "2", "-o", "json")
    assert len(json.loads(listed.stdout)) == 9
    audited = _atfg(server, "audit", "list", "--action", "token.create", "--limit", "5", "-o", "json")
    assert len(json.loads(audited.stdout)) == 5 and "--after" in audited.stderr
