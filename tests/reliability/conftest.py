"""Fixtures of the reliability suite (issue 11, part B): every test needs the services of its
campaign and fails with one line naming a missing one (never skips); real graph servers and
workers from the acceptance harness; the size knob.

``RELIABILITY_SCALE`` (an int, default 1) multiplies how often each race repeats and how many
examples the stateful test runs; ``make test`` uses 1, the full run documented in
docs/guarantees.md uses 10."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require_service
from tests.reliability.oracle import Figures

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent / "acceptance" / "atfgraph", HERE.parents[1]):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from atfg_harness import ServerProcess  # noqa: E402 - needs the acceptance folder on sys.path

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


@pytest.fixture(autouse=True)
def _credentials_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients in the test process find the credentials of the test's own server."""
    monkeypatch.setenv("ATFGRAPH_HOME", str(tmp_path))
    monkeypatch.delenv("ATFGRAPH_TOKEN", raising=False)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path)
    proc.start()
    yield proc
    proc.close()
