"""The Celery sweeper's sleep between sweeps (``next_sweep_in``): a deadline is acted on when it
falls due, a row or lease due later when it falls due, and rows already due (a backlog waiting for
workers) wait for the next sweep instead of making the sweeper sweep every 50 ms."""

from __future__ import annotations

import pytest

from pyworkflow.runtime._celery_worker import next_sweep_in

NOW = 1_000.0


def test_nothing_due_sleeps_the_interval() -> None:
    assert next_sweep_in(None, None, NOW, 1.0) == 1.0


def test_a_backlog_already_due_does_not_shorten_the_sleep() -> None:
    """The oldest queue row has been due for 5 s (within dispatch_grace, or weighed by this sweep
    against the broker's queue): before, this slept 50 ms, sweep after sweep."""
    assert next_sweep_in(NOW - 5.0, None, NOW, 1.0) == 1.0
    assert next_sweep_in(NOW - 5.0, NOW + 30.0, NOW, 1.0) == 1.0


def test_a_deadline_behind_a_backlog_still_wakes_the_sweeper_when_due() -> None:
    """The store's next due time is the backlog's (in the past); the deadline 0.3 s ahead is only
    seen through ``deadline``."""
    assert next_sweep_in(NOW - 5.0, NOW + 0.3, NOW, 1.0) == pytest.approx(0.3)


def test_a_row_or_lease_due_soon_wakes_the_sweeper_then() -> None:
    assert next_sweep_in(NOW + 0.2, None, NOW, 1.0) == pytest.approx(0.2)
    assert next_sweep_in(NOW + 0.2, NOW + 0.2, NOW, 1.0) == pytest.approx(0.2)


def test_a_deadline_already_due_sweeps_again_at_once() -> None:
    """More waits were due than one sweep expires: the next sweep expires the rest."""
    assert next_sweep_in(NOW - 1.0, NOW - 1.0, NOW, 1.0) == 0.05


def test_never_less_than_50_ms() -> None:
    assert next_sweep_in(NOW + 0.001, None, NOW, 1.0) == 0.05
