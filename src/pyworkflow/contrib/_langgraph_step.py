"""Driving an agent inside a `@step`, suspending the step when the agent asks a human.

The loop (one step execution):

    load the step checkpoint                       # first thing, before any model call
    ├─ none: run the once-per-conversation hook, start from the input messages
    └─ some: restore the transcript (messages_from_dict)
    repeat:
      if a human-input call is pending:
          payload = await step_hook(...)           # suspends here until resume_hook / timeout
          append ToolMessage(answer | "did not respond")
      if the last AI message has more human-input calls: checkpoint, next hook (one per call)
      else: astream({"messages": transcript})      # continues the agent from the transcript
            ├─ HumanInputInterrupt: transcript so far + the call → checkpoint → loop
            └─ finished: delete the checkpoint, return the answer

Nothing before a hook is recomputed on re-execution: the model turns and tool results already taken are
in the checkpointed transcript, which is exactly what the graph continues from. Ordinary tool calls made
in the same turn as a human-input call finish before the interrupt stops the graph (`SiblingGate`), so
their results are in the transcript too.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import StreamMode

from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    ConfigurationError,
    delete_step_checkpoint,
    load_step_checkpoint,
    save_step_checkpoint,
    step_hook,
)

from ._langgraph_siblings import GATE_CONFIG_KEY, SiblingGate
from ._langgraph_tools import DEFAULT_NO_RESPONSE_MESSAGE, HumanInputInterrupt, HumanInputTool
from ._langgraph_transcript import (
    PendingHumanInput,
    StepState,
    TranscriptTracker,
    decode_state,
    encode_state,
    final_text,
    unanswered_tool_calls,
)

__all__ = [
    "INTERRUPTED_TOOL_MESSAGE",
    "AgentChunk",
    "AgentResult",
    "HumanInputRequest",
    "run_agent",
    "stream_agent",
]

INTERRUPTED_TOOL_MESSAGE = (
    "This tool call was interrupted while the conversation waited for the visitor, so it has no result. "
    "Call the tool again if you still need it."
)


@dataclass(frozen=True)
class HumanInputRequest:
    """What the visitor needs to answer one human-input call: the hook token and the tool arguments."""

    token: str
    hook_name: str
    tool_name: str
    tool_call_id: str
    args: dict[str, Any]

    @property
    def question(self) -> str | None:
        """The `question` argument, when the tool has one (the default schema does)."""
        question = self.args.get("question")
        return question if isinstance(question, str) else None


@dataclass(frozen=True)
class AgentResult:
    """The agent's final answer and the full transcript that led to it."""

    text: str
    messages: list[BaseMessage]
    values: dict[str, Any]
    """The final graph state (only `messages` survives a suspension; other keys are from the last pass)."""


class AgentChunk(TypedDict):
    """One item of `stream_agent`: a piece of model text, or the final answer (always last)."""

    type: Literal["text", "answer"]
    text: str


OnHumanInput = Callable[[HumanInputRequest], Awaitable[None] | None]
OnFirstPass = Callable[[], Awaitable[None] | None]


async def run_agent(
    agent: Pregel[Any, Any, Any, Any],
    messages: str | Sequence[BaseMessage],
    *,
    on_human_input: OnHumanInput,
    on_first_pass: OnFirstPass | None = None,
    human_tools: Sequence[HumanInputTool] = (),
    config: RunnableConfig | None = None,
    context: Any = None,
) -> AgentResult:
    """Run `agent` to its final answer inside a `@step`, suspending the step whenever it asks a human.

    `on_human_input` receives the hook token and the tool arguments when a hook is created (deliver the
    question to the visitor there); it is not called again when the step re-executes, unless the process
    died before the suspension was recorded. `on_first_pass` runs once per conversation (credit checks,
    quotas), not once per execution. Misuse (outside a `@step`, a graph with its own checkpointer, a
    human-input tool the graph does not list) raises `ConfigurationError`.
    """
    result: AgentResult | None = None
    async for item in _drive(
        agent,
        messages,
        on_human_input=on_human_input,
        on_first_pass=on_first_pass,
        human_tools=human_tools,
        config=config,
        context=context,
        stream_text=False,
    ):
        if isinstance(item, AgentResult):
            result = item
    assert result is not None  # _drive always ends with the result
    return result


async def stream_agent(
    agent: Pregel[Any, Any, Any, Any],
    messages: str | Sequence[BaseMessage],
    *,
    on_human_input: OnHumanInput,
    on_first_pass: OnFirstPass | None = None,
    human_tools: Sequence[HumanInputTool] = (),
    config: RunnableConfig | None = None,
    context: Any = None,
) -> AsyncIterator[AgentChunk]:
    """Like `run_agent`, for a `@step(is_generator=True)`: yields model text as it is produced.

    The last item is `{"type": "answer", "text": ...}`. Text produced before a suspension is not produced
    again after it: the model turns that made it are restored from the checkpoint, not re-run.
    """
    async for item in _drive(
        agent,
        messages,
        on_human_input=on_human_input,
        on_first_pass=on_first_pass,
        human_tools=human_tools,
        config=config,
        context=context,
        stream_text=True,
    ):
        if isinstance(item, AgentResult):
            yield AgentChunk(type="answer", text=item.text)
        else:
            yield item


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _save(state: StepState) -> StepState:
    """Checkpoint ``state`` and return it as a later execution of the step will restore it (decoded
    from what was stored), so this pass continues from the same transcript that one would."""
    await save_step_checkpoint(encode_state(state))
    return decode_state(await load_step_checkpoint())


def _find_human_tools(
    agent: Pregel[Any, Any, Any, Any], extra: Sequence[HumanInputTool]
) -> dict[str, HumanInputTool]:
    """Human-input tools by name: the ones in the graph's tool nodes, plus any passed explicitly.

    Needed on re-execution (maybe in another process) to format answers, and to recognise sibling
    human-input calls in a turn that the interrupt stopped before they ran.
    """
    found: dict[str, HumanInputTool] = {}
    nodes = getattr(agent, "nodes", None)
    if isinstance(nodes, Mapping):
        for node in nodes.values():
            tools_by_name = getattr(getattr(node, "bound", None), "tools_by_name", None)
            if isinstance(tools_by_name, Mapping):
                for tool in tools_by_name.values():
                    if isinstance(tool, HumanInputTool):
                        found[tool.name] = tool
    for tool in extra:
        found[tool.name] = tool
    return found


def _initial_messages(messages: str | Sequence[BaseMessage]) -> list[BaseMessage]:
    if isinstance(messages, str):
        return [HumanMessage(content=messages)]
    return list(messages)


def _answer_message(pending: PendingHumanInput, payload: Any, tool: HumanInputTool | None) -> ToolMessage:
    if payload is STEP_HOOK_TIMEOUT:
        return ToolMessage(
            content=tool.no_response_message if tool is not None else DEFAULT_NO_RESPONSE_MESSAGE,
            tool_call_id=pending.tool_call_id,
            name=pending.tool_name,
            status="error",
        )
    content = tool.format_answer(payload) if tool is not None else str(payload)
    return ToolMessage(content=content, tool_call_id=pending.tool_call_id, name=pending.tool_name)


def _text_of(chunk: Any) -> str:
    message = chunk[0] if isinstance(chunk, tuple) and chunk else chunk
    if isinstance(message, AIMessage):
        return str(message.text)
    return ""


async def _drive(
    agent: Pregel[Any, Any, Any, Any],
    messages: str | Sequence[BaseMessage],
    *,
    on_human_input: OnHumanInput,
    on_first_pass: OnFirstPass | None,
    human_tools: Sequence[HumanInputTool],
    config: RunnableConfig | None,
    context: Any,
    stream_text: bool,
) -> AsyncIterator[AgentChunk | AgentResult]:
    if isinstance(getattr(agent, "checkpointer", None), BaseCheckpointSaver):
        # A LangGraph checkpointer would restore its own copy of the state under the thread id and the
        # transcript would be applied twice; the step checkpoint already plays that part.
        raise ConfigurationError(
            "compile the agent without a checkpointer: run_agent keeps the transcript in the step checkpoint"
        )
    tools = _find_human_tools(agent, human_tools)

    checkpoint = await load_step_checkpoint()
    if checkpoint is None:
        state = StepState(messages=_initial_messages(messages))
        if on_first_pass is not None:
            await _maybe_await(on_first_pass())
            # Recorded at once: a crash before the first hook must not run it again.
            state = await _save(state)
    else:
        state = decode_state(checkpoint)
        # A generator step drops, by position, the chunks it delivered before suspending; replaying
        # the recorded ones keeps positions aligned, so only text produced from here on is new.
        for streamed in state.streamed:
            yield AgentChunk(type=streamed["type"], text=streamed["text"])

    values: dict[str, Any] = {"messages": state.messages}
    # "tasks" tells the sibling gate when each tool call of a turn finishes. "custom" is there for its
    # side effect: LangGraph then hands stream events over as they arrive instead of only when a task
    # finishes; without it, the finish of a sibling that completes together with another one can sit
    # in the queue while the human-input call waits for it, and the superstep never ends.
    stream_modes: list[StreamMode] = ["values", "updates", "tasks", "custom"]
    if stream_text:
        stream_modes.append("messages")
    while True:
        if state.pending is not None:
            pending = state.pending
            tool = tools.get(pending.tool_name)
            payload = await step_hook(
                pending.hook_name,
                timeout=pending.timeout,
                on_created=_on_created(on_human_input, pending),
                on_timeout="return",
                payload_schema=tool.answer_schema if tool is not None else None,
            )
            state.messages.append(_answer_message(pending, payload, tool))
            state.pending = None

        unanswered = unanswered_tool_calls(state.messages)
        human_call = next((call for call in unanswered if call["name"] in tools), None)
        if human_call is not None:
            # One hook per human-input call, parallel calls included: ask, answer, then the next one.
            state.pending = _pending_for(human_call, tools[human_call["name"]], state.hooks_created)
            state.hooks_created += 1
            state = await _save(state)
            continue
        for call in unanswered:
            # A sibling of a human-input call that the interrupt stopped before it finished. Rerunning
            # it automatically could repeat a side effect; the model decides whether to call it again.
            state.messages.append(
                ToolMessage(
                    content=INTERRUPTED_TOOL_MESSAGE,
                    tool_call_id=call["id"],
                    name=call["name"],
                    status="error",
                )
            )

        tracker = TranscriptTracker(state.messages)
        gate = SiblingGate(tools)
        streamed_before_pass = len(state.streamed)
        try:
            async for mode, chunk in agent.astream(
                {"messages": state.messages},
                _with_gate(config, gate),
                stream_mode=stream_modes,
                context=context,
            ):
                if mode == "values":
                    tracker.on_values(chunk)
                    gate.on_superstep()
                elif mode == "tasks":
                    gate.on_task(chunk)
                elif mode == "updates":
                    tracker.on_updates(chunk)
                elif mode == "messages" and (text := _text_of(chunk)):
                    piece = AgentChunk(type="text", text=text)
                    state.streamed.append(piece)
                    yield piece
        except HumanInputInterrupt as interrupt:
            state.messages = tracker.transcript()
            if interrupt.tool_name not in tools:
                raise ConfigurationError(
                    f"human-input tool {interrupt.tool_name!r} is not in a tool node of this graph; "
                    "pass it in human_tools=[...]"
                ) from None
            if not any(
                call["id"] == interrupt.tool_call_id for call in unanswered_tool_calls(state.messages)
            ):
                raise ConfigurationError(
                    f"human-input tool {interrupt.tool_name!r} was called outside a tool call of the last "
                    "AI message; call it only through the agent's tool node"
                ) from None
            continue
        except Exception:
            if len(state.streamed) > streamed_before_pass:
                # The step fails and the engine records how many chunks it delivered; the retry
                # replays the recorded ones, so they must include this pass's chunks too.
                await _save(state)
            raise

        state.messages = tracker.transcript()
        values = tracker.values
        break

    await delete_step_checkpoint()
    yield AgentResult(text=final_text(state.messages), messages=state.messages, values=values)


def _with_gate(config: RunnableConfig | None, gate: SiblingGate) -> RunnableConfig:
    merged: RunnableConfig = {**(config or {})}
    merged["configurable"] = {**merged.get("configurable", {}), GATE_CONFIG_KEY: gate}
    return merged


def _pending_for(call: Any, tool: HumanInputTool, hooks_created: int) -> PendingHumanInput:
    return PendingHumanInput(
        tool_call_id=call["id"],
        tool_name=call["name"],
        args=dict(call["args"]),
        hook_name=f"{call['name']}-{hooks_created}",
        timeout=tool.hook_timeout,
    )


def _on_created(on_human_input: OnHumanInput, pending: PendingHumanInput) -> Callable[[str], Awaitable[None]]:
    async def on_created(token: str) -> None:
        await _maybe_await(
            on_human_input(
                HumanInputRequest(
                    token=token,
                    hook_name=pending.hook_name,
                    tool_name=pending.tool_name,
                    tool_call_id=pending.tool_call_id,
                    args=dict(pending.args),
                )
            )
        )

    return on_created
