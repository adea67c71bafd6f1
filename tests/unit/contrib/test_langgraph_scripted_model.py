"""ScriptedChatModel: replies by position in the conversation, so re-running a conversation shows."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from pyworkflow.contrib.langgraph import ScriptedChatModel


async def test_reply_depends_on_the_conversation_not_on_the_call_count() -> None:
    seen: list[list[BaseMessage]] = []
    model = ScriptedChatModel(
        turns=[AIMessage("first"), lambda messages: AIMessage(f"after {messages[-1].text}")],
        on_call=seen.append,
    )
    assert (await model.ainvoke([HumanMessage("hi")])).text == "first"
    assert (await model.ainvoke([HumanMessage("hi")])).text == "first"  # same position, same reply
    later = [HumanMessage("hi"), AIMessage("first"), ToolMessage("42", tool_call_id="c1")]
    assert (await model.ainvoke(later)).text == "after 42"
    assert [len(messages) for messages in seen] == [1, 1, 3]


async def test_streaming_reassembles_the_scripted_message() -> None:
    turn = AIMessage(
        "Let me ask you.",
        tool_calls=[{"name": "ask", "args": {"question": "n?"}, "id": "c1", "type": "tool_call"}],
    )
    model = ScriptedChatModel(turns=[turn])
    chunks = [chunk async for chunk in model.astream([HumanMessage("hi")])]
    assert [c.text for c in chunks if c.text] == ["Let", " me", " ask", " you."]
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    assert merged.text == "Let me ask you."
    assert merged.tool_calls == turn.tool_calls


async def test_running_past_the_script_is_an_error() -> None:
    model = ScriptedChatModel(turns=[AIMessage("only")])
    with pytest.raises(IndexError, match="1 turns; turn 2"):
        await model.ainvoke([HumanMessage("hi"), AIMessage("only"), HumanMessage("more")])


def test_turns_must_be_messages_or_callables() -> None:
    with pytest.raises(ValueError, match="AIMessage or a callable"):
        ScriptedChatModel(turns=["not a message"])
