"""The Celery runtime with real parts: PostgreSQL, Redis or RabbitMQ, and ``pyworkflow worker``
subprocesses that are SIGKILLed and replaced."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import cwf
import orjson
import pytest
from charness import HERE, Cluster
from tests.own_postgres import OwnPostgres

import pyworkflow

pytestmark = [pytest.mark.celery, pytest.mark.postgres]


async def _start_hitl(count: int) -> list[str]:
    return [await pyworkflow.start(cwf.hitl, i) for i in range(count)]


def _tokens_ready(count: int) -> bool:
    folder = cwf.DIR / "tokens"
    return folder.exists() and len([p for p in folder.iterdir() if not p.name.startswith(".")]) >= count


def _check_hitl_results(cluster: Cluster, count: int, *, killed_mid_step: bool = False) -> None:
    rows = cluster.sql("SELECT status, result FROM runs WHERE workflow = 'cwf:hitl'")
    assert len(rows) == count
    results = sorted((orjson.loads(r[1]) for r in rows if r[0] == "completed"), key=lambda r: r["i"])
    assert results == [{"i": i, "setup": i, "payload": {"ok": i}} for i in range(count)]
    assert cluster.steps_completed_twice() == []
    every = set(map(str, range(count)))
    if not killed_mid_step:
        # Work before the checkpoint ran once per run; the first step was never re-executed.
        assert cwf.counts("setup") == {i: 1 for i in every}
        assert cwf.counts("prepare") == {i: 1 for i in every}
        return
    # A worker killed mid-step may have been between a run's ledger entry and the commit after
    # it (the setup and its checkpoint, the first step and its result): such work runs again,
    # at most once per kill (at-least-once before a checkpoint, docs/guarantees.md). Once a
    # checkpoint committed, the setup it protects never runs again: no run saved it twice.
    setup, prepare = cwf.counts("setup"), cwf.counts("prepare")
    assert set(setup) == every and set(prepare) == every
    assert max(setup.values()) <= 2 and max(prepare.values()) <= 2, (setup, prepare)
    assert max(cwf.counts("checkpointed").values()) <= 1, cwf.counts("checkpointed")


def _resume_from_another_process(cluster: Cluster, count: int) -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "cdriver.py"), cluster.storage, str(count)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == f"resumed {count}"


async def _scenario_resume_200(cluster: Cluster, count: int = 200) -> None:
    cluster.start_worker()
    cluster.start_worker()
    await _start_hitl(count)
    cluster.wait_statuses("suspended", count, timeout=60)
    cluster.wait_for("every token", lambda: _tokens_ready(count), timeout=10)
    # Suspended runs hold nothing: no queue row, no lease, no message.
    assert cluster.sql("SELECT count(*) FROM queue")[0][0] == 0
    _resume_from_another_process(cluster, count)
    cluster.wait_statuses("completed", count, timeout=90)
    _check_hitl_results(cluster, count)


async def test_200_workflows_resumed_from_another_process(client: Cluster) -> None:
    await _scenario_resume_200(client)


async def test_200_workflows_with_rabbitmq(client: Cluster) -> None:
    assert client.broker.startswith("amqp://")
    await _scenario_resume_200(client)


async def test_every_message_delivered_twice_changes_nothing(
    client: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PWTEST_DUPLICATE", "1")
    client.env["PWTEST_DUPLICATE"] = "1"
    await _scenario_resume_200(client, count=60)
    # Every start and every resume was published twice (plus any sweeper re-publication).
    duplicated = cwf.counts("duplicated")
    assert sum(duplicated.values()) >= 120 and len(duplicated) == 60


async def test_sigkill_mid_step_and_while_waiting(client: Cluster) -> None:
    count = 24
    slow = {"PWTEST_SLOW": "1.5"}
    victim = client.start_worker(extra_env=slow)
    client.start_worker(extra_env=slow)
    await _start_hitl(count)
    # Kill a worker while steps are running, after their checkpoint was saved.
    client.wait_for(
        "steps in progress on the victim", lambda: len(cwf.counts(f"slow-{victim.pid}")) >= 2, timeout=30
    )
    client.kill(victim)
    client.start_worker(extra_env=slow)  # the replacement
    client.wait_statuses("suspended", count, timeout=60)
    client.wait_for("every token", lambda: _tokens_ready(count), timeout=10)
    recovered = client.sql("SELECT count(DISTINCT run_id) FROM events WHERE type = 'run_recovered'")[0][0]
    assert recovered >= 1  # the kill really interrupted turns
    # Kill another worker while every run waits, then resume them all.
    client.kill(client.alive()[0])
    client.start_worker(extra_env=slow)
    for i in range(count):
        await pyworkflow.resume_hook(cwf.token_of(i), {"ok": i})
    client.wait_statuses("completed", count, timeout=90)
    _check_hitl_results(client, count, killed_mid_step=True)


async def test_deadline_and_sleep_due_while_workers_are_down(client: Cluster) -> None:
    client.start_worker(concurrency=4)
    client.start_worker(concurrency=4)
    for key in ("d0", "d1", "d2"):
        await pyworkflow.start(cwf.deadline, key)
    for key in ("s0", "s1", "s2"):
        await pyworkflow.start(cwf.sleeper, key)
    client.wait_statuses("suspended", 6, timeout=30)
    client.stop_all()
    time.sleep(3)  # both deadlines (2 s) pass while nothing runs
    assert (
        client.sql("SELECT count(*) FROM waits WHERE status = 'pending' AND expires_at < %s", (time.time(),))[
            0
        ][0]
        == 6
    )
    client.start_worker(concurrency=4)
    client.start_worker(concurrency=4)
    client.wait_statuses("completed", 6, timeout=30)
    results = {orjson.dumps(orjson.loads(r[0])) for r in client.sql("SELECT result FROM runs")}
    expected = {orjson.dumps({"key": k, "timed_out": True}) for k in ("d0", "d1", "d2")}
    expected |= {orjson.dumps(f"slept {k}") for k in ("s0", "s1", "s2")}
    assert results == expected
    assert client.sql("SELECT count(*) FROM waits WHERE status = 'expired'")[0][0] == 6


async def test_a_run_whose_worker_keeps_dying_fails_after_max_crashes(client: Cluster) -> None:
    client.max_crashes = 2
    client.start_worker(concurrency=1)
    run_id = await pyworkflow.start(cwf.poison, "p")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if client.statuses().get("failed"):
            break
        if not client.alive():
            client.start_worker(concurrency=1)  # a supervisor restarting the dead worker
        time.sleep(0.2)
    run = await pyworkflow.get_workflow_run(run_id)
    assert run.status == pyworkflow.RunStatus.FAILED, client.logs()
    assert run.error is not None and run.error["type"] == "pyworkflow.WorkerCrashed"
    assert "died 3 times" in run.error["message"]
    assert cwf.counts("die") == {"p": 3}  # the first turn and max_crashes=2 retries


def _plain_celery_worker(cluster: Cluster, name: str) -> subprocess.Popen[bytes]:
    """A worker started as docs/deployment.md writes the plain Celery command: every setting from
    the environment (queue, lease and crash limit included), the sweeper run on its own."""
    env = {
        **cluster.env,
        "PYWORKFLOW_STORAGE": cluster.storage,
        "CELERY_BROKER_URL": cluster.broker,
        "PYWORKFLOW_IMPORTS": "cwf",
        "PYWORKFLOW_QUEUE": cluster.queue,
        "PYWORKFLOW_LEASE_TTL": str(cluster.lease_ttl),
        "PYWORKFLOW_MAX_CRASHES": str(cluster.max_crashes),
        "PWTEST_SLOW": "1.5",
    }
    cmd = [
        sys.executable, "-m", "celery", "-A", "pyworkflow.runtime._celery_worker", "worker",
        "-P", "threads", "-c", "8", "-Q", cluster.queue, "--without-gossip", "--without-mingle",
        "-l", "WARNING", "-n", f"{name}-{cluster.queue}@localhost",
    ]  # fmt: skip
    log = open(cluster.workdir / f"worker{len(cluster.workers)}.log", "ab")  # noqa: SIM115 - the process's
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=HERE.parents[2])
    log.close()
    cluster.workers.append(proc)  # killed at teardown
    return proc


async def test_a_worker_restarted_by_its_supervisor_picks_up_every_run(client: Cluster) -> None:
    """A worker process that dies (one did inside kombu's Redis transport when Redis restarted)
    loses no run: started again, as a supervisor does, it picks up the turns it was running and
    those published while no worker was up. The only worker of the queue, plain Celery."""
    sweeper_log = open(client.workdir / "worker-sweeper.log", "ab")  # noqa: SIM115 - the process's
    sweeper = subprocess.Popen(
        [sys.executable, "-m", "pyworkflow.cli", "sweeper", "--storage", client.storage,
         "--broker", client.broker, "--queue", client.queue, "--lease-ttl", str(client.lease_ttl),
         "--sweep-interval", "0.3", "--loglevel", "WARNING"],
        env=client.env, stdout=sweeper_log, stderr=sweeper_log, cwd=HERE.parents[2],
    )  # fmt: skip
    sweeper_log.close()
    client.workers.append(sweeper)
    first = _plain_celery_worker(client, "first")
    count = 6
    await _start_hitl(count)
    client.wait_for("steps in progress", lambda: len(cwf.counts(f"slow-{first.pid}")) >= 1, timeout=60)
    client.kill(first)  # it dies mid-step: no shutdown, no ack, its leases left in the database
    for i in range(count, 2 * count):  # published while no worker is up: they wait in the broker
        await pyworkflow.start(cwf.hitl, i)
    assert client.alive() == [sweeper]
    restarted = _plain_celery_worker(client, "restarted")
    client.wait_statuses("suspended", 2 * count, timeout=90)
    client.wait_for("every token", lambda: _tokens_ready(2 * count), timeout=10)
    recovered = client.sql("SELECT count(DISTINCT run_id) FROM events WHERE type = 'run_recovered'")[0][0]
    assert recovered >= 1  # the kill really interrupted turns, which the restarted worker resumed
    assert len(cwf.counts(f"slow-{restarted.pid}")) >= count  # the runs queued meanwhile, at least
    for i in range(2 * count):
        await pyworkflow.resume_hook(cwf.token_of(i), {"ok": i})
    client.wait_statuses("completed", 2 * count, timeout=90)
    _check_hitl_results(client, 2 * count, killed_mid_step=True)


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_worker_metrics_port_after_a_run(client: Cluster) -> None:
    """``pyworkflow worker --metrics-port``: scraped after a run that waited for a payload."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client.start_worker(concurrency=4, args=("--metrics-port", str(port)))
    await pyworkflow.start(cwf.hitl, 0)
    client.wait_statuses("suspended", 1, timeout=30)
    client.wait_for("the token", lambda: _tokens_ready(1), timeout=10)
    await pyworkflow.resume_hook(cwf.token_of(0), {"ok": 0})
    client.wait_statuses("completed", 1, timeout=30)

    def sample(
        samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
    ) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    # The state gauges come from the database (cached for a second): they come to equal it.
    client.wait_for(
        "the scraped runs to equal the database",
        lambda: (
            sample(_scrape(port), "pyworkflow_runs", status="completed", kind="workflow") == 1
            and client.statuses() == {"completed": 1}
        ),
        timeout=15,
    )
    samples = _scrape(port)
    assert sample(samples, "pyworkflow_store_up") == 1
    assert sample(samples, "pyworkflow_decision_to_running_seconds_count", kind="step_hook") == 1
    assert sample(samples, "pyworkflow_attempt_seconds_count", kind="workflow", outcome="suspended") == 1
    assert sample(samples, "pyworkflow_attempt_seconds_count", kind="workflow", outcome="completed") == 1
    assert sample(samples, "pyworkflow_step_seconds_count", outcome="completed") == 2  # prepare, review
    assert sample(samples, "pyworkflow_worker_permits") == 4
    assert sample(samples, "pyworkflow_worker_permits_in_use") == 0
    assert sample(samples, "pyworkflow_group_commit_batch_size_count") > 0
    assert sample(samples, "pyworkflow_waits_pending", kind="step_hook") == 0


async def test_workers_and_clients_carry_on_through_postgresql_restarts(
    restartable: tuple[Cluster, OwnPostgres],
) -> None:
    """PostgreSQL restarted (``pg_ctl restart -m fast``) twice under two Celery workers and this
    client: once while every run waits (every connection idle: the client's decisions right
    after it are taken at the first try), once while the resumed runs are being run (turns in
    flight lose their connections: their leases run out and the sweepers publish them again).
    Every run completes with its own result, no step's result is recorded twice, and no worker
    died."""
    cluster, pg = restartable
    pyworkflow.configure(
        storage=cluster.storage, runtime="celery", broker=cluster.broker, queue=cluster.queue
    )
    try:
        count = 30
        cluster.start_worker()
        cluster.start_worker()
        await _start_hitl(count)
        cluster.wait_statuses("suspended", count, timeout=60)
        cluster.wait_for("every token", lambda: _tokens_ready(count), timeout=10)
        await asyncio.to_thread(pg.restart)
        for i in range(count):
            await pyworkflow.resume_hook(cwf.token_of(i), {"ok": i})
        await asyncio.to_thread(pg.restart)
        cluster.wait_statuses("completed", count, timeout=90)
        _check_hitl_results(cluster, count, killed_mid_step=True)
        assert len(cluster.alive()) == 2, cluster.logs()
    finally:
        await pyworkflow.shutdown()
