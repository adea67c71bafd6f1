"""The hook-as-tool agent step on the real engine: a real SQLite file, the local runtime, real
LangGraph agents built with `create_agent`, and a scripted model (offline). Tests 1 and 3-5 of issue 6,
plus several human-input calls, parallel calls and the generator form; test 2 (SIGKILL) has its own file.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import threading
import traceback
from typing import Any

import lg_agents
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, messages_to_dict

import pyworkflow
from pyworkflow import ConfigurationError, RunStatus
from pyworkflow.contrib.langgraph import HumanInputInterrupt, run_agent

TIMEOUT = 30


async def _suspended(run_id: str) -> None:
    run = await pyworkflow.wait_for_run(run_id, TIMEOUT, until=("suspended", "completed", "failed"))
    assert run.status == RunStatus.SUSPENDED, (run.status, run.error)


async def _completed(run_id: str) -> Any:
    run = await pyworkflow.wait_for_run(run_id, TIMEOUT)
    assert run.status == RunStatus.COMPLETED, (run.status, run.error)
    return run.result


def _count(kind: str) -> int:
    return len(lg_agents.recorded(kind))


def _questions() -> list[dict[str, Any]]:
    return lg_agents.recorded("on_created")


async def _question_number(n: int) -> dict[str, Any]:
    """The n-th question delivered to the visitor (1-based), once it is there."""
    async with asyncio.timeout(TIMEOUT):
        while len(_questions()) < n:
            await asyncio.sleep(0.02)
    return _questions()[n - 1]


def _resume_from_another_process(env: dict[str, str], db_url: str, token: str, payload: Any) -> None:
    code = (
        "import asyncio, json, sys, pyworkflow\n"
        "pyworkflow.configure(storage=sys.argv[1])\n"
        "asyncio.run(pyworkflow.resume_hook(sys.argv[2], json.loads(sys.argv[3])))\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, db_url, token, json.dumps(payload)], env=env, check=True, timeout=60
    )


def _held_by_the_agent() -> list[str]:
    """Stacks of threads and tasks that are inside the agent, the agent step, or a run's turn."""
    held: list[str] = []
    for thread_id, frame in sys._current_frames().items():
        if thread_id != threading.get_ident():
            stack = "".join(traceback.format_stack(frame))
            if "langgraph" in stack or "langchain" in stack or "contrib/_langgraph" in stack:
                held.append(stack)
    for task in asyncio.all_tasks():
        if task is asyncio.current_task():
            continue
        out = io.StringIO()
        task.print_stack(file=out)
        stack = out.getvalue()
        if (
            task.get_name().startswith("pyworkflow-turn")
            or "langgraph" in stack
            or "contrib/_langgraph" in stack
        ):
            held.append(f"{task.get_name()}: {stack}")
    return held


async def test_answer_from_another_process_completes_the_run(
    store: str, subprocess_env: dict[str, str]
) -> None:
    """Test 1: the agent asks, the run suspends holding nothing, another process answers."""
    run_id = await pyworkflow.start(lg_agents.support_chat, "Where is my order?")
    await _suspended(run_id)

    assert _held_by_the_agent() == []
    [question] = _questions()
    assert question["question"] == "What is your order number?"
    assert question["tool_call_id"] == "call_ask"
    assert (_count("model"), _count("open_ticket"), _count("lookup_order")) == (2, 1, 0)

    _resume_from_another_process(subprocess_env, store, question["token"], "4711")

    assert await _completed(run_id) == "Thanks! Order 4711 has shipped and arrives on Friday."
    assert lg_agents.recorded("lookup_order") == ["4711"]  # the model used the visitor's reply
    assert _count("model") == 4  # two turns before the hook, two after: none taken twice
    assert _count("open_ticket") == 1
    assert len(_questions()) == 1
    assert _count("credit") == 1


async def test_no_answer_before_the_deadline_takes_the_did_not_respond_path(store: str) -> None:
    """Test 3: the hook times out; the model sees "did not respond" and the run completes by itself."""
    run_id = await pyworkflow.start(lg_agents.timeout_chat, "Where is my order?")
    await _suspended(run_id)

    result = await _completed(run_id)

    assert result == "Sorry, I could not check your order (The visitor did not respond.)"
    assert len(_questions()) == 1
    assert _count("model") == 2


async def test_tool_call_ids_and_content_blocks_round_trip_through_the_checkpoint(store: str) -> None:
    """Test 4: the transcript the model continues from equals the one it had before the suspension."""
    lg_agents.RICH_MODEL_INPUTS.clear()
    before: list[Any] = []
    try:
        async for values in lg_agents.rich_agent.astream(
            {"messages": [lg_agents.RICH_QUESTION]}, stream_mode="values"
        ):
            before = values["messages"]
    except HumanInputInterrupt:
        pass
    assert [m.type for m in before] == ["human", "ai"]
    lg_agents.RICH_MODEL_INPUTS.clear()

    run_id = await pyworkflow.start(lg_agents.rich_chat)
    await _suspended(run_id)
    [question] = _questions()
    await pyworkflow.resume_hook(question["token"], "A-981")
    assert await _completed(run_id) == "Order A-981 found."

    first_turn, after_resume = lg_agents.RICH_MODEL_INPUTS
    assert messages_to_dict(first_turn) == messages_to_dict(before[:1])
    restored, answer = after_resume[:-1], after_resume[-1]
    assert messages_to_dict(restored) == messages_to_dict(before)
    assert isinstance(restored[1], AIMessage)
    assert restored[1].tool_calls[0]["id"] == "call_Zq8-xY_1"
    assert restored[1].content == lg_agents.RICH_TURN.content
    assert restored[1].additional_kwargs == {"provider_field": {"nested": [1, 2, 3]}}
    assert restored[0].content == lg_agents.RICH_QUESTION.content
    assert isinstance(answer, ToolMessage)
    assert (answer.tool_call_id, answer.content, answer.name) == ("call_Zq8-xY_1", "A-981", "ask_visitor")


@pytest.mark.parametrize("kind", ["tool_retry", "tool_error_ignore"])
async def test_tool_middleware_cannot_swallow_the_suspension(store: str, kind: str) -> None:
    """Test 5: ToolRetryMiddleware does not retry it, ToolErrorIgnoreMiddleware does not turn it into
    an error message: the run suspends, and the answer completes it."""
    run_id = await pyworkflow.start(lg_agents.middleware_chat, kind)
    await _suspended(run_id)
    assert lg_agents.recorded("tool_invocation") == ["ask_visitor"]
    assert lg_agents.recorded("swallowed") == []
    assert _count("model") == 1

    [question] = _questions()
    await pyworkflow.resume_hook(question["token"], "55")

    assert await _completed(run_id) == "Got it: 55"
    assert lg_agents.recorded("tool_invocation") == ["ask_visitor"]
    assert _count("model") == 2


async def test_each_human_input_call_gets_its_own_hook(store: str) -> None:
    """Two calls in one model turn, then one in a later turn: three hooks, answered one by one."""
    run_id = await pyworkflow.start(lg_agents.many_chat)
    answers = {"call_order": "A-1", "call_email": "ada@example.com", "call_confirm": "yes"}
    for number, expected in enumerate(["call_order", "call_email", "call_confirm"], start=1):
        question = await _question_number(number)
        await _suspended(run_id)
        assert question["tool_call_id"] == expected
        await pyworkflow.resume_hook(question["token"], answers[expected])
        # the answered hook cannot be answered with something else
        with pytest.raises(pyworkflow.HookAlreadyReceivedError):
            await pyworkflow.resume_hook(question["token"], "different")

    assert await _completed(run_id) == "Done, answer was yes."
    assert [q["tool_call_id"] for q in _questions()] == ["call_order", "call_email", "call_confirm"]
    assert len({q["token"] for q in _questions()}) == 3
    assert _count("model") == 3  # the parallel turn was not re-run to reach the second question


async def test_ordinary_tools_called_with_a_human_input_tool_finish_first(store: str) -> None:
    """In one turn: a slow async tool, the question, a slow sync tool. The question waits for both;
    each runs once and keeps its result, and the model continues with all three results."""
    run_id = await pyworkflow.start(lg_agents.mixed_chat)
    question = await _question_number(1)
    await _suspended(run_id)
    assert lg_agents.recorded("lookup_order") == ["17"]
    assert lg_agents.recorded("open_ticket") == ["order 17"]
    await pyworkflow.resume_hook(question["token"], "no")

    transcript = await _completed(run_id)
    results = {m["tool_call_id"]: m["status"] for m in transcript if m["type"] == "tool"}
    assert results == {"call_lookup": "success", "call_ask": "success", "call_ticket": "success"}
    assert lg_agents.recorded("lookup_order") == ["17"]
    assert lg_agents.recorded("open_ticket") == ["order 17"]
    assert _count("model") == 2


async def test_generator_step_streams_each_chunk_to_the_visitor_once(store: str) -> None:
    run_id = await pyworkflow.start(lg_agents.streaming_chat, "Where is my order?")
    await _suspended(run_id)
    seen_before = [c["text"] for c in lg_agents.recorded("visitor_saw")]
    assert "".join(seen_before) == "I'll open a ticket.Let me ask you."  # streamed before the hook
    [question] = _questions()

    await pyworkflow.resume_hook(question["token"], "4711")

    answer = "Thanks! Order 4711 has shipped and arrives on Friday."
    assert await _completed(run_id) == answer
    seen = lg_agents.recorded("visitor_saw")
    assert seen[: len(seen_before)] == [{"type": "text", "text": t} for t in seen_before]
    assert "".join(c["text"] for c in seen[len(seen_before) : -1]) == answer
    assert seen[-1] == {"type": "answer", "text": answer}
    assert (_count("model"), _count("open_ticket"), _count("credit"), len(_questions())) == (4, 1, 1, 1)


async def test_run_agent_outside_a_step_is_refused(store: str) -> None:
    with pytest.raises(ConfigurationError):
        await run_agent(lg_agents.support_agent, [HumanMessage("hi")], on_human_input=lambda request: None)
    assert _count("model") == 0


async def test_a_failed_attempt_after_the_answer_retries_from_the_checkpoint(store: str) -> None:
    """The model fails once after the visitor answered; the retried step does not start over."""
    run_id = await pyworkflow.start(lg_agents.flaky_chat, "Where is my order?")
    question = await _question_number(1)
    await _suspended(run_id)
    await pyworkflow.resume_hook(question["token"], "4711")

    assert await _completed(run_id) == "Thanks! Order 4711 has shipped and arrives on Friday."
    # turn 3 was asked twice (failed, retried); turns 1 and 2 once each
    assert [call["messages"] for call in lg_agents.recorded("model")] == [1, 3, 5, 5, 7]
    assert (_count("open_ticket"), _count("credit"), len(_questions())) == (1, 1, 1)


async def test_answer_schema_is_enforced_by_resume_hook(store: str) -> None:
    run_id = await pyworkflow.start(lg_agents.schema_chat)
    question = await _question_number(1)
    await _suspended(run_id)

    with pytest.raises(pyworkflow.PayloadValidationError):
        await pyworkflow.resume_hook(question["token"], "not a number")
    await pyworkflow.resume_hook(question["token"], "42")

    assert await _completed(run_id) == "Got it: 42"


async def test_generator_step_retry_after_streaming_keeps_the_visitors_text_intact(store: str) -> None:
    """An attempt fails after streaming "Looking it up."; the retry continues from the checkpoint and
    streams its own text in full: nothing from before the hook is repeated, nothing is cut."""
    run_id = await pyworkflow.start(lg_agents.flaky_streaming_chat, "Where is my order?")
    question = await _question_number(1)
    await _suspended(run_id)
    await pyworkflow.resume_hook(question["token"], "4711")

    answer = "Thanks! Order 4711 has shipped and arrives on Friday."
    assert await _completed(run_id) == answer
    seen = lg_agents.recorded("visitor_saw")
    assert "".join(c["text"] for c in seen[:-1]) == (
        "I'll open a ticket.Let me ask you." + "Looking it up." + "Looking it up." + answer
    )
    assert seen[-1] == {"type": "answer", "text": answer}
    assert [call["messages"] for call in lg_agents.recorded("model")] == [1, 3, 5, 5, 7]


async def test_a_hand_built_langgraph_graph_works_the_same(store: str) -> None:
    run_id = await pyworkflow.start(lg_agents.custom_graph_chat)
    question = await _question_number(1)
    await _suspended(run_id)
    await pyworkflow.resume_hook(question["token"], "31")

    assert await _completed(run_id) == "Got it: 31"
    assert _count("model") == 2


async def test_after_a_checkpoint_the_agent_continues_from_the_transcript_as_stored(store: str) -> None:
    """`on_first_pass` checkpoints the input transcript; the model then sees it as a re-execution
    would restore it (its JSON form: tuples are lists), not the live objects of this pass."""
    lg_agents.FIRST_MODEL_INPUTS.clear()
    run_id = await pyworkflow.start(lg_agents.json_form_chat)
    assert await _completed(run_id) == "Noted."
    assert lg_agents.FIRST_MODEL_INPUTS == [{"choices": ["a", ["b", 2]]}]
    assert repr(lg_agents.FIRST_MODEL_INPUTS[0]) == "{'choices': ['a', ['b', 2]]}"
