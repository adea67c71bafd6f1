"""The Celery sweeper's round trips to PostgreSQL when there is nothing to do: one each to expire
due waits, list live lease owners, list rows to publish, and read when to wake (the next due time
and the next deadline in one statement; they were two). Counted at the store's one door to the
database (``_submit``), not timed. No broker is asked: nothing is due."""

from __future__ import annotations

import secrets
import time

import pytest

from pyworkflow.runtime._celery import CeleryOptions
from pyworkflow.runtime._celery_worker import Sweeper, WorkerSettings
from pyworkflow.store import NewWait, PostgresStore, WaitKind, open_store


def _statements(store: PostgresStore) -> list[str]:
    sent: list[str] = []
    submit = store._submit

    def counted(sql: str, *args: object, **kwargs: object) -> object:
        sent.append(sql)
        return submit(sql, *args, **kwargs)  # type: ignore[arg-type]

    store._submit = counted  # type: ignore[method-assign]
    return sent


async def test_an_idle_sweep_is_four_statements_and_sleeps_until_the_next_deadline(
    pg_database: str,
) -> None:
    store = open_store(pg_database)
    assert isinstance(store, PostgresStore)
    settings = WorkerSettings(storage=pg_database, celery=CeleryOptions.from_extra({}), sweep_interval=5.0)
    sweeper = Sweeper(settings, store=store)
    try:
        sent = _statements(store)
        assert await sweeper.sweep_once() == 5.0  # nothing due, nothing pending: a whole interval
        assert len(sent) == 4, sent
        # A run parked on a timer 2 s away: the sweep sleeps until it, in the same four statements.
        now = time.time()
        claim = await store.create_run(
            secrets.token_hex(8), "wf", b'{"args":[]}', now=now, lease_owner="w", lease_ttl=30
        )
        assert claim is not None
        timer = NewWait(secrets.token_hex(8), "timer#1", WaitKind.TIMER, "sleep", "", None, now + 2, None)
        await store.create_wait(claim.fence, timer, now=now)
        await store.suspend_run(claim.fence, notified=[], delivered={}, now=now)
        sent.clear()
        pause = await sweeper.sweep_once()
        assert len(sent) == 4, sent
        assert pause == pytest.approx(2.0 - (time.time() - now), abs=0.5)
    finally:
        sweeper.stop()
        store.close()
