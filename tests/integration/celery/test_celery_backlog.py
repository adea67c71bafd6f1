"""A backlog is not published twice: the sweeper publishes a due run's turn again only when no
message in the broker's queue stands for it. No worker consumes here, so the queue holds exactly
what was published; ``dispatch_grace`` is 0, so every due run is already "stale". Messages lost
from the queue's head (taken and dropped) or all of them (purged) are published again, once.
While the backlog lasts the sweeper sweeps once a ``sweep_interval`` and asks the broker over one
connection. Real PostgreSQL, Redis and RabbitMQ."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import cwf
import redis
from charness import Cluster

import pyworkflow
from pyworkflow.runtime._celery import CeleryOptions, QueueDepth, make_app, queue_depth
from pyworkflow.runtime._celery_worker import Sweeper, WorkerSettings
from pyworkflow.store import metrics


def _options(cluster: Cluster) -> CeleryOptions:
    return CeleryOptions(cluster.broker, cluster.queue)


async def _until_depth(cluster: Cluster, depth: int) -> None:
    """RabbitMQ counts a published message a moment after it confirmed it."""
    deadline = time.monotonic() + 10
    while (seen := queue_depth(_options(cluster))) != depth:
        assert time.monotonic() < deadline, f"the queue holds {seen} messages, not {depth}"
        await asyncio.sleep(0.05)


def _take(cluster: Cluster, count: int | None = None) -> list[str]:
    """Take messages off the queue's head (all of them when ``count`` is None), unacknowledged
    and dropped, as a broker that lost them would; the run ids they carried, in order."""
    app = make_app(_options(cluster))
    taken: list[str] = []
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        while count is None or len(taken) < count:
            message = channel.basic_get(cluster.queue, no_ack=True)
            if message is None:
                break
            args, _kwargs, _embed = json.loads(message.body)
            taken.append(args[0])
    return taken


def _republished() -> float:
    return metrics.REGISTRY.get_sample_value("pyworkflow_turns_republished_total") or 0.0


async def _sweep(cluster: Cluster, sweeper: Sweeper | None = None) -> tuple[Sweeper, int]:
    """One sweep (by ``sweeper``, or a new one); how many turns it published, each counted as
    published again (``pyworkflow_turns_republished_total``: no wait expired here)."""
    if sweeper is None:
        settings = WorkerSettings(storage=cluster.storage, celery=_options(cluster), dispatch_grace=0.0)
        sweeper = Sweeper(settings)
    before, counted = sweeper.published, _republished()
    await sweeper.sweep_once()
    published = sweeper.published - before
    assert _republished() - counted == published
    return sweeper, published


async def _backlog_is_published_once(cluster: Cluster) -> None:
    runs = [await pyworkflow.start(cwf.sleeper, f"b{i}") for i in range(6)]
    await _until_depth(cluster, 6)
    sweeper, published = await _sweep(cluster)
    try:
        assert published == 0, "every due run has its message in the queue"
        await _until_depth(cluster, 6)

        lost = _take(cluster, 2)
        assert lost == runs[:2]  # first in, first out
        _, published = await _sweep(cluster, sweeper)
        assert published == 2, "the two runs whose messages were lost"
        await _until_depth(cluster, 6)
        assert Counter(_take(cluster)) == Counter(runs), "each run's turn in the queue exactly once"
    finally:
        sweeper.stop()

    # Everything lost (a broker that restarted empty): a new sweeper publishes every run again.
    sweeper, published = await _sweep(cluster)
    try:
        assert published == 6
        await _until_depth(cluster, 6)
        assert Counter(_take(cluster)) == Counter(runs)
    finally:
        sweeper.stop()
    assert cluster.statuses() == {"pending": 6}


async def test_a_queued_backlog_is_not_published_again_redis(client: Cluster) -> None:
    await _backlog_is_published_once(client)


async def test_a_queued_backlog_is_not_published_again_rabbitmq(client: Cluster) -> None:
    await _backlog_is_published_once(client)


async def test_the_depth_of_a_queue_the_broker_does_not_have_is_0_redis(client: Cluster) -> None:
    """Redis drops an empty list, RabbitMQ has no queue nobody declared: both are 0 messages,
    not "cannot tell"; a broker that cannot be reached cannot tell (None)."""
    assert queue_depth(CeleryOptions(client.broker, client.queue + "-never-used")) == 0
    assert queue_depth(CeleryOptions("redis://127.0.0.1:1/0", client.queue)) is None


async def test_the_depth_of_a_queue_the_broker_does_not_have_is_0_rabbitmq(client: Cluster) -> None:
    assert queue_depth(CeleryOptions(client.broker, client.queue + "-never-used")) == 0
    assert queue_depth(CeleryOptions("amqp://guest:guest@127.0.0.1:1//", client.queue)) is None


async def _a_backlog_is_swept_once_an_interval(cluster: Cluster) -> Sweeper:
    """Runs due and waiting in the queue for a worker: every sweep weighs them against the queue
    (``dispatch_grace`` 0) and then sleeps ``sweep_interval``. Before, a row due in the past made
    the sweeper sleep 50 ms, so it swept (and asked the broker) 20 times a second all backlog long."""
    for i in range(3):
        await pyworkflow.start(cwf.sleeper, f"q{i}")
    await _until_depth(cluster, 3)
    settings = WorkerSettings(
        storage=cluster.storage, celery=_options(cluster), dispatch_grace=0.0, sweep_interval=1.0
    )
    sweeper = Sweeper(settings)
    try:
        pauses = [await sweeper.sweep_once() for _ in range(3)]
        assert pauses == [1.0, 1.0, 1.0] and sweeper.published == 0
    except BaseException:
        sweeper.stop()
        raise
    return sweeper


async def test_a_backlog_is_swept_once_an_interval_over_one_connection_redis(client: Cluster) -> None:
    sweeper = await _a_backlog_is_swept_once_an_interval(client)
    counter = redis.Redis.from_url(client.broker)
    try:
        opened = counter.info("stats")["total_connections_received"]
        for _ in range(5):
            assert await sweeper.sweep_once() == 1.0
        assert counter.info("stats")["total_connections_received"] == opened, "a connection per sweep"
    finally:
        counter.close()
        sweeper.stop()


async def test_a_backlog_is_swept_once_an_interval_rabbitmq(client: Cluster) -> None:
    (await _a_backlog_is_swept_once_an_interval(client)).stop()


async def _depth_reads_go_on_after_a_missing_queue(cluster: Cluster) -> None:
    """A queue the broker does not have (Redis drops an empty list; RabbitMQ closes the channel
    it was asked about on, and py-amqp opens it again) keeps the connection: a sweeper reading
    an empty Redis queue every second does not connect every second."""
    await pyworkflow.start(cwf.sleeper, "d0")
    await _until_depth(cluster, 1)
    missing = QueueDepth(CeleryOptions(cluster.broker, cluster.queue + "-never-used"))
    present = QueueDepth(_options(cluster))
    try:
        assert missing.read() == 0
        kept = missing._conn
        assert kept is not None
        assert [missing.read(), missing.read()] == [0, 0]
        assert missing._conn is kept, "a connection per read of a missing queue"
        assert [present.read(), present.read()] == [1, 1]
        assert missing.read() == 0 and missing._conn is kept
    finally:
        missing.close()
        present.close()


async def test_depth_reads_go_on_after_a_missing_queue_redis(client: Cluster) -> None:
    await _depth_reads_go_on_after_a_missing_queue(client)


async def test_depth_reads_go_on_after_a_missing_queue_rabbitmq(client: Cluster) -> None:
    await _depth_reads_go_on_after_a_missing_queue(client)
