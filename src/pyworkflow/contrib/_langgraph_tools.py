"""Human-input tools: tools an agent calls to ask a person, answered through a step hook.

A human-input tool never produces a result inside the graph. Calling it raises `HumanInputInterrupt`,
a `BaseException`, so that tool middleware (`ToolRetryMiddleware`, error-to-message middleware, the
`ToolNode` error handler), all of which catch `Exception`, cannot swallow it or retry it. The interrupt
ends the graph run; the agent step helper catches it outside the graph, at the step boundary, where
suspending is safe.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from typing import Any, NoReturn

from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from ._langgraph_siblings import GATE_CONFIG_KEY, SiblingGate

__all__ = [
    "DEFAULT_NO_RESPONSE_MESSAGE",
    "HumanInputInterrupt",
    "HumanInputTool",
    "human_input_tool",
]

DEFAULT_NO_RESPONSE_MESSAGE = "The visitor did not respond in time."

# BaseTool.arun/run receive the tool call id but do not pass it on to _run/_arun unless the schema
# declares an injected argument; a context variable carries it without changing the user's schema.
_current_tool_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pyworkflow_human_input_tool_call_id", default=None
)


class HumanInputInterrupt(BaseException):
    """The agent called a human-input tool; the graph run stops so the step can suspend.

    Derives from `BaseException` (like `asyncio.CancelledError`) because it is control flow, not an
    error: `except Exception` in tool middleware or retry wrappers must let it through.
    """

    def __init__(self, tool_name: str, tool_call_id: str | None, tool_args: dict[str, Any]) -> None:
        super().__init__(tool_name, tool_call_id, tool_args)
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.tool_args = tool_args

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.tool_name, self.tool_call_id, self.tool_args))

    def __str__(self) -> str:
        return f"human-input tool {self.tool_name!r} called (tool_call_id={self.tool_call_id!r})"


class _QuestionArgs(BaseModel):
    question: str = Field(description="The question to ask the visitor, in one short sentence.")


def _default_format_answer(payload: Any) -> str:
    if isinstance(payload, str):
        return payload
    if isinstance(payload, BaseModel):
        return payload.model_dump_json()
    return json.dumps(payload, ensure_ascii=False)


class HumanInputTool(BaseTool):
    """A tool the agent calls to ask a person; the answer arrives through `resume_hook`.

    Pass it to `create_agent(tools=[...])` or a `ToolNode` like any tool. Run the agent with
    `run_agent` / `stream_agent` inside a `@step`: outside of them the tool has no result, and calling
    it raises `HumanInputInterrupt`.
    """

    hook_timeout: str | float | None = None
    """How long the visitor has to answer ("24h", "90s", seconds); `None` waits forever."""

    no_response_message: str = DEFAULT_NO_RESPONSE_MESSAGE
    """Tool result the model sees when the hook times out."""

    format_answer: Callable[[Any], str] = _default_format_answer
    """Turns the `resume_hook` payload into the tool result the model sees."""

    answer_schema: dict[str, Any] | type[BaseModel] | None = None
    """JSON schema (or pydantic model) the `resume_hook` payload must match; checked by `resume_hook`."""

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        tool_call_id = kwargs.get("tool_call_id")
        config = kwargs.get("config") or {}
        gate = (config.get("configurable") or {}).get(GATE_CONFIG_KEY)
        if isinstance(gate, SiblingGate) and isinstance(tool_call_id, str):
            await gate.wait_for_siblings(tool_call_id)
        reset = _current_tool_call_id.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _current_tool_call_id.reset(reset)

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        reset = _current_tool_call_id.set(kwargs.get("tool_call_id"))
        try:
            return super().run(tool_input, *args, **kwargs)
        finally:
            _current_tool_call_id.reset(reset)

    def _run(self, *args: Any, **kwargs: Any) -> NoReturn:
        kwargs.pop("run_manager", None)
        raise HumanInputInterrupt(self.name, _current_tool_call_id.get(), dict(kwargs))

    async def _arun(self, *args: Any, **kwargs: Any) -> NoReturn:
        kwargs.pop("run_manager", None)
        raise HumanInputInterrupt(self.name, _current_tool_call_id.get(), dict(kwargs))


def human_input_tool(
    name: str,
    *,
    description: str,
    args_schema: type[BaseModel] | dict[str, Any] | None = None,
    timeout: str | float | None = None,
    no_response_message: str = DEFAULT_NO_RESPONSE_MESSAGE,
    format_answer: Callable[[Any], str] | None = None,
    answer_schema: dict[str, Any] | type[BaseModel] | None = None,
) -> HumanInputTool:
    """Declare a tool that asks the visitor and waits for the answer durably.

    `args_schema` is a pydantic model or a JSON schema; the default takes one `question` string.
    `timeout` is the hook timeout; when it expires the model receives `no_response_message` as the
    tool result and the agent finishes without the answer. `answer_schema` makes `resume_hook` refuse
    payloads that do not match it; `format_answer` turns the payload into the tool result text.
    """
    return HumanInputTool(
        name=name,
        description=description,
        args_schema=args_schema if args_schema is not None else _QuestionArgs,
        hook_timeout=timeout,
        no_response_message=no_response_message,
        format_answer=format_answer if format_answer is not None else _default_format_answer,
        answer_schema=answer_schema,
    )
