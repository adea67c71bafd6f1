"""The agent transcript: following it through `astream`, and saving it in the step checkpoint.

The transcript is the graph state's `messages`. `astream` reports it in two ways: a `values` chunk holds
the whole state after each superstep, and an `updates` chunk holds what one task wrote, as soon as the
task finishes. When a human-input tool interrupts the tools superstep, the superstep never completes,
so the tool results of sibling calls that had already finished exist only in `updates` chunks; the
tracker adds them to the last complete state so they are not lost (and their tools do not run again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage, messages_to_dict
from langchain_core.messages.utils import messages_from_dict

__all__ = [
    "CHECKPOINT_VERSION",
    "PendingHumanInput",
    "StepState",
    "TranscriptTracker",
    "decode_state",
    "encode_state",
    "final_text",
    "unanswered_tool_calls",
]

CHECKPOINT_VERSION = 1


class TranscriptTracker:
    """Rebuilds the current transcript from `values` and `updates` stream chunks."""

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        self._state: list[BaseMessage] = list(messages)
        self._values: dict[str, Any] = {"messages": self._state}
        # Tool results written since the last complete state (the superstep in progress).
        self._in_flight: dict[str, ToolMessage] = {}

    def on_values(self, values: Any) -> None:
        if isinstance(values, Mapping) and isinstance(values.get("messages"), list):
            self._values = dict(values)
            self._state = list(values["messages"])
            self._in_flight.clear()

    def on_updates(self, updates: Any) -> None:
        if not isinstance(updates, Mapping):
            return
        for node_update in updates.values():
            if not isinstance(node_update, Mapping):
                continue
            written = node_update.get("messages")
            if isinstance(written, BaseMessage):
                written = [written]
            if not isinstance(written, list):
                continue
            for message in written:
                if isinstance(message, ToolMessage):
                    self._in_flight[message.tool_call_id] = message

    @property
    def values(self) -> dict[str, Any]:
        return self._values

    def transcript(self) -> list[BaseMessage]:
        """The last complete state plus the tool results of the interrupted superstep."""
        messages = list(self._state)
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        pending_ids = {call["id"] for call in unanswered_tool_calls(messages)}
        for call_id, message in self._in_flight.items():
            if call_id in pending_ids and call_id not in answered:
                messages.append(message)
        return messages


def unanswered_tool_calls(messages: Sequence[BaseMessage]) -> list[ToolCall]:
    """Tool calls of the last AI message that have no tool result yet, in the order the model made them."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage):
            answered = {m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolMessage)}
            return [call for call in message.tool_calls if call.get("id") not in answered]
    return []


def final_text(messages: Sequence[BaseMessage]) -> str:
    """Text of the last AI message: the agent's answer."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message.text
    return ""


@dataclass(frozen=True)
class PendingHumanInput:
    """A human-input tool call waiting for its hook."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    hook_name: str
    timeout: str | float | None


@dataclass
class StepState:
    """What the agent step keeps in its step checkpoint between executions."""

    messages: list[BaseMessage]
    pending: PendingHumanInput | None = None
    # Hooks created so far in this conversation; part of every hook name so that each human-input
    # call gets its own hook even when the step re-executes (the per-step call counter restarts).
    hooks_created: int = 0
    # Text chunks already handed to the visitor by the generator form.
    streamed: list[Any] = field(default_factory=list)


def encode_state(state: StepState) -> dict[str, Any]:
    pending = state.pending
    return {
        "version": CHECKPOINT_VERSION,
        # LangChain's own serialization, so tool-call ids and content blocks round-trip exactly.
        "messages": messages_to_dict(state.messages),
        "pending_tool_call_id": pending.tool_call_id if pending else None,
        "hook_args": pending.args if pending else None,
        "pending_tool_name": pending.tool_name if pending else None,
        "hook_name": pending.hook_name if pending else None,
        "hook_timeout": pending.timeout if pending else None,
        "hooks_created": state.hooks_created,
        "streamed": list(state.streamed),
    }


def decode_state(checkpoint: Mapping[str, Any]) -> StepState:
    version = checkpoint.get("version")
    if version != CHECKPOINT_VERSION:
        raise ValueError(f"unsupported agent step checkpoint version {version!r}")
    pending = None
    if checkpoint["pending_tool_call_id"] is not None:
        pending = PendingHumanInput(
            tool_call_id=checkpoint["pending_tool_call_id"],
            tool_name=checkpoint["pending_tool_name"],
            args=dict(checkpoint["hook_args"] or {}),
            hook_name=checkpoint["hook_name"],
            timeout=checkpoint["hook_timeout"],
        )
    return StepState(
        messages=messages_from_dict(checkpoint["messages"]),
        pending=pending,
        hooks_created=int(checkpoint["hooks_created"]),
        streamed=list(checkpoint.get("streamed", [])),
    )
