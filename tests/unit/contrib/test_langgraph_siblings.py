"""The sibling gate: a human-input call waits for the ordinary calls of its turn, and only when that
cannot deadlock."""

from __future__ import annotations

import asyncio

from pyworkflow.contrib._langgraph_siblings import SiblingGate


def _start(task_id: str, call_id: str, name: str) -> dict[str, object]:
    return {
        "id": task_id,
        "name": "tools",
        "input": [{"name": name, "args": {}, "id": call_id}],
        "triggers": (),
    }


def _finish(task_id: str) -> dict[str, object]:
    return {"id": task_id, "name": "tools", "error": None, "result": {}, "interrupts": []}


async def test_waits_until_every_ordinary_sibling_finished() -> None:
    gate = SiblingGate({"ask_visitor"})
    for event in (
        _start("t1", "lookup", "lookup_order"),
        _start("t2", "ask", "ask_visitor"),
        _start("t3", "ticket", "open_ticket"),
    ):
        gate.on_task(event)
    waiting = asyncio.create_task(gate.wait_for_siblings("ask"))

    await asyncio.sleep(0.01)
    gate.on_task(_finish("t1"))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # open_ticket is still running
    gate.on_task(_finish("t3"))
    await asyncio.wait_for(waiting, 1)


async def test_does_not_wait_when_the_call_shares_a_task_with_its_siblings() -> None:
    """A ToolNode running the whole turn in one task: its siblings cannot finish first."""
    gate = SiblingGate({"ask_visitor"})
    gate.on_task({"id": "t1", "name": "tools", "input": {"messages": []}, "triggers": ()})
    await asyncio.wait_for(gate.wait_for_siblings("ask"), 1)


async def test_other_human_input_calls_are_not_waited_for() -> None:
    gate = SiblingGate({"ask_visitor"})
    gate.on_task(_start("t1", "ask-1", "ask_visitor"))
    gate.on_task(_start("t2", "ask-2", "ask_visitor"))
    await asyncio.wait_for(gate.wait_for_siblings("ask-1"), 1)


async def test_a_new_superstep_forgets_the_previous_turn() -> None:
    gate = SiblingGate({"ask_visitor"})
    gate.on_task(_start("t1", "lookup", "lookup_order"))
    gate.on_superstep()
    gate.on_task(_start("t2", "ask", "ask_visitor"))
    await asyncio.wait_for(gate.wait_for_siblings("ask"), 1)
