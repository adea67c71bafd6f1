"""LangGraph / LangChain agents that ask a human mid-loop, durably (the hook-as-tool pattern).

    from langchain.agents import create_agent
    from pyworkflow import step
    from pyworkflow.contrib.langgraph import human_input_tool, run_agent

    ask_visitor = human_input_tool("ask_visitor", description="Ask the visitor a question.", timeout="24h")
    agent = create_agent(model, tools=[lookup_order, ask_visitor])

    @step
    async def support_agent(question: str) -> str:
        result = await run_agent(agent, question, on_human_input=send_question_to_visitor)
        return result.text

When the model calls `ask_visitor`, the tool raises `HumanInputInterrupt` (a `BaseException`: tool
middleware cannot swallow it), the graph stops, and the step checkpoints the transcript and suspends on a
step hook. `resume_hook(token, answer)` re-executes the step, which restores the transcript, adds the
answer as the tool result and continues the agent without re-running earlier model turns or tools.
See docs/langgraph.md. Requires the `pyworkflow-atfgraph[langgraph]` extra.
"""

from ._langgraph_step import (
    INTERRUPTED_TOOL_MESSAGE,
    AgentChunk,
    AgentResult,
    HumanInputRequest,
    run_agent,
    stream_agent,
)
from ._langgraph_testing import ScriptedChatModel
from ._langgraph_tools import (
    DEFAULT_NO_RESPONSE_MESSAGE,
    HumanInputInterrupt,
    HumanInputTool,
    human_input_tool,
)

__all__ = [
    "DEFAULT_NO_RESPONSE_MESSAGE",
    "INTERRUPTED_TOOL_MESSAGE",
    "AgentChunk",
    "AgentResult",
    "HumanInputInterrupt",
    "HumanInputRequest",
    "HumanInputTool",
    "ScriptedChatModel",
    "human_input_tool",
    "run_agent",
    "stream_agent",
]
