"""Retention in pyworkflow (on the backend under test): ``purge_runs`` deletes finished runs older
than the cut-off with all their rows, in batches, and nothing else; the local runtime purges by
itself with ``configure(retention=...)``; bad ages are refused."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

import pyworkflow
from pyworkflow import ConfigurationError, WorkflowNotFoundError, hook, step, workflow
from pyworkflow.store import count_purgeable, open_store, parse_age, purge_runs

T0 = 1_700_000_000.0


@step
async def one() -> int:
    return 1


@workflow
async def quick() -> int:
    return await one()


@workflow
async def waiting() -> object:
    return await hook("go")


async def test_purge_runs_in_batches_deletes_only_what_is_due(store_url: str) -> None:
    store = open_store(store_url)
    try:
        old = [secrets.token_hex(8) for _ in range(1100)]
        young = [secrets.token_hex(8) for _ in range(5)]
        unfinished = secrets.token_hex(8)

        async def finished(run_id: str, at: float) -> None:
            await store.create_run(run_id, "w", b"{}", now=at, lease_owner=None, lease_ttl=30)
            await store.cancel_run(run_id, now=at)

        await asyncio.gather(*(finished(r, T0) for r in old), *(finished(r, T0 + 100) for r in young))
        await store.create_run(unfinished, "w", b"{}", now=T0, lease_owner=None, lease_ttl=30)

        counts = store.database.read(lambda conn: count_purgeable(conn, T0 + 50))
        assert counts["runs"] == 1100 and counts["events"] == 2200 and counts["queue"] == 0
        report = await purge_runs(store.database, T0 + 50, batch=500)
        assert (report.runs, report.batches, report.finished) == (1100, 3, True)
        assert report.counts["events"] == 2200
        for run_id in old[:20]:
            assert await store.get_run(run_id) is None and await store.get_events(run_id) == []
        assert {r.id for r in await store.list_runs(limit=100)} == {*young, unfinished}
        assert len(await store.get_events(young[0])) == 2  # the young run keeps its history

        bounded = await purge_runs(store.database, T0 + 200, batch=2, max_batches=1)
        assert (bounded.runs, bounded.finished) == (2, False)
        assert (await purge_runs(store.database, T0 + 200)).runs == 3
        assert [r.id for r in await store.list_runs()] == [unfinished]  # never finished: kept
    finally:
        store.close()


async def test_the_local_runtime_purges_finished_runs_by_itself(store_url: str) -> None:
    pyworkflow.configure(storage=store_url, poll_interval=0.02, retention=1)
    try:
        done = [await pyworkflow.start(quick) for _ in range(3)]
        parked = await pyworkflow.start(waiting)
        for run_id in done:
            assert (await pyworkflow.wait_for_run(run_id, 30)).result == 1
        await pyworkflow.wait_for_run(parked, 30, until=("suspended",))

        deadline = time.monotonic() + 30
        while await pyworkflow.list_runs(status="completed") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for run_id in done:
            with pytest.raises(WorkflowNotFoundError):
                await pyworkflow.get_workflow_run(run_id)
        assert (await pyworkflow.get_workflow_run(parked)).status == "suspended"
        assert len(await pyworkflow.list_pending_hooks()) == 1  # a waiting run keeps its hook
    finally:
        await pyworkflow.shutdown()


async def test_a_purge_backlog_is_worked_through_pass_after_pass(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that leaves runs behind is followed at once by the next (``poll_interval`` apart),
    also on PostgreSQL, where an idle runtime otherwise polls once a second: passes of one
    batch of 2 runs here, so 12 finished runs take 6 passes, about 0.3 s, not 6 s."""
    from pyworkflow.store import _retention

    purge = _retention.purge_runs
    monkeypatch.setattr(_retention, "PASS_BATCHES", 1)
    monkeypatch.setattr(_retention, "purge_runs", lambda *a, **k: purge(*a, **k, batch=2))
    pyworkflow.configure(storage=store_url, retention=1)
    try:
        done = [await pyworkflow.start(quick) for _ in range(12)]
        for run_id in done:
            assert (await pyworkflow.wait_for_run(run_id, 30)).result == 1
        finished = time.monotonic()
        deadline = finished + 30
        while await pyworkflow.list_runs(status="completed") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not await pyworkflow.list_runs(status="completed")
        # 1 s of age, the idle second before the first pass on PostgreSQL, then 6 short passes
        assert time.monotonic() - finished < 3.5
    finally:
        await pyworkflow.shutdown()


AGES = [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45), ("2w", 14 * 86400), ("1.5h", 5400)]


@pytest.mark.parametrize(("text", "seconds"), [*AGES, (7, 7)])
def test_ages(text: object, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize(
    "bad", ["", "soon", "30 days", "-1d", "0d", "0", 0, -5, True, None, float("inf"), "1y"]
)
def test_bad_ages_are_refused(bad: object, tmp_path: object) -> None:
    with pytest.raises(ConfigurationError):
        parse_age(bad)
    if bad is not None:
        with pytest.raises(ConfigurationError):
            pyworkflow.configure(storage=f"sqlite:///{tmp_path}/x.db", retention=bad)  # type: ignore[arg-type]
