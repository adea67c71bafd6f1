"""docs/langgraph.md's snippets run as the page shows them, with the names the page leaves to the
reader (a model, a tool, the chat window, a credit check) defined here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool

import pyworkflow
from doc_snippets import as_coroutine, code_blocks
from pyworkflow.contrib.langgraph import ScriptedChatModel


@tool
async def lookup_order(order_number: str) -> str:
    """Look up the delivery status of an order."""
    return f"Order {order_number} has shipped."


async def test_the_pattern_and_the_resume(tmp_path: Path) -> None:
    shown: list[tuple[str, str]] = []
    credits: list[str] = []

    async def push_to_chat_window(token: str, question: str) -> None:
        shown.append((token, question))

    def check_credits() -> None:
        credits.append("checked")

    model = ScriptedChatModel(
        turns=[
            AIMessage("", tool_calls=[{"name": "ask_visitor", "args": {"question": "Order?"}, "id": "c1"}]),
            AIMessage(
                "", tool_calls=[{"name": "lookup_order", "args": {"order_number": "4711"}, "id": "c2"}]
            ),
            AIMessage("Order 4711 has shipped."),
        ]
    )
    namespace: dict[str, Any] = {
        "__name__": "langgraph_doc_snippet",
        "model": model,
        "lookup_order": lookup_order,
        "push_to_chat_window": push_to_chat_window,
        "check_credits": check_credits,
    }
    pattern, resume = code_blocks("docs/langgraph.md", "The pattern", "python")
    exec(pattern, namespace)
    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'chat.db'}")
    try:
        run_id = await pyworkflow.start(namespace["support_chat"], "Where is my order?")
        await pyworkflow.wait_for_run(run_id, 30, until=("suspended",))
        assert [question for _, question in shown] == ["Order?"]
        resumed: dict[str, Any] = {"pyworkflow": pyworkflow, "token": shown[0][0]}
        exec(as_coroutine(resume), resumed)
        await resumed["_snippet"]()
        run = await pyworkflow.wait_for_run(run_id, 30)
    finally:
        await pyworkflow.shutdown()
    assert (run.status, run.result, credits) == ("completed", "Order 4711 has shipped.", ["checked"])
