"""The broker a process is given (``configure(broker=...)``, ``pyworkflow worker --broker``) is the
one it uses, even where ``$CELERY_BROKER_URL`` names another: Celery prefers that variable to an
app's own ``broker_url``, so a worker whose environment named another broker consumed from there
(and a client published there) while the runs waited. The variable stays the default when no
broker is given. Real PostgreSQL, Redis and ``pyworkflow worker`` processes."""

from __future__ import annotations

import cwf
import pytest
from charness import Cluster

import pyworkflow
from pyworkflow.runtime._celery import CeleryOptions, make_app

ELSEWHERE = "redis://127.0.0.1:6379/7"


def test_the_given_broker_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELERY_BROKER_URL", ELSEWHERE)
    app = make_app(CeleryOptions("redis://127.0.0.1:6379/3", "q"))
    with app.connection_for_write() as write, app.connection_for_read() as read:
        for conn in (write, read):
            assert (conn.transport_cls, conn.hostname, conn.port, str(conn.virtual_host)) == (
                "redis",
                "127.0.0.1",
                6379,
                "3",
            )
    # Given none, the variable is the default.
    assert CeleryOptions.from_extra({}).broker == ELSEWHERE


async def test_a_worker_told_another_broker_by_its_environment_serves_the_given_one(client: Cluster) -> None:
    client.start_worker(concurrency=4, extra_env={"CELERY_BROKER_URL": ELSEWHERE})
    runs = [await pyworkflow.start(cwf.sleeper, f"e{i}") for i in range(3)]
    # Well inside the 30 s after which the sweeper would publish the runs again (to the
    # worker's broker, wherever that is).
    client.wait_statuses("completed", len(runs), timeout=20)
