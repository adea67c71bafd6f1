"""The pyworkflow workload of the crash trials (local runtime and Celery workers import it).

The spec's ``review_step`` shape between two plain steps: ``prepare`` (a plain step), ``review``
(saves a checkpoint, waits on a step hook, saves again), ``publish``; every third run sleeps
durably between the first two, so timers are crashed and recovered too. Every side effect is a
ledger line (:mod:`tests.reliability.ledger`), keyed by the run's ``key`` argument.
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
from typing import Any

from tests.reliability.ledger import Ledger

from pyworkflow import load_step_checkpoint, save_step_checkpoint, sleep, step, step_hook, workflow

# A process serving these runs (a Celery worker imports this module) writes every thread's stack
# to its stderr on SIGUSR1: the harness asks for them when a trial's runs make no progress in time.
if hasattr(signal, "SIGUSR1"):
    faulthandler.register(signal.SIGUSR1, all_threads=True)

#: The ledger names that are side effects of a run: at most 1 + the crashes that hit it.
EFFECTS = ("prepare", "setup", "token", "publish")
#: What every completed run did at least once (``token``, ``on_created``, may not have run: the
#: reviewer decides from the inbox, possibly before ``on_created`` was called).
REQUIRED = ("prepare", "setup", "publish")
#: The review step's checkpoint, as the store names it (scope = its step key).
CHECKPOINT = "review#1"


def _ledger() -> Ledger:
    return Ledger.from_env()


@step
async def prepare(key: str) -> dict[str, Any]:
    _ledger().record(key, "prepare")
    return {"key": key}


@step
async def review(key: str) -> dict[str, Any]:
    state = await load_step_checkpoint()
    if state is None:
        _ledger().record(key, "setup")  # the expensive work the checkpoint protects
        state = {"stage": 1}
        revision = await save_step_checkpoint(state)
        _ledger().record(key, "checkpoint", name=CHECKPOINT, revision=revision)
    answer = await step_hook("approve", timeout="1h", on_created=lambda token: _ledger().record(key, "token"))
    if state["stage"] == 1:
        revision = await save_step_checkpoint({"stage": 2, "answer": answer})
        _ledger().record(key, "checkpoint", name=CHECKPOINT, revision=revision)
    return {"answer": answer}


@step
async def publish(key: str, reviewed: dict[str, Any]) -> dict[str, Any]:
    _ledger().record(key, "publish")
    return {"key": key, "published": True, **reviewed}


@workflow
async def trial(key: str, nap: float = 0.0) -> dict[str, Any]:
    await prepare(key)
    if nap:
        await sleep(nap)
    reviewed = await review(key)
    return await publish(key, reviewed)


@step
async def hold(key: str, seconds: float) -> str:
    _ledger().record(key, "hold")
    await asyncio.sleep(seconds)  # a lease trial freezes the worker here
    return key


@workflow
async def held(key: str, seconds: float = 4.0) -> str:
    """One slow step, for the lease trials."""
    return await hold(key, seconds)
