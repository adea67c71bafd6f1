"""Crash recovery with real processes (issue 2, semantics 10).

A process starts a run of a review workflow shaped like the spec's ``review_step`` and dies at a
named point: at a crash point of ``pyworkflow._crashpoints`` (``PYWORKFLOW_CRASH_AT``, which
``os._exit(137)``s like SIGKILL), or by an external SIGKILL while suspended, inside
``expensive_setup`` and during a durable ``sleep()``. A second process then runs
``await pyworkflow.serve()`` on the same SQLite file; where the run waits for a reviewer, a third
process resumes it with the token ``on_created`` wrote to a file. Afterwards the database is
inspected with ``sqlite3``: the run completed with the payload in its result, every step completed
exactly once, ``expensive_setup`` ran once (twice only when the crash came before the checkpoint
was saved), the checkpoint is gone and ``PRAGMA integrity_check`` is ``ok``.

Calls are counted across processes through marker files (one line per call, fsynced).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyworkflow._crashpoints import POINTS

DRAFT = "Durable review of a draft"
STEP_KEYS = {"prepare#1", "review_step#1", "publish_step#1"}

WORKFLOW_MODULE = '''
"""The workflow of the crash-recovery tests: the spec's review_step between two plain steps."""

from __future__ import annotations

import asyncio
import os

import pyworkflow
from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    delete_step_checkpoint,
    load_step_checkpoint,
    save_step_checkpoint,
    step,
    step_hook,
    workflow,
)

MARKS = os.environ["CRASH_MARKS"]


def mark(name: str, line: str) -> None:
    """Append one line to a marker file, durably, so calls are counted across processes."""
    with open(os.path.join(MARKS, name), "a", encoding="utf-8") as f:
        f.write(line + "\\n")
        f.flush()
        os.fsync(f.fileno())


@step
async def prepare(draft: str) -> dict:
    mark("prepare", str(os.getpid()))
    return {"draft": draft, "words": len(draft.split())}


async def expensive_setup(prepared: dict) -> dict:
    mark("setup", str(os.getpid()))
    hang = float(os.environ.get("CRASH_SETUP_HANG", "0"))
    if hang:  # the test kills the process here, before the checkpoint is saved
        await asyncio.sleep(hang)
    return {"draft": prepared["draft"], "words": prepared["words"], "score": 42}


@step
async def review_step(prepared: dict) -> dict:
    mark("review", str(os.getpid()))
    checkpoint = await load_step_checkpoint()
    if checkpoint is None:
        state = await expensive_setup(prepared)
        await save_step_checkpoint({"state": state})
    else:
        state = checkpoint["state"]

    async def notify(token: str) -> None:
        mark("tokens", token)

    feedback = await step_hook("human_review", timeout="24h", on_created=notify, on_timeout="return")
    if feedback is STEP_HOOK_TIMEOUT:
        return {**state, "approved": None, "note": "timed out"}
    result = {**state, "approved": feedback["approved"], "note": feedback["note"]}
    await delete_step_checkpoint()
    return result


@step
async def publish_step(reviewed: dict) -> dict:
    mark("publish", str(os.getpid()))
    return {**reviewed, "published": True}


@workflow
async def publish(draft: str, nap: float = 0) -> dict:
    prepared = await prepare(draft)
    if nap:
        await pyworkflow.sleep(nap)
    reviewed = await review_step(prepared)
    return await publish_step(reviewed)
'''

DRIVER = '''
"""start | serve | resume, each in its own process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import crash_workflows as wf

import pyworkflow


def last_token() -> str:
    return Path(wf.MARKS, "tokens").read_text().split()[-1]


async def start(db: str, draft: str, nap: float, resume_with: str | None) -> None:
    pyworkflow.configure(storage=f"sqlite:///{db}", poll_interval=0.02)
    run_id = await pyworkflow.start(wf.publish, draft, nap)
    if resume_with is not None:  # act as the reviewer too, in this process
        await pyworkflow.wait_for_run(run_id, 60, until=("suspended",))
        await pyworkflow.resume_hook(last_token(), json.loads(resume_with))
    run = await pyworkflow.wait_for_run(run_id, 120)
    print(json.dumps({"status": run.status, "result": run.result}))
    await pyworkflow.shutdown()


async def serve(db: str, run_id: str) -> None:
    pyworkflow.configure(storage=f"sqlite:///{db}", poll_interval=0.02)
    server = asyncio.create_task(pyworkflow.serve())
    try:
        run = await pyworkflow.wait_for_run(run_id, 120)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    print(json.dumps({"status": run.status, "result": run.result}))


async def resume(db: str, token: str, payload: str) -> int:
    pyworkflow.configure(storage=f"sqlite:///{db}")
    try:
        result = await pyworkflow.resume_hook(token, json.loads(payload))
    except pyworkflow.WorkflowError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return 3
    finally:
        await pyworkflow.shutdown()
    print(json.dumps({"run_id": result.run_id, "status": result.status}))
    return 0


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "start":
        asyncio.run(start(args[0], args[1], float(args[2]), args[3] if len(args) > 3 else None))
    elif command == "serve":
        asyncio.run(serve(args[0], args[1]))
    elif command == "resume":
        sys.exit(asyncio.run(resume(args[0], args[1], args[2])))
    else:
        sys.exit(f"unknown command {command!r}")
'''


@dataclass(frozen=True)
class Case:
    """How the starting process dies and what the recovered run must show afterwards."""

    id: str
    crash_at: str | None = None  # PYWORKFLOW_CRASH_AT for the starting process
    kill_when: str | None = None  # external SIGKILL: "suspended" | "in_setup" | "sleeping"
    starter_resumes: bool = False  # the starting process also delivers the payload
    nap: float = 0.0  # durable sleep() between prepare and review_step
    restart_after_deadline: bool = True  # for "sleeping": start the server after the timer is due
    setup_runs: int = 1  # expensive_setup calls in total
    tokens: int = 1  # on_created deliveries in total
    review_entries: int = 2  # times review_step's body was entered
    recovered: bool | None = True  # a run_recovered event (a dead worker's lease was taken over)
    resumer_crash_at: str | None = None  # PYWORKFLOW_CRASH_AT for the process that resumes


CASES = [
    # Before any step ran: the new process runs everything.
    Case("after_run_created", crash_at="after_run_created"),
    # After prepare was recorded: it is replayed, not run again.
    Case("after_step_completed-prepare", crash_at="after_step_completed:1"),
    # The spec's case: checkpoint saved, hook not yet created. The restarted step reads the
    # checkpoint instead of calling expensive_setup again and creates the hook.
    Case("after_checkpoint_saved", crash_at="after_checkpoint_saved", review_entries=3),
    # Hook created, on_created never ran: it is delivered by the new process.
    Case("after_wait_created", crash_at="after_wait_created", review_entries=3),
    # on_created ran but the suspension was not recorded: delivered again with a new token
    # (at-least-once); both tokens name the same hook.
    Case("after_on_created", crash_at="after_on_created", tokens=2, review_entries=3),
    # Suspension recorded: nothing is re-run and on_created is not repeated.
    Case("after_suspended", crash_at="after_suspended", recovered=False),
    Case("sigkill-while-suspended", kill_when="suspended", recovered=False),
    # The resuming process dies right after resume_hook recorded the payload, before the step
    # re-runs; another process finishes the run without a second resume.
    Case("after_hook_resumed", crash_at="after_hook_resumed", starter_resumes=True, recovered=None),
    # Two deaths: the starter is killed while suspended, then the separate process that delivers
    # the payload dies right after resume_hook; the server runs the resumed step by itself.
    Case(
        "sigkill-while-suspended+resumer-dies-after_hook_resumed",
        kill_when="suspended",
        resumer_crash_at="after_hook_resumed",
        recovered=False,
    ),
    # The resumed run was claimed (leased) by a process that died before running the turn.
    Case("after_claim", crash_at="after_claim", starter_resumes=True),
    # review_step's result was recorded, then the process died: it is replayed, not re-run.
    Case("after_step_completed-review", crash_at="after_step_completed:2", starter_resumes=True),
    # Every step recorded, the run's completion not: all three are replayed.
    Case("after_step_completed-publish", crash_at="after_step_completed:3", starter_resumes=True),
    # Killed inside expensive_setup, before the checkpoint existed: the one case where the work
    # before the checkpoint runs again.
    Case("sigkill-in-expensive_setup", kill_when="in_setup", setup_runs=2, review_entries=3),
    # Killed during a durable sleep; restarted after the deadline, and before it.
    Case("sigkill-during-sleep-restart-late", kill_when="sleeping", nap=1.0, recovered=False),
    Case(
        "sigkill-during-sleep-restart-early",
        kill_when="sleeping",
        nap=1.5,
        restart_after_deadline=False,
        recovered=False,
    ),
]

#: Crash points that have no case: none may be left out silently.
UNCOVERED_POINTS: set[str] = set()


def test_every_crash_point_has_a_case() -> None:
    covered = {c.crash_at.partition(":")[0] for c in CASES if c.crash_at}
    assert covered | UNCOVERED_POINTS == set(POINTS), set(POINTS) - covered


class Harness:
    """Processes on one SQLite file, and the marker files they write."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.db = tmp_path / "crash.db"
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        (tmp_path / "crash_workflows.py").write_text(textwrap.dedent(WORKFLOW_MODULE))
        (tmp_path / "crash_driver.py").write_text(textwrap.dedent(DRIVER))
        self.procs: list[tuple[str, subprocess.Popen[str]]] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYWORKFLOW_", "CRASH_"))}
        path = [str(self.dir), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        env.update(
            PYTHONPATH=os.pathsep.join(path),
            PYWORKFLOW_HOME=str(self.dir / "home"),
            CRASH_MARKS=str(self.marks),
            **extra,
        )
        return env

    def spawn(self, label: str, *args: str, **env: str) -> subprocess.Popen[str]:
        out = open(self.dir / f"{label}.out", "w")  # noqa: SIM115 - closed when the process is reaped
        err = open(self.dir / f"{label}.err", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(self.dir / "crash_driver.py"), *args],
            env=self.env(**env),
            cwd=self.dir,
            stdout=out,
            stderr=err,
            text=True,
        )
        out.close()
        err.close()
        self.procs.append((label, proc))
        return proc

    def run(self, label: str, *args: str, **env: str) -> tuple[int, str]:
        proc = self.spawn(label, *args, **env)
        rc = proc.wait(timeout=60)
        return rc, (self.dir / f"{label}.out").read_text()

    def logs(self) -> str:
        parts = []
        for label, _ in self.procs:
            for stream in ("out", "err"):
                text = (self.dir / f"{label}.{stream}").read_text().strip()
                if text:
                    parts.append(f"--- {label}.{stream}\n{text[-3000:]}")
        return "\n".join(parts)

    def kill_all(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    def lines(self, name: str) -> list[str]:
        path = self.marks / name
        return path.read_text().split() if path.exists() else []

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if not self.db.exists():
            return []
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError:  # not migrated yet
            return []
        finally:
            conn.close()

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\n{self.logs()}")
            for label, proc in self.procs:
                if label == "server" and proc.poll() is not None:
                    pytest.fail(f"the server exited ({proc.returncode}) waiting for {what}\n{self.logs()}")
            time.sleep(0.02)

    def run_status(self) -> str | None:
        rows = self.query("SELECT status FROM runs")
        return rows[0][0] if rows else None


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    try:
        yield h
    finally:
        h.kill_all()


def _payload(case: Case) -> dict[str, Any]:
    return {"approved": True, "note": f"approved after {case.id}"}


def _crash_the_starter(h: Harness, case: Case) -> None:
    args = ["start", str(h.db), DRAFT, str(case.nap)]
    if case.starter_resumes:
        args.append(json.dumps(_payload(case)))
    env: dict[str, str] = {}
    if case.crash_at:
        env["PYWORKFLOW_CRASH_AT"] = case.crash_at
    if case.kill_when == "in_setup":
        env["CRASH_SETUP_HANG"] = "120"
    starter = h.spawn("starter", *args, **env)
    if case.crash_at:
        rc = starter.wait(timeout=60)
        err = (h.dir / "starter.err").read_text()
        assert rc == 137, f"expected the crash point to kill the starter, rc={rc}\n{h.logs()}"
        assert f"crash point {case.crash_at.partition(':')[0]!r} reached" in err, h.logs()
        return

    # Suspended and holding nothing: its lease is released (no queue row) after the suspension
    # committed, without the turn waiting for it (Store.suspend_run, recorded=True).
    def released() -> bool:
        return not h.query("SELECT 1 FROM queue")

    if case.kill_when == "suspended":
        h.wait_until(
            "the run to suspend",
            lambda: h.run_status() == "suspended" and bool(h.lines("tokens")) and released(),
        )
    elif case.kill_when == "in_setup":
        h.wait_until("expensive_setup to start", lambda: len(h.lines("setup")) == 1)
    elif case.kill_when == "sleeping":
        h.wait_until(
            "the run to suspend on its sleep timer",
            lambda: (
                h.run_status() == "suspended"
                and bool(h.query("SELECT 1 FROM waits WHERE kind = 'timer' AND status = 'pending'"))
                and released()
            ),
        )
    else:  # pragma: no cover - a Case needs crash_at or kill_when
        raise AssertionError(case)
    os.kill(starter.pid, signal.SIGKILL)
    assert starter.wait(timeout=30) == -signal.SIGKILL, h.logs()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_run_survives_a_crash(harness: Harness, case: Case) -> None:
    h = harness
    _crash_the_starter(h, case)

    # The run was left unfinished by the dead process.
    runs = h.query("SELECT id, status FROM runs")
    assert len(runs) == 1, runs
    run_id, status = runs[0]
    assert status in ("running", "suspended"), status
    assert h.query("PRAGMA integrity_check") == [("ok",)]

    if case.kill_when == "sleeping":
        (expires_at,) = h.query("SELECT expires_at FROM waits WHERE kind = 'timer'")[0]
        if case.restart_after_deadline:
            time.sleep(max(0.0, expires_at - time.time()) + 0.3)
        else:
            assert time.time() < expires_at, "the timer fired before the restart; make nap longer"

    server = h.spawn("server", "serve", str(h.db), run_id)
    if not case.starter_resumes:
        h.wait_until(
            f"{case.tokens} token(s) from on_created and the run suspended",
            lambda: len(h.lines("tokens")) == case.tokens and h.run_status() == "suspended",
        )
        crash = {"PYWORKFLOW_CRASH_AT": case.resumer_crash_at} if case.resumer_crash_at else {}
        rc, out = h.run(
            "resume", "resume", str(h.db), h.lines("tokens")[-1], json.dumps(_payload(case)), **crash
        )
        assert rc == (137 if case.resumer_crash_at else 0), f"{out}\n{h.logs()}"
    try:
        rc = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run did not finish in the new process\n{h.logs()}")
    assert rc == 0, h.logs()
    assert json.loads((h.dir / "server.out").read_text())["status"] == "completed", h.logs()

    _check_outcome(h, case, run_id)

    if case.tokens > 1:
        # Every token handed out names the same hook, which has its payload now.
        rc, out = h.run("resume-old", "resume", str(h.db), h.lines("tokens")[0], '{"approved": false}')
        assert rc == 3 and json.loads(out)["error"] == "HookAlreadyReceivedError", out


def _check_outcome(h: Harness, case: Case, run_id: str) -> None:
    logs = h.logs()
    (status, result), *_ = h.query("SELECT status, result FROM runs WHERE id = ?", run_id)
    assert status == "completed", logs
    assert json.loads(result) == {
        "draft": DRAFT,
        "words": len(DRAFT.split()),
        "score": 42,
        **_payload(case),
        "published": True,
    }

    # No step completed twice: one step_completed event per step key, every step completed.
    def events_of(kind: str) -> int:
        return int(h.query("SELECT COUNT(*) FROM events WHERE run_id = ? AND type = ?", run_id, kind)[0][0])

    completed = h.query(
        "SELECT key, COUNT(*) FROM events WHERE run_id = ? AND type = 'step_completed' GROUP BY key", run_id
    )
    assert dict(completed) == dict.fromkeys(STEP_KEYS, 1), logs
    steps = h.query("SELECT step_key, status FROM steps WHERE run_id = ?", run_id)
    assert dict(steps) == dict.fromkeys(STEP_KEYS, "completed"), steps
    assert events_of("run_completed") == 1

    # The work itself: completed steps never ran again; expensive_setup once, unless the crash
    # came before the checkpoint was saved; on_created once, unless the crash came before the
    # suspension was recorded.
    assert len(h.lines("prepare")) == 1, logs
    assert len(h.lines("publish")) == 1, logs
    assert len(h.lines("setup")) == case.setup_runs, logs
    assert len(h.lines("tokens")) == case.tokens, logs
    assert len(h.lines("review")) == case.review_entries, logs

    # The hook received exactly the one payload; the checkpoint was deleted at the end.
    waits = h.query("SELECT name, status, payload FROM waits WHERE run_id = ? AND kind = 'step_hook'", run_id)
    assert [(n, s, json.loads(p)) for n, s, p in waits] == [("human_review", "received", _payload(case))]
    assert h.query("SELECT COUNT(*) FROM checkpoints WHERE run_id = ?", run_id) == [(0,)]
    assert events_of("checkpoint_saved") == 1  # a crash before the save leaves none behind
    if case.recovered is not None:
        assert (events_of("run_recovered") > 0) == case.recovered, logs

    if case.nap:
        # The durable sleep ended by itself, at its deadline, not before.
        ((timer_status, created, expires, resolved),) = h.query(
            "SELECT status, created_at, expires_at, resolved_at FROM waits"
            " WHERE run_id = ? AND kind = 'timer'",
            run_id,
        )
        assert timer_status == "expired"
        assert expires == pytest.approx(created + case.nap)
        assert resolved >= expires

    assert h.query("SELECT COUNT(*) FROM queue") == [(0,)]
    assert h.query("PRAGMA integrity_check") == [("ok",)]
