"""Real parts for the Celery runtime tests: a fresh PostgreSQL database, Redis (or RabbitMQ) as the
broker with a queue of the test's own, and ``pyworkflow worker`` subprocesses that tests start,
SIGKILL and replace. The workflows live in ``cwf`` (this folder), which the workers import."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import pyworkflow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for _path in (HERE, ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from charness import Cluster  # noqa: E402 - needs HERE on sys.path
from tests.conftest import require_service  # noqa: E402 - needs ROOT on sys.path
from tests.own_postgres import OwnPostgres, own_postgres  # noqa: E402 - needs ROOT on sys.path

REDIS_URL = os.environ.get("PYWORKFLOW_TEST_REDIS", "redis://127.0.0.1:6379/0")
RABBITMQ_URL = os.environ.get("PYWORKFLOW_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672//")

pytestmark = [pytest.mark.celery, pytest.mark.postgres]


def _purge(broker: str, queue: str) -> None:
    from pyworkflow.runtime._celery import CeleryOptions, make_app

    app = make_app(CeleryOptions(broker, queue))
    with app.connection_for_write() as conn:
        try:
            conn.default_channel.queue_delete(queue)
        except Exception:
            pass


def _cluster(pg_database: str, tmp_path: Path, broker: str, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    queue = f"pwtest-{secrets.token_hex(4)}"
    workdir = tmp_path / "celery"
    workdir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "PWTEST_DIR": str(workdir),
        "PWTEST_QUEUE": queue,
        "CELERY_BROKER_URL": broker,
    }
    for key in ("PWTEST_DIR", "PWTEST_QUEUE", "CELERY_BROKER_URL"):
        monkeypatch.setenv(key, env[key])
    import cwf

    monkeypatch.setattr(cwf, "DIR", workdir)
    return Cluster(pg_database, broker, queue, workdir, env)


def _running_cluster(
    service: str, port: int, broker: str, pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    """A cluster on ``broker`` (failing with one line when its service is down), stopped and its
    queue purged afterwards."""
    require_service(service, "127.0.0.1", port)
    cluster = _cluster(pg_database, tmp_path, broker, monkeypatch)
    try:
        yield cluster
    finally:
        cluster.stop_all()
        _purge(cluster.broker, cluster.queue)


@pytest.fixture
def redis_cluster(pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    yield from _running_cluster("Redis", 6379, REDIS_URL, pg_database, tmp_path, monkeypatch)


@pytest.fixture
def rabbitmq_cluster(pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    yield from _running_cluster("RabbitMQ", 5672, RABBITMQ_URL, pg_database, tmp_path, monkeypatch)


@pytest.fixture
def restartable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Cluster, OwnPostgres]]:
    """A cluster on Redis whose PostgreSQL is a cluster of the test's own, which it may restart
    (the shared server serves the other tests meanwhile)."""
    with own_postgres() as pg:
        db = pg.database("celery")
        yield from (
            (cluster, pg) for cluster in _running_cluster("Redis", 6379, REDIS_URL, db, tmp_path, monkeypatch)
        )


@pytest.fixture
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """This process configured as a Celery client (start, resume) of the test's cluster."""
    name = "rabbitmq_cluster" if "rabbitmq" in request.node.name else "redis_cluster"
    cluster: Cluster = request.getfixturevalue(name)
    pyworkflow.configure(
        storage=cluster.storage, runtime="celery", broker=cluster.broker, queue=cluster.queue
    )
    try:
        yield cluster
    finally:
        await pyworkflow.shutdown()
