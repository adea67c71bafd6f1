"""The OpenAPI document is true of a live server: Schemathesis (4.x) with every check
(not_a_server_error, status/content-type/header/schema conformance, positive and negative data,
unsupported methods and Allow, auth that is not ignored, use after free, ...) against the document
the server serves, authorized with an owner token so that every operation runs past
authentication; and the models of _schemas validate real answers of a worked cycle.

Settings: ``--checks all --max-examples 5 --seed 1 --workers 1`` over the phases examples,
coverage, fuzzing and stateful; long polls shortened to 0.2 s (schemathesis/st_hooks.py); the
exceptions the document cannot state are in schemathesis/schemathesis.toml. The heartbeat runs on its
own without negative_data_rejection (see below). Revoking a token is run on its own without the
stateful phase (which would find and revoke the owner token the run
authenticates with). The whole takes about a minute per backend."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import only_approval, reach
from pydantic import BaseModel

from atfgraph import Client
from atfgraph.server import _schemas as S
from atfgraph.server._stamps import iso

HERE = Path(__file__).parent / "schemathesis"
_BASE = ["--checks", "all", "--max-examples", "5", "--seed", "1", "--workers", "1", "--no-color"]
_REVOKE = "revoke_token_api_v2_tokens__token_id__revoke_post"
_HEARTBEAT = "heartbeat_api_v2_workers__worker_id__heartbeat_post"


def _schemathesis(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.fail("schemathesis is missing: make install (the dev extra)", pytrace=False)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "st_hooks", "PYTHONPATH": str(HERE)}
    return subprocess.run(
        [
            binary,
            "--config-file",
            str(HERE / "schemathesis.toml"),
            "run",
            f"{server.url}/api/v2/openapi.json",
            *_BASE,
            "--header",
            f"Authorization: Bearer {server.token()}",
            "--report-dir",
            str(server.home / "schemathesis"),
            *args,
        ],
        cwd=server.home,  # its cache (.schemathesis/) stays out of the repository
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_schemathesis_finds_nothing_against_the_live_document(server: ServerProcess) -> None:
    run = _schemathesis(server, "--exclude-operation-id", _REVOKE, "--exclude-operation-id", _HEARTBEAT)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-3000:]
    # Schemathesis' negative cases for a value that may be any JSON (an anyOf of every JSON type)
    # mutate it into another JSON type and call that invalid, though another alternative accepts
    # it ("was null, became number"); the heartbeat's body is nearly all such values (stats,
    # extras). It runs with every other check; its refusals are in test_atfg_bad_input.py.
    beat = _schemathesis(
        server, "--include-operation-id", _HEARTBEAT, "--exclude-checks", "negative_data_rejection"
    )
    assert beat.returncode == 0, beat.stdout[-20000:] + beat.stderr[-3000:]
    assert "42 selected" in run.stdout or "selected" in run.stdout
    revoke = _schemathesis(server, "--include-operation-id", _REVOKE, "--phases", "examples,coverage,fuzzing")
    assert revoke.returncode == 0, revoke.stdout[-20000:] + revoke.stderr[-3000:]
    # The owner token survived both runs, and the server never failed a request.
    assert httpx.get(server.url + "/api/v2/stats", headers=server.headers(), timeout=10).status_code == 200
    assert "unhandled error" not in server.log.read_text()


def _check(model: type[BaseModel], answer: Any) -> None:
    """``answer`` matches the model its route declares, and each timestamp's ISO twin agrees."""
    model.model_validate(answer, strict=False)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key.endswith("_iso") and key[: -len("_iso")] in value:
                    assert item == iso(value[key[: -len("_iso")]]), (key, value)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(answer)


async def test_real_answers_match_their_models(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"key": "contract"})
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)
    get = server.get
    _check(S.Traverser, get(f"/traversers/{handle.id}"))
    _check(S.TraverserList, get("/traversers", status="waiting"))
    _check(S.ApprovalList, get("/approvals"))
    _check(S.Approval, get(f"/approvals/{approval['id']}"))
    _check(S.Inbox, get("/inbox"))
    _check(S.RunList, get("/runs"))
    _check(S.RunRecord, get(f"/runs/{handle.id}"))
    _check(S.WorkerList, get("/workers"))
    _check(S.TokenList, get("/tokens"))
    _check(S.Stats, get("/stats"))
    decided = await client.decide_approval(str(approval["id"]), "approved", {"note": "ok"})
    _check(S.Approval, decided)
    await reach(client, handle.id, "succeeded")
    _check(S.TraverserPath, get(f"/traversers/{handle.id}/path"))
    _check(S.AuditList, get("/audit"))
    _check(S.RunRecord, get(f"/runs/{handle.id}"))
    assert get(f"/traversers/{handle.id}")["finished_at_iso"].endswith("Z")
