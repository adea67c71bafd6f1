"""Fixtures for the LangGraph agent-step tests: a fresh SQLite store per test and cross-process counters.

The workflows live in `lg_agents` (this folder), a real module, because a process that resumes a run
imports its workflow by name; subprocesses get this folder on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import pyworkflow

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def counts_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "counts"
    directory.mkdir()
    monkeypatch.setenv("LG_COUNTS_DIR", str(directory))
    return directory


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'pyworkflow.db'}"


@pytest.fixture
async def store(db_url: str, counts_dir: Path) -> AsyncIterator[str]:
    pyworkflow.configure(storage=db_url, poll_interval=0.02)
    try:
        yield db_url
    finally:
        await pyworkflow.shutdown()


@pytest.fixture
def subprocess_env(counts_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LG_COUNTS_DIR"] = str(counts_dir)
    return env
