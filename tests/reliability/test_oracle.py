"""The oracle finds what it is there to find: one real run recorded, then each guarantee broken
by hand (in the ledger or the database) is reported, and nothing is reported before."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from tests.reliability import workload
from tests.reliability.ledger import Ledger
from tests.reliability.local_trials import EXPECT
from tests.reliability.oracle import Oracle

import pyworkflow


async def _one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Oracle, Ledger, Path]:
    db = tmp_path / "oracle.db"
    ledger = Ledger(tmp_path / "ledger.jsonl")
    monkeypatch.setenv("RELIABILITY_LEDGER", str(ledger.path))
    pyworkflow.configure(storage=f"sqlite:///{db}", poll_interval=0.02)
    try:
        run_id = await pyworkflow.start(workload.trial, "k", 0.1)
        ledger.record("k", "started", run_id=run_id)
        while not (hooks := await pyworkflow.list_pending_hooks()):
            await asyncio.sleep(0.02)
        await pyworkflow.resume_hook_by_id(hooks[0].hook_id, {"approved": True})
        ledger.record("k", "decide", wait=hooks[0].hook_id, outcome="accepted")
        assert (await pyworkflow.wait_for_run(run_id, 30)).status == "completed"
    finally:
        await pyworkflow.shutdown()
    return Oracle(f"sqlite:///{db}"), ledger, db


def _sql(db: Path, statement: str) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(statement)
    conn.close()


async def test_a_clean_run_has_no_violation_and_each_broken_guarantee_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle, ledger, db = await _one_run(tmp_path, monkeypatch)
    assert oracle.check(ledger, EXPECT, final=True)[0] == []
    assert ledger.counts("checkpoint") == {"k": 2}

    def found(**kw: object) -> str:
        return "\n".join(oracle.check(ledger, EXPECT, final=True, **kw)[0])  # type: ignore[arg-type]

    ledger.record("k", "setup")  # the setup ran again: allowed only when a crash hit the run
    assert "setup of 'k' ran 2 times with 0 crash(es)" in found()
    assert found(crashes={"k": 1}) == ""
    ledger.record("k", "checkpoint", name=workload.CHECKPOINT, revision=2)  # a lost update
    assert "revisions not strictly increasing: [1, 2, 2]" in found(crashes={"k": 1})
    ledger.path.write_text("".join(line + "\n" for line in ledger.path.read_text().splitlines()[:-2]))
    wait_id = next(e.extra["wait"] for e in ledger.entries() if e.what == "decide")
    ledger.record("k", "decide", wait=wait_id, outcome="accepted")
    assert f"wait {wait_id} of 'k' accepted 2 decisions" in found()
    ledger.path.write_text("".join(line + "\n" for line in ledger.path.read_text().splitlines()[:-1]))
    ledger.record("gone", "started", run_id="nope")
    assert "lost run: 'gone' was started" in found()
    ledger.path.write_text("".join(line + "\n" for line in ledger.path.read_text().splitlines()[:-1]))
    assert found() == ""

    _sql(db, "INSERT INTO events (run_id, seq, at, type, key) SELECT run_id, 999, at, type, key"
             " FROM events WHERE type = 'step_completed' LIMIT 1")  # fmt: skip
    assert "step completed twice" in found()
    _sql(db, "DELETE FROM events WHERE seq = 999")
    _sql(db, "UPDATE waits SET resolved_at = expires_at - 1 WHERE kind = 'timer'")
    assert "expired at" in found() and "before its deadline" in found()
    _sql(db, "UPDATE waits SET resolved_at = expires_at WHERE kind = 'timer'")
    _sql(db, "UPDATE runs SET status = 'running'")
    assert "lost run: 'k' is running" in found()
    assert oracle.check(ledger, EXPECT, final=False)[0] == []  # in flight is fine mid-campaign
    _sql(db, "UPDATE runs SET status = 'completed'")
    _sql(db, "INSERT INTO queue (run_id, available_at, lease_owner, lease_expires_at)"
             " SELECT id, 0, 'ghost', 1e12 FROM runs")  # fmt: skip
    assert "live lease on 'k', which is completed" in found()
    assert "'k' ended and still has a queue row" in found()


async def test_a_stuck_run_is_described_by_its_queue_row_waits_and_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "stuck.db"
    monkeypatch.setenv("RELIABILITY_LEDGER", str(tmp_path / "ledger.jsonl"))
    pyworkflow.configure(storage=f"sqlite:///{db}", poll_interval=0.02)
    try:
        run_id = await pyworkflow.start(workload.trial, "stuck-key", 0.0)
        while not await pyworkflow.list_pending_hooks():  # parked on its step hook, not finished
            await asyncio.sleep(0.02)
    finally:
        await pyworkflow.shutdown()
    oracle = Oracle(f"sqlite:///{db}")
    # As if a worker had died holding the run's lease: the report names the holder and the lease.
    _sql(db, f"INSERT OR REPLACE INTO queue (run_id, available_at, wake_seq, epoch, lease_owner, "
             f"lease_expires_at, crashes) VALUES ('{run_id}', 0, 3, 7, 'w-dead', 1e12, 2)")  # fmt: skip
    report = oracle.stuck_report(now=100.0)
    assert report.startswith("1 unfinished run(s) at 100.000:")
    assert f"- run {run_id} key=stuck-key status=suspended" in report
    assert "queue: epoch=7 wake_seq=3 due=-100.00s lease=w-dead expires=+999999999900.00s crashes=2" in report
    assert "wait step_hook " in report and ": pending expires=+" in report
    assert "run_created" in report and "wait_created" in report
    _sql(db, f"DELETE FROM queue WHERE run_id = '{run_id}'")
    assert "queue: no row" in oracle.stuck_report()


def test_a_process_serving_the_workload_dumps_its_threads_on_sigusr1(tmp_path: Path) -> None:
    """What the Celery campaign asks of its workers when a trial's runs are late."""
    import signal
    import subprocess
    import sys
    import time

    err = tmp_path / "worker.err"
    code = "import tests.reliability.workload, sys, time; print('ready', flush=True); time.sleep(30)"
    with open(err, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=out)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while "most recent call first" not in err.read_text():
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        assert proc.poll() is None  # the dump does not end the process
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
