"""The transcript codec and tracker: what the agent step saves in its checkpoint and restores."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, messages_to_dict

from pyworkflow.contrib._langgraph_transcript import (
    PendingHumanInput,
    StepState,
    TranscriptTracker,
    decode_state,
    encode_state,
    final_text,
    unanswered_tool_calls,
)


def _call(name: str, call_id: str, **args: object) -> dict[str, object]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


RICH = [
    SystemMessage("You are a support agent.", id="sys"),
    HumanMessage(
        content=[
            {"type": "text", "text": "Where is it?"},
            {"type": "image", "url": "https://example.com/r.png", "id": "img-1"},
        ],
        id="h1",
    ),
    AIMessage(
        content=[{"type": "text", "text": "Checking."}, {"type": "text", "text": "One moment.", "id": "b2"}],
        id="ai1",
        tool_calls=[
            _call("lookup", "call_a-1", order="7"),
            _call("ask_visitor", "call_b-2", question="Email?"),
        ],
        additional_kwargs={"vendor": {"x": [1, 2]}},
        response_metadata={"finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    ),
    ToolMessage("Order 7 shipped.", tool_call_id="call_a-1", name="lookup", id="t1", artifact={"raw": 1}),
]


def test_state_round_trips_exactly_through_json() -> None:
    state = StepState(
        messages=list(RICH),
        pending=PendingHumanInput("call_b-2", "ask_visitor", {"question": "Email?"}, "ask_visitor-0", "24h"),
        hooks_created=1,
        streamed=[{"type": "text", "text": "Checking."}],
    )
    saved = json.loads(json.dumps(encode_state(state)))  # what the store keeps is JSON

    assert saved["pending_tool_call_id"] == "call_b-2"
    assert saved["hook_args"] == {"question": "Email?"}
    restored = decode_state(saved)
    assert messages_to_dict(restored.messages) == messages_to_dict(RICH)
    assert restored.messages[2].tool_calls == RICH[2].tool_calls  # type: ignore[attr-defined]
    assert restored.messages[1].content == RICH[1].content
    assert restored.pending == state.pending
    assert (restored.hooks_created, restored.streamed) == (1, state.streamed)


def test_unknown_checkpoint_version_is_refused() -> None:
    saved = encode_state(StepState(messages=[]))
    saved["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        decode_state(saved)


def test_unanswered_tool_calls_are_those_of_the_last_ai_message_without_a_result() -> None:
    assert [c["id"] for c in unanswered_tool_calls(RICH)] == ["call_b-2"]
    assert unanswered_tool_calls(RICH[:2]) == []
    assert unanswered_tool_calls([*RICH, AIMessage("done")]) == []


def test_tracker_keeps_sibling_results_of_an_interrupted_superstep() -> None:
    tracker = TranscriptTracker(RICH[:2])
    tracker.on_values({"messages": RICH[:3]})  # the model turn completed
    # the tools superstep: the lookup finished (its task reported), then the interrupt came
    tracker.on_updates({"tools": {"messages": [RICH[3]]}})
    assert messages_to_dict(tracker.transcript()) == messages_to_dict(RICH)


def test_tracker_ignores_results_already_in_the_state_and_foreign_ids() -> None:
    tracker = TranscriptTracker([])
    tracker.on_values({"messages": list(RICH)})
    tracker.on_updates({"tools": {"messages": [RICH[3]]}})
    tracker.on_updates({"tools": {"messages": ToolMessage("?", tool_call_id="unknown")}})
    tracker.on_updates({"model": None})
    assert messages_to_dict(tracker.transcript()) == messages_to_dict(RICH)


def test_a_complete_superstep_supersedes_in_flight_results() -> None:
    tracker = TranscriptTracker([])
    tracker.on_values({"messages": RICH[:3]})
    tracker.on_updates({"tools": {"messages": [RICH[3]]}})
    tracker.on_values({"messages": RICH})
    assert len(tracker.transcript()) == len(RICH)


def test_final_text_is_the_last_ai_text() -> None:
    assert final_text([*RICH, AIMessage("It ships Friday.")]) == "It ships Friday."
    assert final_text(RICH[:2]) == ""
