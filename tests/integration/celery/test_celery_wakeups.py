"""Every due wait is acted on within a sweep, also the second one of a run a moment after the first
(the sweeper's de-duplication of published turns is per wake-up, not per run): back-to-back
durable sleeps and a step retried twice after 0.1 s finish in seconds, not after the 30 s a lost
message waits for (``dispatch_grace``). Real ``pyworkflow worker`` processes, PostgreSQL, Redis."""

from __future__ import annotations

import cwf
import orjson
from charness import Cluster

import pyworkflow

#: Generous: two 1 s sleeps (or two 0.1 s back-offs) plus turns and sweeps on a loaded machine;
#: a swallowed wake-up costs 30 s (the old behaviour: 32.3 s and 31.4 s).
BOUND = 10.0


def _durations(cluster: Cluster, workflow: str) -> dict[str, float]:
    """Seconds from the first thing each run's first turn recorded (its first sleep's timer, its
    first failed attempt) to its end: the worker's start-up is not counted."""
    rows = cluster.sql(
        "SELECT r.id, r.finished_at - MIN(e.at) FROM runs r JOIN events e ON e.run_id = r.id"
        " WHERE r.workflow = %s AND e.type <> 'run_created' GROUP BY r.id, r.finished_at",
        (workflow,),
    )
    return {run_id: float(seconds) for run_id, seconds in rows}


def _expiries(cluster: Cluster, run_id: str) -> int:
    return int(
        cluster.sql("SELECT count(*) FROM waits WHERE run_id = %s AND status = 'expired'", (run_id,))[0][0]
    )


async def test_back_to_back_sleeps_and_retries_wake_within_a_sweep(client: Cluster) -> None:
    client.start_worker(concurrency=4)
    sleepers = [await pyworkflow.start(cwf.two_sleeps, f"s{i}") for i in range(3)]
    retried = [await pyworkflow.start(cwf.retried_twice, f"r{i}") for i in range(3)]
    client.wait_statuses("completed", 6, timeout=60)
    for run_id, key in zip(sleepers, ("s0", "s1", "s2"), strict=True):
        run = await pyworkflow.get_workflow_run(run_id)
        assert run.result == f"slept twice {key}" and _expiries(client, run_id) == 2
    for run_id, key in zip(retried, ("r0", "r1", "r2"), strict=True):
        run = await pyworkflow.get_workflow_run(run_id)
        assert run.result == f"third attempt of {key}" and _expiries(client, run_id) == 2
    assert cwf.counts("attempt") == {"r0": 3, "r1": 3, "r2": 3}
    slow = {
        **{k: v for k, v in _durations(client, "cwf:two_sleeps").items() if v >= BOUND},
        **{k: v for k, v in _durations(client, "cwf:retried_twice").items() if v >= BOUND},
    }
    assert (
        len(_durations(client, "cwf:two_sleeps")) == 3 and len(_durations(client, "cwf:retried_twice")) == 3
    )
    assert slow == {}, f"runs that waited for a wake-up: {slow}\n{client.logs()}"


async def test_with_two_workers_no_second_wake_up_is_lost(client: Cluster) -> None:
    client.start_worker(concurrency=4)
    client.start_worker(concurrency=4)
    runs = [await pyworkflow.start(cwf.two_sleeps, f"t{i}") for i in range(8)]
    client.wait_statuses("completed", len(runs), timeout=90)
    durations = _durations(client, "cwf:two_sleeps")
    assert set(durations) == set(runs)
    results = {orjson.loads(r[0]) for r in client.sql("SELECT result FROM runs")}
    assert results == {f"slept twice t{i}" for i in range(8)}
    slow = {k: v for k, v in durations.items() if v >= BOUND}
    assert slow == {}, f"runs that waited for a wake-up: {slow}\n{client.logs()}"
