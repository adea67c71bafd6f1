"""Counting a store's calls in a test: which reads a transition made, without a mock."""

from __future__ import annotations

from typing import Any

import pytest


def counted_calls(monkeypatch: pytest.MonkeyPatch, obj: Any, name: str) -> list[Any]:
    """From now on, each call of the coroutine method ``obj.name`` appends its first argument to
    the list returned (the call itself goes on to the real method)."""
    calls: list[Any] = []
    original = getattr(obj, name)

    async def counted(first: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(first)
        return await original(first, *args, **kwargs)

    monkeypatch.setattr(obj, name, counted)
    return calls
