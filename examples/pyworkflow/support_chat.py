"""A support chat whose agent asks the visitor for an order number mid-loop, durably.

    python -m examples.pyworkflow.support_chat [--db PATH] [--answer TEXT]

The agent is a real LangChain `create_agent` graph; the model is scripted so the example runs offline
(swap in any chat model, e.g. `init_chat_model("openai:gpt-4o-mini")`, for the real thing). When the
model calls the `ask_visitor` tool, the step checkpoints the transcript and suspends on a step hook:
the run holds no task or thread while the visitor types. `resume_hook(token, answer)` (from any
process: an HTTP handler, a CLI) re-executes the step, which continues the agent from the checkpointed
transcript, so no model turn or tool runs twice.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

import pyworkflow
from pyworkflow import step, workflow
from pyworkflow.contrib.langgraph import HumanInputRequest, ScriptedChatModel, human_input_tool, run_agent

MODEL_CALLS: list[int] = []
VISITOR_CHAT: asyncio.Queue[HumanInputRequest] = asyncio.Queue()


@tool
async def lookup_order(order_number: str) -> str:
    """Look up the delivery status of an order."""
    return f"Order {order_number} has shipped and arrives on Friday."


ask_visitor = human_input_tool(
    "ask_visitor",
    description="Ask the visitor a question and wait for the reply.",
    timeout="24h",
    no_response_message="The visitor did not respond.",
)


def _tool_result(messages: list[BaseMessage], name: str) -> str:
    return [m for m in messages if isinstance(m, ToolMessage) and m.name == name][-1].text


# The scripted model: what a real model would plausibly answer at each point of the conversation.
model = ScriptedChatModel(
    turns=[
        AIMessage(
            "Let me check that for you.",
            tool_calls=[
                {"name": "ask_visitor", "args": {"question": "What is your order number?"}, "id": "call_1"}
            ],
        ),
        lambda messages: AIMessage(
            "",
            tool_calls=[
                {
                    "name": "lookup_order",
                    "args": {"order_number": _tool_result(messages, "ask_visitor")},
                    "id": "call_2",
                }
            ],
        ),
        lambda messages: AIMessage(_tool_result(messages, "lookup_order")),
    ],
    on_call=lambda messages: MODEL_CALLS.append(len(messages)),
)
agent = create_agent(
    model, tools=[lookup_order, ask_visitor], system_prompt="You are a helpful support agent."
)


async def show_question_to_visitor(request: HumanInputRequest) -> None:
    # In a web app: push the question and the token to the visitor's chat window.
    VISITOR_CHAT.put_nowait(request)


@step(max_retries=0)
async def support_agent(question: str) -> str:
    result = await run_agent(agent, question, on_human_input=show_question_to_visitor)
    return result.text


@workflow
async def support_chat(question: str) -> str:
    answer: str = await support_agent(question)
    return answer


async def main(db: Path, answer: str) -> None:
    pyworkflow.configure(storage=str(db))  # a bare path is taken literally
    print(f"store: {db}")
    print("visitor: Where is my order?")
    run_id = await pyworkflow.start(support_chat, "Where is my order?")

    request = await asyncio.wait_for(VISITOR_CHAT.get(), 30)
    print(f"agent asks the visitor: {request.question}  (hook token {request.token[:10]}...)")
    run = await pyworkflow.wait_for_run(run_id, 30, until=("suspended",))
    print(f"run {run_id}: {run.status} (nothing is held while the visitor types)")

    print(f"visitor answers: {answer}")
    await pyworkflow.resume_hook(request.token, answer)
    run = await pyworkflow.wait_for_run(run_id, 30)
    print(f"run {run_id}: {run.status}")
    print(f"agent: {run.result}")
    print(f"model calls: {len(MODEL_CALLS)} (one per turn; none repeated after the resume)")
    await pyworkflow.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file (default: a fresh temporary file)")
    parser.add_argument("--answer", default="4711", help="what the scripted visitor replies")
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp(prefix="pyworkflow-")) / "support.db"
    asyncio.run(main(db, args.answer))
