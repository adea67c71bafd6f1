"""A backlog is not published twice: the sweeper publishes a due run's turn again only when no
message in the broker's queue stands for it. No worker consumes here, so the queue holds exactly
what was published; ``dispatch_grace`` is 0, so every due run is already "stale". Messages lost
from the queue's head (taken and dropped) or all of them (purged) are published again, once.
Real PostgreSQL, Redis and RabbitMQ."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import cwf
from charness import Cluster

import pyworkflow
from pyworkflow.runtime._celery import CeleryOptions, make_app, queue_depth
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
