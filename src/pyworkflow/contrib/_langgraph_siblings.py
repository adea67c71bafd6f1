"""Letting the ordinary tool calls of a turn finish before a human-input call stops the graph.

When the model calls a human-input tool and an ordinary tool in the same turn, `create_agent` runs
each call as its own task of one superstep. If the human-input tool raised at once, LangGraph would
cancel the ordinary call mid-way (or, for a sync tool running in a thread, let it finish and drop its
result): a side effect with no result in the transcript. So the human-input tool first waits until its
siblings have finished; their results reach the transcript through the stream, and the interrupt then
stops a superstep in which nothing else is running.

The gate learns the superstep's tasks from the `tasks` stream mode. A call waits only when it runs in
a task of its own (a `Send` per call): when one `ToolNode` task runs all calls of a turn together, the
siblings cannot finish before the whole node does, so waiting would deadlock; it raises at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container, Mapping
from typing import Any

__all__ = ["GATE_CONFIG_KEY", "SiblingGate"]

# Where run_agent puts the gate in the graph's `configurable`, for the human-input tool to find.
GATE_CONFIG_KEY = "pyworkflow_human_input_gate"


def _single_tool_call(task_input: Any) -> Mapping[str, Any] | None:
    """The tool call of a task that runs exactly one (create_agent's `Send("tools", [call])`)."""
    if isinstance(task_input, list) and len(task_input) == 1:
        call = task_input[0]
        if isinstance(call, Mapping) and isinstance(call.get("id"), str) and "name" in call:
            return call
    return None


class SiblingGate:
    def __init__(self, human_tool_names: Container[str]) -> None:
        self._human = human_tool_names
        self._own_task: dict[str, str] = {}  # tool call id -> tool name, for calls with a task of their own
        self._task_call: dict[str, str] = {}  # task id -> tool call id
        self._finished: set[str] = set()
        self._changed = asyncio.Event()

    def on_superstep(self) -> None:
        """A superstep completed: the next tasks belong to a new turn."""
        self._own_task.clear()
        self._task_call.clear()
        self._finished.clear()

    def on_task(self, event: Any) -> None:
        """A `tasks` stream event: a task starting (with its input) or finishing."""
        if not isinstance(event, Mapping) or not isinstance(event.get("id"), str):
            return
        if "input" in event:
            call = _single_tool_call(event["input"])
            if call is not None:
                self._own_task[call["id"]] = str(call["name"])
                self._task_call[event["id"]] = call["id"]
        elif event["id"] in self._task_call:
            self._finished.add(self._task_call[event["id"]])
            self._changed.set()

    def _siblings_done(self) -> bool:
        return all(
            call_id in self._finished for call_id, name in self._own_task.items() if name not in self._human
        )

    async def wait_for_siblings(self, tool_call_id: str) -> None:
        if tool_call_id not in self._own_task:
            return
        while not self._siblings_done():
            # No await between the check and clear(): a finish reported in between cannot be missed.
            self._changed.clear()
            await self._changed.wait()
