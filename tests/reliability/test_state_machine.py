"""The stateful property test (issue 11, B.4): Hypothesis drives the real engine (pyworkflow's
local runtime on a real SQLite file, or PostgreSQL with PYWORKFLOW_TEST_STORE=postgresql) through
random sequences of: start a run (here, or in a second process that is SIGKILLed at a random
moment, or frozen with SIGSTOP past its lease), decide its hook (again with the same payload
and with a conflicting one, with any token it was given), jump the engine clock forward and
back, and restart the runtime (close and reopen the store). Every rule ends with the engine
settled (nothing runnable); after every rule a model of what must hold is checked against the
database.

Examples: ``EXAMPLES`` (times RELIABILITY_SCALE) of at most ``STEPS`` rules each, the same ones
every run unless ``RELIABILITY_RANDOM=1``; ``RELIABILITY_STATS=FILE`` appends what each example
did (rules, decisions, runs, invariant checks) to FILE as a JSON line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _sm_flows
from _races_harness import REPO, scale
from atfg_harness import create_pg_database, drop_pg_database
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import pyworkflow
from pyworkflow import _api, _clock
from pyworkflow.store import RunStatus, StepStatus, WaitKind, WaitStatus

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
EXAMPLES = 8
STEPS = 8
LEASE_TTL = 30.0
SETTLE_SECONDS = 30.0
#: How long the takeover of a frozen process's run may take (its lease is already over).
FROZEN_SECONDS = 10.0
PAYLOADS = ("yes", "no")
WORKER = Path(__file__).resolve().parent / "_sm_worker.py"


#: What the examples did (``RELIABILITY_STATS=FILE`` appends each example's counts to FILE).
COUNTS: Counter[str] = Counter()


def event(what: str) -> None:
    COUNTS[what] += 1
    hypothesis_event(what)


@dataclass
class ModelRun:
    run_id: str
    #: the payload the one accepted decision brought, or None
    accepted: Any = None
    refused: Counter[str] = field(default_factory=Counter)


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="pw-machine-"))
        self.url = create_pg_database() if ON_POSTGRES else f"sqlite:///{self.folder / 'engine.db'}"
        self.offset = 0.0
        self.max_clock = time.time()
        _clock.set_clock(self.now)
        self.loop = asyncio.new_event_loop()
        self.runs: dict[str, ModelRun] = {}
        self.interruptions = 0
        self.children: list[subprocess.Popen[str]] = []
        self.configure()

    # -- plumbing ---------------------------------------------------------------------------------

    def now(self) -> float:
        value = time.time() + self.offset
        self.max_clock = max(self.max_clock, value)
        return value

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def configure(self) -> None:
        pyworkflow.configure(storage=self.url, poll_interval=0.02, lease_ttl=LEASE_TTL)
        self.run(_api.get_runtime())

    def settle(self, seconds: float = SETTLE_SECONDS) -> None:
        """Run the engine until nothing is runnable: every run suspended or ended, nothing due."""
        store = pyworkflow.get_store()

        async def settled() -> bool:
            now = self.now()
            for model in self.runs.values():
                run = await store.get_run(model.run_id)
                assert run is not None, f"run {model.run_id} is lost"
                if run.status not in (RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.FAILED):
                    return False
            due = await store.next_due()
            return not await store.has_ready(now=now) and (due is None or due > now)

        async def wait() -> None:
            deadline = time.monotonic() + seconds
            while not await settled():
                assert time.monotonic() < deadline, "the engine did not settle"
                await asyncio.sleep(0.02)

        self.run(wait())

    def locked_by_another(self) -> bool:
        if ON_POSTGRES:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
                ).fetchone()
            return row is not None and row[0] > 0
        conn = sqlite3.connect(self.folder / "engine.db", timeout=0.5, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()

    def tokens(self, key: str) -> list[str]:
        path = self.folder / f"tokens-{key}"
        return path.read_text().split() if path.exists() else []

    def hook_of(self, model: ModelRun) -> Any:
        state = self.run(pyworkflow.get_store().load_state(model.run_id))
        hooks = [w for w in state.waits.values() if w.kind == WaitKind.HOOK]
        assert len(hooks) <= 1, hooks
        return hooks[0] if hooks else None

    def child(self, key: str) -> tuple[subprocess.Popen[str], str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WORKER.parent), str(REPO / "src")])}
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), self.url, repr(self.offset), str(self.folder), key],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.children.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["started"], line
        return proc, line[1]

    def end_child(self, proc: subprocess.Popen[str], offset: float) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
        self.max_clock = max(self.max_clock, time.time() + offset)  # the most its clock read
        self.interruptions += 1

    # -- rules ------------------------------------------------------------------------------------

    @initialize()
    def first_run(self) -> None:
        """Every example has a run to decide, restart, and jump the clock under."""
        self.start()

    @rule()
    def start(self) -> None:
        event("rule: start")
        key = f"r{len(self.runs)}"
        run_id = self.run(pyworkflow.start(_sm_flows.machine_flow, key, str(self.folder)))
        self.runs[key] = ModelRun(run_id)
        self.settle()

    @rule(delay=st.floats(0, 1.5))
    def start_in_a_process_killed_at_random(self, delay: float) -> None:
        event("rule: start_in_a_process_killed_at_random")
        key = f"r{len(self.runs)}"
        proc, run_id = self.child(key)
        self.runs[key] = ModelRun(run_id)
        self.run(asyncio.sleep(delay))  # both processes' runtimes at work meanwhile
        self.end_child(proc, self.offset)
        self.settle()

    @rule(delay=st.floats(0, 0.5))
    def start_in_a_process_frozen_past_its_lease(self, delay: float) -> None:
        event("rule: start_in_a_process_frozen_past_its_lease")
        key = f"r{len(self.runs)}"
        proc, run_id = self.child(key)
        time.sleep(delay)
        proc.send_signal(signal.SIGSTOP)  # it holds the run's first turn, or has just ended it
        self.runs[key] = ModelRun(run_id)
        offset = self.offset
        if self.locked_by_another():
            # Frozen inside a write transaction, it holds the database's lock (SQLite's one
            # writer, PostgreSQL's row locks): nobody can take over until it dies.
            event("a frozen process held the database's lock")
            self.end_child(proc, offset)
            self.settle()
            return
        self.offset += LEASE_TTL + 5  # its lease runs out; this process's runtime takes over
        self.settle(FROZEN_SECONDS)
        self.end_child(proc, offset)

    @precondition(lambda self: any(self.tokens(k) for k in self.runs))
    @rule(data=st.data())
    def decide(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k in self.runs if self.tokens(k))))
        token = data.draw(st.sampled_from(self.tokens(key)))
        payload = data.draw(st.sampled_from(PAYLOADS))
        model = self.runs[key]
        before = self.hook_of(model)
        now = self.now()
        try:
            self.run(pyworkflow.resume_hook(token, payload))
            outcome = "accepted"
        except pyworkflow.HookError as exc:
            outcome = type(exc).__name__
        if before.status == WaitStatus.RECEIVED:  # a duplicate or a conflicting decision
            assert outcome == "HookAlreadyReceivedError", (outcome, before)
        elif before.status == WaitStatus.EXPIRED or now >= before.expires_at:
            assert outcome == "HookExpiredError", (outcome, before, now)
        elif self.max_clock < before.expires_at:
            assert outcome == "accepted", (outcome, before, now)
        else:  # the clock went past the deadline and back: expired only if it was acted on
            assert outcome in ("accepted", "HookExpiredError"), outcome
        event(f"decision: {outcome}")
        if outcome == "accepted":
            assert model.accepted is None, model
            model.accepted = payload
        else:
            model.refused[outcome] += 1
        self.settle()

    @rule(seconds=st.sampled_from([-4000.0, -700.0, -1.0, 1.0, 700.0, 4000.0]))
    def jump_the_clock(self, seconds: float) -> None:
        event("rule: jump_the_clock")
        self.offset += seconds
        self.settle()

    @rule()
    def restart(self) -> None:
        event("rule: restart")
        self.run(pyworkflow.shutdown())  # stops the runtime and closes the store
        self.interruptions += 1
        self.configure()
        self.settle()

    # -- what must hold after every rule ----------------------------------------------------------

    @invariant()
    def the_database_agrees_with_the_model(self) -> None:
        COUNTS["invariant checks"] += 1
        store = pyworkflow.get_store()
        known = {m.run_id for m in self.runs.values()}
        stored = {r.id for r in self.run(store.list_runs(limit=1000))}
        assert stored == known, stored ^ known  # no run lost, none made up
        ledger = (
            (self.folder / "ledger").read_text().splitlines() if (self.folder / "ledger").exists() else []
        )
        executions = Counter(tuple(line.split()[:2]) for line in ledger)
        revisions: dict[str, list[int]] = {}
        for line in ledger:
            kind, key, *rest = line.split()
            if kind == "prepare":
                first, second = map(int, rest)
                assert second == first + 1, line
                revisions.setdefault(key, []).extend((first, second))
        for key, model in self.runs.items():
            run = self.run(store.get_run(model.run_id))
            assert run is not None
            state = self.run(store.load_state(model.run_id))
            for name in ("prepare", "finish"):
                done = [s for k, s in state.steps.items() if k.startswith(f"{name}#")]
                count = executions[(name, key)]
                # at most once, plus once per crash or restart that may have cut it short
                assert count <= 1 + self.interruptions, (key, name, count, self.interruptions)
                if done and done[0].status == StepStatus.COMPLETED:
                    assert count >= 1, (key, name)
            # checkpoint revisions strictly increasing across re-executions, none lost
            mine = revisions.get(key, [])
            assert mine == sorted(set(mine)), (key, mine)
            prepared = state.steps.get("prepare#1")
            if prepared is not None and prepared.status == StepStatus.COMPLETED:
                assert not state.checkpoints, (key, state.checkpoints)  # deleted with the result
            waits = list(state.waits.values())
            for wait in waits:  # no deadline acted on before the engine clock reached it
                if wait.status == WaitStatus.EXPIRED or (
                    wait.kind == WaitKind.TIMER and wait.status != WaitStatus.PENDING
                ):
                    assert wait.expires_at is not None and self.max_clock >= wait.expires_at, wait
            hooks = [w for w in waits if w.kind == WaitKind.HOOK]
            received = [w for w in hooks if w.status == WaitStatus.RECEIVED]
            assert len(received) == (0 if model.accepted is None else 1), (key, hooks, model)
            if received:
                assert pyworkflow._serde.loads(received[0].payload) == model.accepted
            events = Counter(e.type for e in self.run(store.get_events(model.run_id)))
            assert events["wait_received"] <= 1, events
            if run.status == RunStatus.COMPLETED:
                expired = any(w.status == WaitStatus.EXPIRED for w in hooks)
                assert pyworkflow._serde.loads(run.result) == ("timeout" if expired else model.accepted)
            assert run.status != RunStatus.FAILED, (key, run.error)
        if not ON_POSTGRES:
            conn = sqlite3.connect(self.folder / "engine.db")
            try:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            finally:
                conn.close()

    def teardown(self) -> None:
        if os.environ.get("RELIABILITY_STATS"):
            with open(os.environ["RELIABILITY_STATS"], "a") as f:
                f.write(json.dumps({**COUNTS, "runs": len(self.runs)}) + "\n")
        COUNTS.clear()
        for proc in self.children:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        try:
            self.run(pyworkflow.shutdown())
        finally:
            self.loop.close()
            _clock.set_clock(None)
            if ON_POSTGRES:
                drop_pg_database(self.url)


EngineMachine.TestCase.settings = settings(
    max_examples=EXAMPLES * scale(),
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=os.environ.get("RELIABILITY_RANDOM") != "1",
    database=None,
)
TestEngineMachine = EngineMachine.TestCase
