"""The human-input interrupt gets out of the graph whatever tool middleware is in the way.

These run the real `create_agent` graph (and a hand-built LangGraph graph) with a scripted model; the
step machinery is not involved: what is proven here is that the interrupt reaches the caller of
`astream`, which is where the agent step catches it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ToolErrorMiddleware, ToolRetryMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from pyworkflow.contrib.langgraph import HumanInputInterrupt, ScriptedChatModel, human_input_tool

ask_visitor = human_input_tool("ask_visitor", description="Ask the visitor.", timeout="1h")


class ToolErrorIgnoreMiddleware(AgentMiddleware):
    """The spec's middleware: any exception raised by a tool becomes an error ToolMessage."""

    def __init__(self) -> None:
        super().__init__()
        self.swallowed: list[Exception] = []

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        try:
            return await handler(request)
        except Exception as exc:
            self.swallowed.append(exc)
            return ToolMessage(
                content=f"tool failed: {exc}", tool_call_id=request.tool_call["id"], status="error"
            )


class CountToolCalls(AgentMiddleware):
    """Innermost middleware: counts how many times each tool was really invoked."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        self.calls.append(request.tool_call["name"])
        return await handler(request)


@tool
def flaky_lookup(order: str) -> str:
    """Look an order up (always fails: stands in for an ordinary tool error)."""
    raise ValueError(f"lookup of {order} failed")


def _turn(*calls: tuple[str, dict[str, Any], str], text: str = "") -> AIMessage:
    return AIMessage(
        content=text, tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls]
    )


def _model(calls: list[list[BaseMessage]], *turns: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(turns=list(turns), on_call=calls.append)


ASK = _turn(("ask_visitor", {"question": "Your order number?"}, "call_ask"), text="Let me ask.")


async def _drain(agent: Any) -> list[Any]:
    seen: list[Any] = []
    async for chunk in agent.astream(
        {"messages": [HumanMessage("Where is my order?")]}, stream_mode="updates"
    ):
        seen.append(chunk)
    return seen


@pytest.mark.parametrize(
    "middleware_name",
    ["none", "tool_retry", "tool_retry_on_failure_continue", "tool_error_ignore", "tool_error_langchain"],
)
async def test_interrupt_escapes_tool_middleware(middleware_name: str) -> None:
    counter = CountToolCalls()
    choices: dict[str, list[AgentMiddleware]] = {
        "none": [],
        "tool_retry": [ToolRetryMiddleware(max_retries=3, initial_delay=0, jitter=False)],
        "tool_retry_on_failure_continue": [
            ToolRetryMiddleware(
                max_retries=2, initial_delay=0, on_failure="continue", retry_on=lambda e: True
            )
        ],
        "tool_error_ignore": [ToolErrorIgnoreMiddleware()],
        "tool_error_langchain": [ToolErrorMiddleware(on_error=lambda exc, request: f"failed: {exc}")],
    }
    outer = choices[middleware_name]
    model_calls: list[list[BaseMessage]] = []
    agent = create_agent(
        _model(model_calls, ASK, AIMessage("must not be reached")),
        tools=[ask_visitor],
        middleware=[*outer, counter],
    )

    with pytest.raises(HumanInputInterrupt) as raised:
        await _drain(agent)

    assert raised.value.tool_name == "ask_visitor"
    assert raised.value.tool_call_id == "call_ask"
    assert raised.value.tool_args == {"question": "Your order number?"}
    assert counter.calls == ["ask_visitor"], "the interrupt was retried"
    assert len(model_calls) == 1, "the graph went on after the interrupt"
    for middleware in outer:
        if isinstance(middleware, ToolErrorIgnoreMiddleware):
            assert middleware.swallowed == []


async def test_error_ignore_middleware_does_swallow_ordinary_exceptions() -> None:
    """Control: the middleware above really turns Exceptions into messages, so the test is not vacuous."""
    ignore = ToolErrorIgnoreMiddleware()
    model_calls: list[list[BaseMessage]] = []
    agent = create_agent(
        _model(model_calls, _turn(("flaky_lookup", {"order": "7"}, "call_1")), AIMessage("sorry")),
        tools=[flaky_lookup],
        middleware=[ignore],
    )
    await _drain(agent)
    assert [type(exc) for exc in ignore.swallowed] == [ValueError]
    assert len(model_calls) == 2
    tool_results = [m for m in model_calls[1] if isinstance(m, ToolMessage)]
    assert tool_results[0].status == "error"


async def test_interrupt_escapes_a_hand_built_graph_with_tool_error_handling() -> None:
    """A plain LangGraph graph whose ToolNode converts every tool exception into a message."""
    model_calls: list[list[BaseMessage]] = []
    model = _model(model_calls, ASK, AIMessage("must not be reached"))

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", ToolNode([ask_visitor, flaky_lookup], handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()

    with pytest.raises(HumanInputInterrupt):
        await _drain(graph)
    assert len(model_calls) == 1


def test_interrupt_is_not_an_exception_and_pickles() -> None:
    import pickle

    interrupt = HumanInputInterrupt("ask_visitor", "call_1", {"question": "q"})
    assert not isinstance(interrupt, Exception)
    copy = pickle.loads(pickle.dumps(interrupt))
    assert (copy.tool_name, copy.tool_call_id, copy.tool_args) == ("ask_visitor", "call_1", {"question": "q"})


def test_sync_invocation_also_interrupts() -> None:
    with pytest.raises(HumanInputInterrupt) as raised:
        ask_visitor.invoke(
            {"name": "ask_visitor", "args": {"question": "q"}, "id": "c9", "type": "tool_call"}
        )
    assert raised.value.tool_call_id == "c9"


async def test_run_agent_refuses_a_graph_with_its_own_checkpointer() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from pyworkflow import ConfigurationError
    from pyworkflow.contrib.langgraph import run_agent

    agent = create_agent(_model([], ASK), tools=[ask_visitor], checkpointer=InMemorySaver())
    with pytest.raises(ConfigurationError, match="without a checkpointer"):
        await run_agent(agent, "hi", on_human_input=lambda request: None)
