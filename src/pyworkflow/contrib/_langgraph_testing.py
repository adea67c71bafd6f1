"""A scripted chat model for running agents offline (tests, examples, demos).

The reply is chosen by the position in the conversation (how many AI messages the input already holds),
not by how many times the model object was called. That is what makes it useful for durable agents: a
step that re-executes, in this process or another one, and continues from a restored transcript gets
the next scripted turn, while a step that wrongly re-ran the conversation from the start would get the
first turn again (and `on_call` would count the extra call).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import field_validator

__all__ = ["ScriptedChatModel"]


class ScriptedChatModel(BaseChatModel):
    """Replies with `turns[n]`, where n is the number of AI messages in the conversation so far.

    `turns` items are `AIMessage`s, or callables that receive the conversation and return one (to echo
    a tool result into the answer). `bind_tools` returns the model itself: the script already knows which
    tools it calls. `on_call` sees every conversation the model is called with (count calls with it).
    """

    # Typed loosely on purpose: pydantic would try to coerce a callable into an AIMessage.
    turns: list[Any]
    on_call: Callable[[list[BaseMessage]], None] | None = None

    @field_validator("turns")
    @classmethod
    def _check_turns(cls, turns: list[Any]) -> list[Any]:
        for turn in turns:
            if not isinstance(turn, AIMessage) and not callable(turn):
                raise ValueError(f"a scripted turn is an AIMessage or a callable, not {type(turn).__name__}")
        return turns

    @property
    def _llm_type(self) -> str:
        return "pyworkflow-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        if self.on_call is not None:
            self.on_call(list(messages))
        position = sum(isinstance(m, AIMessage) for m in messages)
        if position >= len(self.turns):
            raise IndexError(f"the script has {len(self.turns)} turns; turn {position + 1} was requested")
        turn = self.turns[position]
        reply = turn if isinstance(turn, AIMessage) else turn(list(messages))
        if not isinstance(reply, AIMessage):
            raise TypeError(f"scripted turn {position + 1} returned {type(reply).__name__}, not an AIMessage")
        return reply.model_copy(deep=True)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        reply = self._reply(messages)
        # Text streams word by word, like a provider; content blocks are sent whole.
        pieces: list[Any] = []
        if isinstance(reply.content, str):
            words = reply.content.split(" ") if reply.content else []
            pieces = [word if index == 0 else " " + word for index, word in enumerate(words)]
        elif reply.content:
            pieces = [reply.content]
        for piece in pieces:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece, id=reply.id))
            if run_manager is not None:
                await run_manager.on_llm_new_token(piece if isinstance(piece, str) else "", chunk=chunk)
            yield chunk
        last = AIMessageChunk(
            content="",
            id=reply.id,
            additional_kwargs=reply.additional_kwargs,
            response_metadata=reply.response_metadata,
            tool_call_chunks=[
                {"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": index}
                for index, call in enumerate(reply.tool_calls)
            ],
            chunk_position="last",
        )
        last_chunk = ChatGenerationChunk(message=last)
        if run_manager is not None:
            await run_manager.on_llm_new_token("", chunk=last_chunk)
        yield last_chunk
