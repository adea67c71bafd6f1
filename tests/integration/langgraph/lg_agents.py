"""Agents, steps and workflows for the LangGraph agent-step tests.

Imported by name (`lg_agents`) in the test process and in the subprocesses of the SIGKILL test, so the
workflows resolve to the same `lg_agents:<name>` everywhere. Every observable effect (model calls,
side-effecting tools, questions delivered to the visitor, credit checks, text shown to the visitor) is
appended to a file under $LG_COUNTS_DIR, so counts survive the process that made them.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ToolRetryMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from pyworkflow import step, workflow
from pyworkflow.contrib.langgraph import (
    HumanInputRequest,
    ScriptedChatModel,
    human_input_tool,
    run_agent,
    stream_agent,
)

# -- cross-process observations -------------------------------------------------------------------


def _dir() -> Path:
    return Path(os.environ["LG_COUNTS_DIR"])


def record(kind: str, value: Any = None) -> None:
    with (_dir() / f"{kind}.jsonl").open("a") as f:
        f.write(json.dumps(value) + "\n")
        f.flush()
        os.fsync(f.fileno())


def recorded(kind: str, directory: Path | None = None) -> list[Any]:
    path = (directory or _dir()) / f"{kind}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# -- tools ------------------------------------------------------------------------------------------


@tool
def open_ticket(subject: str) -> str:
    """Open a support ticket (a side effect that must happen once)."""
    record("open_ticket", subject)
    return "Ticket T-100 opened."


@tool
async def lookup_order(order_number: str) -> str:
    """Look up an order's delivery status."""
    if delay := float(os.environ.get("LG_LOOKUP_DELAY", "0")):
        record("lookup_started", os.getpid())
        await asyncio.sleep(delay)  # a slow API: the SIGKILL test kills the process in here
    record("lookup_order", order_number)
    return f"Order {order_number} has shipped and arrives on Friday."


ask_visitor = human_input_tool(
    "ask_visitor",
    description="Ask the visitor a question and wait for the answer.",
    timeout="1h",
)
ask_visitor_briefly = human_input_tool(
    "ask_visitor",
    description="Ask the visitor a question; give up after one second.",
    timeout="1s",
    no_response_message="The visitor did not respond.",
)


class ToolErrorIgnoreMiddleware(AgentMiddleware):
    """The spec's middleware: every exception a tool raises becomes an error ToolMessage."""

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        try:
            return await handler(request)
        except Exception as exc:
            record("swallowed", repr(exc))
            return ToolMessage(
                content=f"tool error: {exc}", tool_call_id=request.tool_call["id"], status="error"
            )


class CountToolInvocations(AgentMiddleware):
    """Innermost: records each real invocation of a tool (a retry would show up twice)."""

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        record("tool_invocation", request.tool_call["name"])
        return await handler(request)


# -- scripted model turns ------------------------------------------------------------------------


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def last_tool_result(messages: list[BaseMessage], name: str | None = None) -> ToolMessage:
    results = [m for m in messages if isinstance(m, ToolMessage) and (name is None or m.name == name)]
    return results[-1]


def look_up_the_answer(messages: list[BaseMessage]) -> AIMessage:
    order_number = last_tool_result(messages, "ask_visitor").text.strip()
    return AIMessage(
        "", id="ai-3", tool_calls=[call("lookup_order", "call_lookup", order_number=order_number)]
    )


def final_answer(messages: list[BaseMessage]) -> AIMessage:
    return AIMessage(f"Thanks! {last_tool_result(messages, 'lookup_order').text}", id="ai-4")


def model(*turns: Any) -> ScriptedChatModel:
    return ScriptedChatModel(turns=list(turns), on_call=_record_model_call)


def _record_model_call(messages: list[BaseMessage]) -> None:
    record("model", {"pid": os.getpid(), "messages": len(messages)})


SUPPORT_TURNS = (
    AIMessage(
        "I'll open a ticket.", id="ai-1", tool_calls=[call("open_ticket", "call_ticket", subject="order")]
    ),
    AIMessage(
        "Let me ask you.",
        id="ai-2",
        tool_calls=[call("ask_visitor", "call_ask", question="What is your order number?")],
    ),
    look_up_the_answer,
    final_answer,
)

support_agent = create_agent(model(*SUPPORT_TURNS), tools=[open_ticket, lookup_order, ask_visitor])


# -- step callbacks --------------------------------------------------------------------------------


def deliver_question(request: HumanInputRequest) -> None:
    record(
        "on_created",
        {"token": request.token, "question": request.question, "tool_call_id": request.tool_call_id},
    )


async def charge_credit() -> None:
    record("credit", "charged")


# -- workflows -------------------------------------------------------------------------------------


@step(max_retries=0)
async def support_step(question: str) -> str:
    result = await run_agent(
        support_agent, question, on_human_input=deliver_question, on_first_pass=charge_credit
    )
    return result.text


@workflow
async def support_chat(question: str) -> str:
    result: str = await support_step(question)
    return result


# Test 3: the visitor never answers.
timeout_agent = create_agent(
    model(
        AIMessage("", id="ai-1", tool_calls=[call("ask_visitor", "call_ask", question="Order number?")]),
        lambda messages: AIMessage(
            f"Sorry, I could not check your order ({last_tool_result(messages).text})", id="ai-2"
        ),
    ),
    tools=[ask_visitor_briefly],
)


@step(max_retries=0)
async def timeout_step(question: str) -> str:
    return (await run_agent(timeout_agent, question, on_human_input=deliver_question)).text


@workflow
async def timeout_chat(question: str) -> str:
    result: str = await timeout_step(question)
    return result


# Test 4: tool-call ids and content blocks that must survive the checkpoint.
RICH_QUESTION = HumanMessage(
    content=[
        {"type": "text", "text": "Where is this order?"},
        {"type": "image", "url": "https://example.com/receipt.png", "id": "block-img"},
    ],
    id="human-1",
)
RICH_TURN = AIMessage(
    content=[
        {"type": "text", "text": "Checking your receipt."},
        {"type": "text", "text": "I need one detail.", "id": "block-2"},
    ],
    id="ai-rich",
    tool_calls=[call("ask_visitor", "call_Zq8-xY_1", question="Which order number?")],
    additional_kwargs={"provider_field": {"nested": [1, 2, 3]}},
    response_metadata={"model_name": "scripted", "finish_reason": "tool_calls"},
)
RICH_MODEL_INPUTS: list[list[BaseMessage]] = []


def _record_rich_call(messages: list[BaseMessage]) -> None:
    _record_model_call(messages)
    RICH_MODEL_INPUTS.append(messages)


rich_agent = create_agent(
    ScriptedChatModel(
        turns=[
            RICH_TURN,
            lambda messages: AIMessage(f"Order {last_tool_result(messages).text} found.", id="ai-end"),
        ],
        on_call=_record_rich_call,
    ),
    tools=[ask_visitor],
)


@step(max_retries=0)
async def rich_step() -> str:
    return (await run_agent(rich_agent, [RICH_QUESTION], on_human_input=deliver_question)).text


@workflow
async def rich_chat() -> str:
    result: str = await rich_step()
    return result


# Test 5: tool middleware that would swallow or retry an Exception.
ASK_THEN_ANSWER = (
    AIMessage("", id="ai-1", tool_calls=[call("ask_visitor", "call_ask", question="Order number?")]),
    lambda messages: AIMessage(f"Got it: {last_tool_result(messages).text}", id="ai-2"),
)
MIDDLEWARE_AGENTS = {
    "tool_retry": create_agent(
        model(*ASK_THEN_ANSWER),
        tools=[ask_visitor],
        middleware=[
            ToolRetryMiddleware(max_retries=3, initial_delay=0, jitter=False),
            CountToolInvocations(),
        ],
    ),
    "tool_error_ignore": create_agent(
        model(*ASK_THEN_ANSWER),
        tools=[ask_visitor],
        middleware=[ToolErrorIgnoreMiddleware(), CountToolInvocations()],
    ),
}


@step(max_retries=0)
async def middleware_step(kind: str) -> str:
    return (await run_agent(MIDDLEWARE_AGENTS[kind], "hi", on_human_input=deliver_question)).text


@workflow
async def middleware_chat(kind: str) -> str:
    result: str = await middleware_step(kind)
    return result


# Several human-input calls: two in one turn (parallel), then one more in a later turn.
def after_parallel(messages: list[BaseMessage]) -> AIMessage:
    answers = {m.tool_call_id: m.text for m in messages if isinstance(m, ToolMessage)}
    return AIMessage(
        f"Order {answers['call_order']} for {answers['call_email']}.",
        id="ai-2",
        tool_calls=[call("ask_visitor", "call_confirm", question="Shall I cancel it?")],
    )


many_agent = create_agent(
    model(
        AIMessage(
            "Two questions.",
            id="ai-1",
            tool_calls=[
                call("ask_visitor", "call_order", question="Order number?"),
                call("ask_visitor", "call_email", question="Email address?"),
            ],
        ),
        after_parallel,
        lambda messages: AIMessage(f"Done, answer was {last_tool_result(messages).text}.", id="ai-3"),
    ),
    tools=[ask_visitor],
)


@step(max_retries=0)
async def many_step() -> str:
    return (await run_agent(many_agent, "cancel my order", on_human_input=deliver_question)).text


@workflow
async def many_chat() -> str:
    result: str = await many_step()
    return result


# A human-input call next to ordinary tool calls in one turn: a slow async tool and a slow sync
# tool (run in a thread); both must finish, once, and keep their results.
@tool("lookup_order")
async def lookup_order_slowly(order_number: str) -> str:
    """Look up the delivery status of an order (a slow API)."""
    await asyncio.sleep(0.3)
    record("lookup_order", order_number)
    return f"Order {order_number} has shipped."


@tool("open_ticket")
def open_ticket_slowly(subject: str) -> str:
    """Open a support ticket (a slow blocking API)."""
    time.sleep(0.3)
    record("open_ticket", subject)
    return "Ticket T-100 opened."


mixed_agent = create_agent(
    model(
        AIMessage(
            "",
            id="ai-1",
            tool_calls=[
                call("lookup_order", "call_lookup", order_number="17"),
                call("ask_visitor", "call_ask", question="Anything else?"),
                call("open_ticket", "call_ticket", subject="order 17"),
            ],
        ),
        lambda messages: AIMessage("All done.", id="ai-2"),
    ),
    tools=[lookup_order_slowly, ask_visitor, open_ticket_slowly],
)


@step(max_retries=0)
async def mixed_step() -> list[dict[str, Any]]:
    result = await run_agent(mixed_agent, "status of 17?", on_human_input=deliver_question)
    return [
        {
            "type": m.type,
            "tool_call_id": getattr(m, "tool_call_id", None),
            "status": getattr(m, "status", None),
        }
        for m in result.messages
    ]


@workflow
async def mixed_chat() -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = await mixed_step()
    return result


# Generator form: text streams to the visitor before and after the hook.
streaming_agent = create_agent(model(*SUPPORT_TURNS), tools=[open_ticket, lookup_order, ask_visitor])


@step(is_generator=True, max_retries=0)
async def streaming_step(question: str):  # type: ignore[no-untyped-def]
    async for chunk in stream_agent(
        streaming_agent, question, on_human_input=deliver_question, on_first_pass=charge_credit
    ):
        yield chunk


@workflow
async def streaming_chat(question: str) -> str:
    answer = ""
    async for chunk in streaming_step(question):
        record("visitor_saw", chunk)  # what the visitor's chat window receives
        if chunk["type"] == "answer":
            answer = chunk["text"]
    return answer


# A model that fails once after the visitor answered: the retried step continues from the checkpoint.
def look_up_after_a_hiccup(messages: list[BaseMessage]) -> AIMessage:
    if not recorded("model_failed"):
        record("model_failed", True)
        raise RuntimeError("provider hiccup")
    return look_up_the_answer(messages)


flaky_agent = create_agent(
    model(SUPPORT_TURNS[0], SUPPORT_TURNS[1], look_up_after_a_hiccup, final_answer),
    tools=[open_ticket, lookup_order, ask_visitor],
)


@step(max_retries=1, retry_delay=0.01)
async def flaky_step(question: str) -> str:
    result = await run_agent(
        flaky_agent, question, on_human_input=deliver_question, on_first_pass=charge_credit
    )
    return result.text


@workflow
async def flaky_chat(question: str) -> str:
    result: str = await flaky_step(question)
    return result


# The answer must match a schema: resume_hook refuses anything else.
ask_for_digits = human_input_tool(
    "ask_visitor",
    description="Ask the visitor for an order number.",
    answer_schema={"type": "string", "pattern": "^[0-9]+$"},
)
schema_agent = create_agent(model(*ASK_THEN_ANSWER), tools=[ask_for_digits])


@step(max_retries=0)
async def schema_step() -> str:
    return (await run_agent(schema_agent, "hi", on_human_input=deliver_question)).text


@workflow
async def schema_chat() -> str:
    result: str = await schema_step()
    return result


# Generator form, and an attempt that fails after streaming some text.
@tool("lookup_order")
async def lookup_order_down_once(order_number: str) -> str:
    """Look up the delivery status of an order (the service is down the first time)."""
    if not recorded("lookup_failed"):
        record("lookup_failed", True)
        raise RuntimeError("order service unavailable")
    result: str = await lookup_order.ainvoke({"order_number": order_number})
    return result


def say_and_look_up(messages: list[BaseMessage]) -> AIMessage:
    turn = look_up_the_answer(messages)
    turn.content = "Looking it up."
    return turn


flaky_streaming_agent = create_agent(
    model(SUPPORT_TURNS[0], SUPPORT_TURNS[1], say_and_look_up, final_answer),
    tools=[open_ticket, lookup_order_down_once, ask_visitor],
)


@step(is_generator=True, max_retries=1, retry_delay=0.01)
async def flaky_streaming_step(question: str):  # type: ignore[no-untyped-def]
    async for chunk in stream_agent(flaky_streaming_agent, question, on_human_input=deliver_question):
        yield chunk


@workflow
async def flaky_streaming_chat(question: str) -> str:
    answer = ""
    async for chunk in flaky_streaming_step(question):
        record("visitor_saw", chunk)
        if chunk["type"] == "answer":
            answer = chunk["text"]
    return answer


# A hand-built LangGraph graph (no create_agent): model node, ToolNode that handles tool errors.
def _custom_graph() -> Any:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    llm = model(*ASK_THEN_ANSWER)

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", ToolNode([ask_visitor, lookup_order], handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


custom_graph = _custom_graph()


@step(max_retries=0)
async def custom_graph_step() -> str:
    return (await run_agent(custom_graph, "hi", on_human_input=deliver_question)).text


@workflow
async def custom_graph_chat() -> str:
    result: str = await custom_graph_step()
    return result


# The first pass continues from the transcript as a later execution would restore it.
FIRST_MODEL_INPUTS: list[dict[str, Any]] = []

json_form_agent = create_agent(
    ScriptedChatModel(
        turns=[AIMessage("Noted.", id="ai-1")],
        on_call=lambda messages: FIRST_MODEL_INPUTS.append(messages[0].additional_kwargs),
    ),
    tools=[ask_visitor],
)


@step(max_retries=0)
async def json_form_step() -> str:
    question = HumanMessage("Which one?", id="human-1", additional_kwargs={"choices": ("a", ("b", 2))})
    result = await run_agent(
        json_form_agent, [question], on_human_input=deliver_question, on_first_pass=charge_credit
    )
    return result.text


@workflow
async def json_form_chat() -> str:
    result: str = await json_form_step()
    return result
