"""Fixtures of the reliability tests: every test needs the services of its campaign and fails
with one line naming a missing one (never skips)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import require_service
from tests.reliability.oracle import Figures

SERVICES = {"postgresql": ("PostgreSQL", 5432), "redis": ("Redis", 6379)}


def require(*names: str) -> None:
    for name in names:
        label, port = SERVICES[name]
        require_service(label, "127.0.0.1", port)


_summary: list[Figures] = []


@pytest.fixture(scope="session")
def summary() -> Iterator[list[Figures]]:
    """Figures of every campaign of the session (printed by :func:`pytest_terminal_summary`)."""
    yield _summary


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _summary:
        terminalreporter.write_line("\nreliability suite (fast subset):\n" + Figures.HEADER)
        for figures in _summary:
            terminalreporter.write_line(figures.row())
