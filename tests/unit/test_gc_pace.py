"""The garbage collector's pace while runs are served (``pyworkflow.store.hold_gc_pace``): the
young generation's threshold is raised while a runtime runs, never lowered, the process's own
comes back after the last holder, and a process that set its own pace keeps it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pyworkflow
from pyworkflow import ConfigurationError, step, workflow
from pyworkflow.store import YOUNG_GC_THRESHOLD, _gc, check_gc_threshold, gc_threshold_from_text, hold_gc_pace

PYTHON = (700, 10, 10)


@pytest.fixture(autouse=True)
def python_pace() -> Iterator[None]:
    """Each test starts from CPython's own thresholds with the collector on, and leaves them so;
    no test may leave a holder behind."""
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(*PYTHON)
    gc.enable()
    try:
        yield
        assert not _gc._holders, "a test left the pace held"
    finally:
        _gc._holders.clear()
        _gc._before = _gc._ours = None
        gc.set_threshold(*saved)
        if not enabled:
            gc.disable()


def test_a_holder_raises_the_young_threshold_until_it_lets_go() -> None:
    release = hold_gc_pace()
    assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, 10, 10)
    release()
    assert gc.get_threshold() == PYTHON
    release()  # a second call changes nothing
    assert gc.get_threshold() == PYTHON


def test_the_older_generations_keep_the_processs_multipliers() -> None:
    gc.set_threshold(700, 3, 7)
    release = hold_gc_pace(20_000)
    assert gc.get_threshold() == (20_000, 3, 7)
    release()
    assert gc.get_threshold() == (700, 3, 7)


def test_overlapping_holders_get_the_highest_and_the_last_puts_the_processs_back() -> None:
    first = hold_gc_pace(20_000)
    second = hold_gc_pace(80_000)
    assert gc.get_threshold()[0] == 80_000
    second()
    assert gc.get_threshold()[0] == 20_000
    third = hold_gc_pace(10_000)  # lower than the one held: the held one stays
    assert gc.get_threshold()[0] == 20_000
    first()
    assert gc.get_threshold()[0] == 10_000
    third()
    assert gc.get_threshold() == PYTHON


def test_a_process_with_a_slower_pace_of_its_own_keeps_it() -> None:
    gc.set_threshold(200_000, 10, 10)
    release = hold_gc_pace()
    assert gc.get_threshold() == (200_000, 10, 10)
    release()
    assert gc.get_threshold() == (200_000, 10, 10)


def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    try:
        release = hold_gc_pace()
        assert gc.get_threshold() == PYTHON
        assert not gc.isenabled()
        release()
        assert gc.get_threshold() == PYTHON and not gc.isenabled()
    finally:
        gc.enable()


def test_a_threshold_set_by_someone_else_while_held_is_theirs() -> None:
    release = hold_gc_pace()
    gc.set_threshold(1_000, 5, 5)
    release()
    assert gc.get_threshold() == (1_000, 5, 5)
    # and the next holder starts from theirs
    again = hold_gc_pace()
    assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, 5, 5)
    again()
    assert gc.get_threshold() == (1_000, 5, 5)


def test_none_changes_nothing() -> None:
    release = hold_gc_pace(None)
    assert gc.get_threshold() == PYTHON
    release()
    assert gc.get_threshold() == PYTHON


@pytest.mark.parametrize("bad", [0, -1, 2**31, 10**40, 1.5, 5e4, "50000", True, b"1", [50_000]])
def test_a_bad_threshold_is_refused_and_nothing_changes(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="gc_threshold must be an int from 1 to 2147483647"):
        check_gc_threshold(bad)
    with pytest.raises(ConfigurationError):
        hold_gc_pace(bad)
    assert gc.get_threshold() == PYTHON
    assert check_gc_threshold(2**31 - 1) == 2**31 - 1 and check_gc_threshold(None) is None


SEEN: list[tuple[int, int, int]] = []


@step()
async def look() -> int:
    SEEN.append(gc.get_threshold())
    return gc.get_threshold()[0]


@workflow(name="tests.gc_pace.look")
async def looking() -> int:
    return await look()


@pytest.mark.parametrize(
    ("configured", "inside"),
    [({}, YOUNG_GC_THRESHOLD), ({"gc_threshold": 123_456}, 123_456), ({"gc_threshold": None}, 700)],
    ids=["default", "set", "none"],
)
async def test_the_local_runtime_holds_the_pace_while_it_runs(
    tmp_path: Path, configured: dict[str, Any], inside: int
) -> None:
    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'gc.db'}", poll_interval=0.02, **configured)
    SEEN.clear()
    try:
        run_id = await pyworkflow.start(looking)
        run = await pyworkflow.wait_for_run(run_id, 10)
        assert run.status == "completed"
        assert [(inside, 10, 10)] == SEEN  # in the step, while the runtime ran
    finally:
        await pyworkflow.shutdown()
    assert gc.get_threshold() == PYTHON  # the process's own, once it stopped


@pytest.mark.parametrize(
    ("raw", "threshold"), [("50000", 50_000), (" 7 ", 7), ("none", None), ("None", None), (" NONE ", None)]
)
def test_a_threshold_from_text(raw: str, threshold: int | None) -> None:
    assert gc_threshold_from_text(raw) == threshold


@pytest.mark.parametrize(
    "raw", ["", "0", "-5", "+5", "5e4", "5000.0", "\u00b2", "2147483648", "off", "50 000"]
)
def test_a_bad_threshold_as_text_is_refused_with_its_name(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^--flag must be an int from 1 to 2147483647"):
        gc_threshold_from_text(raw, "--flag")
