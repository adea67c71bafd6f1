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


def sent_statements(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[str]:
    """From now on, the function (or table) each statement a PostgreSQL store sends to its
    writers names, in order: ``pyworkflow_resolve_token`` for ``SELECT * FROM
    pyworkflow_resolve_token(...)``, ``waits`` for a read of that table."""
    sent: list[str] = []
    original = store._submit

    def counted(sql: str, *args: Any, **kwargs: Any) -> Any:
        words = sql.replace("(", " ").split()
        sent.append(words[words.index("FROM") + 1] if "FROM" in words else words[1])
        return original(sql, *args, **kwargs)

    monkeypatch.setattr(store, "_submit", counted)
    return sent
