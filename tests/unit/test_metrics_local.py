"""The local runtime's metrics opt-in (``pyworkflow.start_metrics_server``), scraped over HTTP
after real runs on the backend under test: the state gauges equal the database, the event
metrics moved by exactly what the runs did (the registry is this test process's: deltas)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pyworkflow
from pyworkflow import FatalError, RetryableError, hook, sleep, step, workflow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

_failed_once: set[str] = set()


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(port: int) -> Samples:
    response = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert response.status_code == 200
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@step(retry_delay=0.01)
async def flaky(key: str) -> str:
    if key not in _failed_once:
        _failed_once.add(key)
        raise RetryableError("first attempt fails")
    return key


@step(max_retries=0)
async def broken() -> None:
    raise FatalError("no")


@workflow
async def reviewed(key: str) -> Any:
    await flaky(key)
    await sleep(0.01)
    return await hook("review")


@workflow
async def failing() -> None:
    await broken()


def database_runs() -> dict[tuple[str, str], int]:
    store = pyworkflow.get_store()
    query = "SELECT status, node_id IS NULL, count(*) FROM runs GROUP BY status, node_id IS NULL"
    rows = store.database.read(lambda conn: conn.execute(query).fetchall())
    return {(str(s), "workflow" if local else "traverser"): int(n) for s, local, n in rows}


def runs_gauge(samples: Samples) -> dict[tuple[str, str], int]:
    return {
        (dict(labels)["status"], dict(labels)["kind"]): int(v)
        for (name, labels), v in samples.items()
        if name == "pyworkflow_runs"
    }


async def test_local_runtime_serves_metrics_when_asked(engine: str) -> None:
    port = pyworkflow.start_metrics_server(0)
    assert pyworkflow.start_metrics_server(0) == port  # once per process
    before = await scrape(port)

    run_id = await pyworkflow.start(reviewed, "a")
    deadline = asyncio.get_running_loop().time() + 30
    while not (pending := [h for h in await pyworkflow.list_pending_hooks() if h.run_id == run_id]):
        assert asyncio.get_running_loop().time() < deadline, "the hook never became pending"
        await asyncio.sleep(0.05)  # polling: the runtime fires the back-off and the sleep meanwhile
    waiting = await scrape(port)
    assert value(waiting, "pyworkflow_waits_pending", kind="hook") >= 1
    await pyworkflow.resume_hook_by_id(pending[0].hook_id, {"ok": True})
    assert (await pyworkflow.wait_for_run(run_id, timeout=30)).status == "completed"
    failed = await pyworkflow.start(failing)
    assert (await pyworkflow.wait_for_run(failed, timeout=30)).status == "failed"

    # State is read from the database at scrape time (cached for a second): it comes to equal it.
    while runs_gauge(after := await scrape(port)) != database_runs():
        assert asyncio.get_running_loop().time() < deadline, (runs_gauge(after), database_runs())
        await asyncio.sleep(0.1)
    assert database_runs() == {("completed", "workflow"): 1, ("failed", "workflow"): 1}
    assert value(after, "pyworkflow_store_up") == 1

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # One payload continued the run; one sleep and one retry back-off fired, each with lateness.
    assert moved("pyworkflow_decision_to_running_seconds_count", kind="hook") == 1
    assert moved("pyworkflow_timers_fired_total", kind="timer") == 1
    assert moved("pyworkflow_timers_fired_total", kind="retry") == 1
    assert moved("pyworkflow_timer_lateness_seconds_count", kind="timer") == 1
    assert moved("pyworkflow_retries_total", kind="step") == 1
    # Step executions: flaky failed once then completed; broken failed.
    assert moved("pyworkflow_step_seconds_count", outcome="completed") == 1
    assert moved("pyworkflow_step_seconds_count", outcome="failed") == 2
    # Turns: three suspensions (retry, sleep, hook), one completion, one failure.
    assert moved("pyworkflow_attempt_seconds_count", kind="workflow", outcome="suspended") == 3
    assert moved("pyworkflow_attempt_seconds_count", kind="workflow", outcome="completed") == 1
    assert moved("pyworkflow_attempt_seconds_count", kind="workflow", outcome="failed") == 1
    assert moved("pyworkflow_group_commit_batch_size_count") > 0
    assert moved("pyworkflow_group_commit_seconds_count") == moved("pyworkflow_group_commit_batch_size_count")
    assert value(after, "pyworkflow_worker_permits") == 1000
    assert value(after, "pyworkflow_worker_permits_in_use") == 0


async def test_a_scrape_without_an_open_store_reports_it_down(engine: str) -> None:
    port = pyworkflow.start_metrics_server(0)
    await pyworkflow.shutdown()  # closes the store
    deadline = asyncio.get_running_loop().time() + 10
    while value(samples := await scrape(port), "pyworkflow_store_up") != 0:
        assert asyncio.get_running_loop().time() < deadline, "pyworkflow_store_up never went to 0"
        await asyncio.sleep(0.1)
    assert not any(name == "pyworkflow_runs" for name, _ in samples)


def test_labelled_keeps_the_child_the_metric_itself_holds() -> None:
    """``labelled`` hands out the very child ``labels`` does (what it observes is scraped), one per
    set of values, and refuses what ``labels`` refuses."""
    from pyworkflow.store import metrics

    child = metrics.labelled(metrics.STEP_SECONDS, "completed")
    assert child is metrics.STEP_SECONDS.labels("completed")
    assert metrics.labelled(metrics.STEP_SECONDS, "completed") is child
    assert metrics.labelled(metrics.STEP_SECONDS, "failed") is not child
    before = value(
        parse(metrics.metrics_text().decode()), "pyworkflow_step_seconds_count", outcome="completed"
    )
    child.observe(0.002)
    after = value(
        parse(metrics.metrics_text().decode()), "pyworkflow_step_seconds_count", outcome="completed"
    )
    assert after == before + 1
    with pytest.raises(ValueError):
        metrics.labelled(metrics.ATTEMPT_SECONDS, "workflow")  # two labels, one value


def test_writer_batches_serve_what_two_histograms_would() -> None:
    """The writers' batches are counted in plain lists under one lock (``WriterBatches``) and
    served as the two histograms prometheus-client's ``Histogram`` would serve for the same
    observations, sample for sample: values on a bucket's bound, between bounds, zero and past
    the last bound; concurrent observers lose none."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from pyworkflow.store import metrics

    batches, registry = metrics.WriterBatches(), CollectorRegistry()
    registry.register(batches)
    reference = CollectorRegistry()
    sizes = Histogram(
        metrics.WriterBatches.SIZE, metrics.WriterBatches.SIZE_DOC,
        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=reference,
    )  # fmt: skip
    seconds = Histogram(
        metrics.WriterBatches.SECONDS, metrics.WriterBatches.SECONDS_DOC,
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
        registry=reference,
    )  # fmt: skip
    observed = [(0.0, 1), (0.005, 2), (0.0050001, 3), (0.3, 512), (300.0, 513), (1e6, 100_000), (0.0004, 1)]
    for took, jobs in observed:
        batches.observe(took, jobs)
        sizes.observe(jobs)
        seconds.observe(took)

    def served(registry: CollectorRegistry) -> Samples:
        return {
            k: v
            for k, v in parse(generate_latest(registry).decode()).items()
            if not k[0].endswith("_created")
        }

    assert served(registry) == served(reference)
    assert value(served(registry), "pyworkflow_group_commit_batch_size_bucket", le="2.0") == 3
    assert value(served(registry), "pyworkflow_group_commit_seconds_bucket", le="0.005") == 3
    assert value(served(registry), "pyworkflow_group_commit_seconds_bucket", le="+Inf") == len(observed)
    created = parse(generate_latest(registry).decode())
    assert value(created, "pyworkflow_group_commit_seconds_created") > 0

    def observe_many() -> None:
        for _ in range(20_000):
            batches.observe(0.001, 1)

    import threading

    threads = [threading.Thread(target=observe_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = served(registry)
    assert value(after, "pyworkflow_group_commit_batch_size_count") == len(observed) + 80_000
    assert value(after, "pyworkflow_group_commit_seconds_bucket", le="0.005") == 3 + 80_000


def test_labelled_histograms_serve_what_prometheus_client_would() -> None:
    """The engine's event histograms (steps, attempts, decisions to running, timers' lateness) are
    ``LabelledHistogram``: plain counts a child under one lock, served as prometheus-client's
    ``Histogram`` with the same labels would serve the same observations, sample for sample, the
    ``_created`` of each child included; one child per set of values; a wrong number of values
    refused as ``labels`` refuses it; concurrent observers lose none."""
    import threading

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from pyworkflow.store import metrics
    from pyworkflow.store._histograms import LabelledHistogram

    for metric in (metrics.STEP_SECONDS, metrics.ATTEMPT_SECONDS, metrics.DECISION_TO_RUNNING,
                   metrics.TIMER_LATENESS):  # fmt: skip
        assert isinstance(metric, LabelledHistogram)
    registry, reference = CollectorRegistry(), CollectorRegistry()
    bounds = (0.001, 0.005, 0.01, 1.0, 60.0)
    ours = LabelledHistogram("t_seconds", "A test.", ["kind", "outcome"], buckets=bounds, registry=registry)
    theirs = Histogram("t_seconds", "A test.", ["kind", "outcome"], buckets=bounds, registry=reference)
    observed = [("a", "ok", 0.0), ("a", "ok", 0.001), ("a", "ok", 0.0010001), ("b", "failed", 60.0),
                ("b", "failed", 1e9), ("a", "failed", 0.3)]  # fmt: skip
    for kind, outcome, amount in observed:
        ours.labels(kind, outcome).observe(amount)
        theirs.labels(kind, outcome).observe(amount)
    assert ours.labels("a", "ok") is ours.labels("a", "ok")
    with pytest.raises(ValueError):
        ours.labels("a")
    mine, reference_samples = (
        parse(generate_latest(registry).decode()),
        parse(generate_latest(reference).decode()),
    )
    assert set(mine) == set(reference_samples)  # the _created samples too, per child
    created = [k for k in mine if k[0] == "t_seconds_created"]
    assert len(created) == 3 and all(mine[k] > 0 for k in created)
    assert {k: v for k, v in mine.items() if k not in created} == {
        k: v for k, v in reference_samples.items() if k not in created
    }
    assert value(mine, "t_seconds_bucket", kind="a", outcome="ok", le="0.001") == 2
    assert value(mine, "t_seconds_bucket", kind="b", outcome="failed", le="+Inf") == 2
    child = ours.labels("c", "ok")

    def observe_many() -> None:
        for _ in range(20_000):
            child.observe(0.002)

    threads = [threading.Thread(target=observe_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = parse(generate_latest(registry).decode())
    assert value(after, "t_seconds_count", kind="c", outcome="ok") == 80_000
    assert value(after, "t_seconds_bucket", kind="c", outcome="ok", le="0.005") == 80_000


_held = asyncio.Event()
#: how many steps have entered ``held_open`` (a turn is running once its step is inside)
_inside: list[int] = [0]


@step
async def held_open() -> str:
    _inside[0] += 1
    await _held.wait()
    return "done"


async def _until_inside(count: int) -> None:
    """Wait until ``count`` steps are inside ``held_open``: a turn may start a moment after
    ``start`` returned (on PostgreSQL the runtime claims it on its next wake-up)."""
    deadline = asyncio.get_running_loop().time() + 10
    while _inside[0] < count:
        assert asyncio.get_running_loop().time() < deadline, f"{_inside[0]} of {count} turns started"
        await asyncio.sleep(0.01)


@workflow
async def holding() -> str:
    return await held_open()


async def test_permits_in_use_counts_the_turns_running_now(engine: str) -> None:
    """Read at scrape time from the runtime's turns (nothing is counted a turn): two turns held
    open in a step are two permits in use, and none once they ended or the runtime stopped."""
    _held.clear()
    _inside[0] = 0
    port = pyworkflow.start_metrics_server(0)
    first = await pyworkflow.start(holding)
    second = await pyworkflow.start(holding)
    await _until_inside(2)
    assert value(await scrape(port), "pyworkflow_worker_permits_in_use") == 2
    _held.set()
    for run_id in (first, second):
        assert (await pyworkflow.wait_for_run(run_id, timeout=30)).result == "done"
    deadline = asyncio.get_running_loop().time() + 10
    while value(await scrape(port), "pyworkflow_worker_permits_in_use") != 0:
        assert asyncio.get_running_loop().time() < deadline, "permits stayed in use"
        await asyncio.sleep(0.02)
    _held.clear()
    await pyworkflow.start(holding)
    await _until_inside(3)
    assert value(await scrape(port), "pyworkflow_worker_permits_in_use") == 1
    await pyworkflow.shutdown()  # the stopped runtime's cancelled turn counts no more
    assert value(await scrape(port), "pyworkflow_worker_permits_in_use") == 0
