"""The graph server holds the garbage collector's pace while it serves (pyworkflow/store/_gc.py):
``$ATFGRAPH_GC_THRESHOLD`` sets it, ``none`` leaves the collector alone, a bad value stops the
server before it starts, in one line."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from atfgraph.server._app import Settings, create_app
from atfgraph.server._serve import serve
from pyworkflow.store import YOUNG_GC_THRESHOLD

PYTHON = (700, 10, 10)


@pytest.fixture(autouse=True)
def python_pace(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ATFGRAPH_GC_THRESHOLD", raising=False)
    saved = gc.get_threshold()
    gc.set_threshold(*PYTHON)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


@pytest.mark.parametrize(
    ("raw", "threshold"),
    [(None, YOUNG_GC_THRESHOLD), ("", YOUNG_GC_THRESHOLD), ("123456", 123_456), (" 5000 ", 5000),
     ("none", None), ("NONE", None)],
)  # fmt: skip
def test_the_threshold_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, raw: str | None, threshold: int | None
) -> None:
    if raw is not None:
        monkeypatch.setenv("ATFGRAPH_GC_THRESHOLD", raw)
    assert Settings.from_env(db_path=str(tmp_path / "g.db")).gc_threshold == threshold


@pytest.mark.parametrize(
    "raw", ["0", "-5", "abc", "1e5", "5000.0", "2147483648", "9" * 50, "off", "\u00b2", "+5 000"]
)
def test_a_bad_threshold_stops_the_server_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: str
) -> None:
    monkeypatch.setenv("ATFGRAPH_GC_THRESHOLD", raw)
    with pytest.raises(ValueError, match=r"\$ATFGRAPH_GC_THRESHOLD must be an int from 1"):
        Settings.from_env(db_path=str(tmp_path / "g.db"))
    with pytest.raises(SystemExit) as stopped:
        serve("127.0.0.1", 0, str(tmp_path / "g.db"))
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("atfgraph: $ATFGRAPH_GC_THRESHOLD must be"), err
    assert not (tmp_path / "g.db").exists()  # nothing was opened
    assert gc.get_threshold() == PYTHON


@pytest.mark.parametrize(("threshold", "inside"), [(YOUNG_GC_THRESHOLD, YOUNG_GC_THRESHOLD), (None, 700)])
async def test_the_server_holds_the_pace_while_it_serves(
    tmp_path: Path, threshold: int | None, inside: int
) -> None:
    app = create_app(Settings(db_path=str(tmp_path / "g.db"), home=tmp_path, gc_threshold=threshold))
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == (inside, 10, 10)
    assert gc.get_threshold() == PYTHON
