"""The loops of pyworkflow's runtimes tick the run queue's vacuum on PostgreSQL (the local
runtime's and the Celery sweeper's; the graph server's is in the atfgraph acceptance tests), and
only there: on SQLite a runtime has none."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import pyworkflow
from pg_queue import churn, queue_stats, wait_vacuumed, without_autovacuum
from pyworkflow import workflow
from pyworkflow._api import get_runtime
from pyworkflow.runtime._celery import CeleryOptions
from pyworkflow.runtime._celery_worker import Sweeper, WorkerSettings
from pyworkflow.store import DEAD_QUEUE_ROWS, PostgresStore, open_store


@workflow(name="tests.queue_vacuum.noop")
async def noop() -> str:
    return "done"


@pytest.mark.postgres
async def test_the_local_runtime_vacuums_the_queue_while_it_runs(pg_database: str) -> None:
    pyworkflow.configure(storage=pg_database, poll_interval=0.02)
    try:
        run_id = await pyworkflow.start(noop)  # starts the runtime (and migrates the database)
        assert (await pyworkflow.wait_for_run(run_id, 10)).status == "completed"
        runtime = await get_runtime()
        assert runtime.vacuum is not None
        without_autovacuum(pg_database)
        churn(pg_database, DEAD_QUEUE_ROWS + 200)
        await asyncio.to_thread(wait_vacuumed, pg_database, 10)  # the runtime's loop goes on meanwhile
        assert queue_stats(pg_database)[0] < DEAD_QUEUE_ROWS
        assert runtime.vacuum.vacuums >= 1
    finally:
        await pyworkflow.shutdown()
    assert runtime.vacuum is None  # closed with the runtime


async def test_a_runtime_on_sqlite_has_no_queue_vacuum(tmp_path: Path) -> None:
    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'x.db'}", poll_interval=0.02)
    try:
        run_id = await pyworkflow.start(noop)
        assert (await pyworkflow.wait_for_run(run_id, 10)).status == "completed"
        assert (await get_runtime()).vacuum is None
    finally:
        await pyworkflow.shutdown()


@pytest.mark.postgres
async def test_the_celery_sweeper_vacuums_the_queue(pg_database: str) -> None:
    store = open_store(pg_database)
    assert isinstance(store, PostgresStore)
    settings = WorkerSettings(storage=pg_database, celery=CeleryOptions.from_extra({}), sweep_interval=0.05)
    sweeper = Sweeper(settings, store=store)
    try:
        assert sweeper.vacuum is not None
        without_autovacuum(pg_database)
        churn(pg_database, DEAD_QUEUE_ROWS + 200)
        await sweeper.sweep_once()  # the first sweep's look vacuums (in the vacuum's own thread)
        sweeper.vacuum.wait(10)
        assert queue_stats(pg_database) == (0, True)
        assert sweeper.vacuum.vacuums == 1
    finally:
        sweeper.stop()
        store.close()
