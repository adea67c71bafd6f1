"""The committed corpus of hostile requests (issue 11, B.5), replayed against a real server on
the suite's backend: every one is answered with its expected 4xx in the one error shape
``{"error": {"code", "message"}}``, none with a 5xx, and the database is the same afterwards
(every row of every table; the audit trail only grows, each row within its documented bounds,
and anonymous callers add at most ANONYMOUS_AUDIT_BYTES a request).

``RELIABILITY_RECORD_CORPUS=1`` writes the answers a server gives back into the corpus instead
of checking them (after ``corpus/generate.py``), for review before committing."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from _hostile import (
    CORPUS,
    MAX_AUDIT_DETAIL,
    MAX_AUDIT_TARGET,
    audit_since,
    error_of,
    last_audit_id,
    load_corpus,
    send,
    tables,
)
from atfg_harness import ServerProcess

#: What the audit trail may grow by for one anonymous request, in bytes (A.3).
ANONYMOUS_AUDIT_BYTES = 1024
#: The corpus's size, at least (issue 11, B.5).
AT_LEAST = 300


@pytest.fixture(scope="module")
def seeded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, str], dict[str, str]]]:
    """A server with one queued traverser, one pending approval on it, one worker and one
    reviewer token; the ids and the tokens of each role."""
    server = ServerProcess(tmp_path_factory.mktemp("hostile-corpus"))
    server.start()
    try:
        with httpx.Client(base_url=server.url, headers=server.headers(), timeout=30) as http:
            trav = http.post("/api/v2/traversers", json={"target": "tester.pausing"}).json()["id"]
            worker = http.post("/api/v2/workers", json={"node_id": "nobody", "version": "1", "capacity": 1})
            approval = http.post(
                "/api/v2/approvals",
                json={"traverser_id": trav, "operation_key": "k0", "prompt": "p", "pause": False},
            )
            minted = http.post("/api/v2/tokens", json={"name": "rita", "role": "reviewer"}).json()
        ids = {
            "t": trav,
            "w": worker.json()["id"],
            "a": approval.json()["approval"]["id"],
            "tok": minted["info"]["id"],
        }
        tokens = {
            "owner": server.token("owner"),
            "worker": server.token("worker"),
            "reviewer": minted["token"],
            "bogus": "atfg_" + "0" * 43,
        }
        yield server, ids, tokens
    finally:
        server.close()


def test_the_corpus_covers_every_route_with_enough_requests() -> None:
    from atfgraph.server._auth import RULES

    entries = load_corpus()
    assert len(entries) >= AT_LEAST, len(entries)
    names = [e["name"] for e in entries]
    assert len(set(names)) == len(names), [n for n, c in Counter(names).items() if c > 1]
    for rule in RULES:
        assert any(rule.template in e["name"] for e in entries), rule.template
    assert all(e["status"] is not None and 400 <= e["status"] < 500 for e in entries)


def test_hostile_requests_are_refused_in_one_shape_and_change_nothing(
    seeded: tuple[ServerProcess, dict[str, str], dict[str, str]],
) -> None:
    server, ids, tokens = seeded
    entries = load_corpus()
    record = os.environ.get("RELIABILITY_RECORD_CORPUS") == "1"
    before, first_audit = tables(server), last_audit_id(server)
    wrong: list[str] = []
    anonymous = 0
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for entry in entries:
            answer = send(http, entry, ids, tokens)
            error = error_of(answer)
            anonymous += entry["role"] in ("anonymous", "bogus")
            got = (answer.status_code, None if error is None else error["code"])
            if record:
                entry["status"], entry["code"] = got
                continue
            if answer.status_code >= 500 or error is None or got != (entry["status"], entry["code"]):
                wrong.append(
                    f"{entry['name']}: {got} not {(entry['status'], entry['code'])}: {answer.text[:200]}"
                )
    if record:  # a request that was not refused is no hostile request: left out
        kept = [e for e in entries if e["status"] >= 400]
        print(f"recorded {len(kept)}; left out:", [e["name"] for e in entries if e["status"] < 400])
        CORPUS.write_text("".join(json.dumps(e, ensure_ascii=True) + "\n" for e in kept))
        return
    assert not wrong, f"{len(wrong)} of {len(entries)}:\n" + "\n".join(wrong[:20])
    assert tables(server) == before  # nothing but audit rows was written
    added = audit_since(server, first_audit)
    for _, _, target, detail in added:
        assert target is None or len(target) <= MAX_AUDIT_TARGET, target[:80]
        assert len(detail) <= MAX_AUDIT_DETAIL, len(detail)
    anonymous_bytes = sum(len(t or "") + len(d) for _, role, t, d in added if role is None)
    assert anonymous_bytes <= anonymous * ANONYMOUS_AUDIT_BYTES, (anonymous_bytes, anonymous)
    assert httpx.get(server.url + "/readyz", timeout=10).status_code == 200
