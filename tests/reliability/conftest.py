"""Fixtures of the reliability suite (issue 11, part B): real graph servers and workers from the
acceptance harness, and the size knob.

``RELIABILITY_SCALE`` (an int, default 1) multiplies how often each race repeats and how many
examples the stateful test runs; ``make test`` uses 1, the full run documented in
docs/guarantees.md uses 10."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent / "acceptance" / "atfgraph", HERE.parents[1]):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from atfg_harness import ServerProcess  # noqa: E402 - needs the acceptance folder on sys.path


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
