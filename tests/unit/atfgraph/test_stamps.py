"""The API's ISO 8601 instants: one format, whatever the instant and however often it is asked."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from atfgraph.server import _stamps
from atfgraph.server._stamps import iso, stamped


def _reference(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "seconds",
    [0.0, 0.000001, 1.5, 1764601469.028175, 1764601469.0, 4102444799.999999, -1.25, 1_000_000_000],
)
def test_iso_writes_utc_with_microseconds_and_a_z(seconds: float) -> None:
    text = iso(seconds)
    assert text == _reference(seconds)
    assert text is not None and text.endswith("Z") and "+" not in text and len(text) == 27


def test_iso_of_none_is_none_and_repeats_answer_the_same() -> None:
    assert iso(None) is None
    rng = random.Random(7)
    instants = [rng.uniform(0, 4.1e9) for _ in range(3000)]
    first = [iso(s) for s in instants]
    assert [iso(s) for s in instants] == first == [_reference(s) for s in instants]


def test_the_memo_of_written_instants_stays_bounded() -> None:
    for n in range(_stamps._WRITTEN_MAX * 2 + 10):
        iso(1.0e9 + n / 7)
    assert 0 < len(_stamps._WRITTEN) <= _stamps._WRITTEN_MAX
    assert iso(1.0e9 + 3 / 7) == _reference(1.0e9 + 3 / 7)


def test_stamped_adds_an_iso_field_beside_each_named_instant() -> None:
    view = stamped({"created_at": 1.5, "finished_at": None, "other": 2.0}, "created_at", "finished_at")
    assert view == {
        "created_at": 1.5,
        "created_at_iso": "1970-01-01T00:00:01.500000Z",
        "finished_at": None,
        "finished_at_iso": None,
        "other": 2.0,
    }


@pytest.mark.parametrize(
    "seconds",
    [
        0.9999995,  # rounds up into the next second
        0.0000005,  # half a microsecond: half to even, down
        0.0000015,  # ... up
        -0.0000004,  # before the epoch, within a microsecond of it
        -0.9999996,
        -1.0000004,
        1764601469.9999996,
        1764601469.5,
    ],
)
def test_iso_rounds_the_fraction_as_datetime_does(seconds: float) -> None:
    assert iso(seconds) == _reference(seconds)


def test_iso_agrees_with_datetime_across_many_seconds_and_fractions() -> None:
    rng = random.Random(11)
    instants = [rng.uniform(-2.0e9, 4.1e9) for _ in range(2000)]
    instants += [k / 7 for k in range(-3000, 3000)]
    instants += [1.0e9 + (2 * k + 1) / 2e6 for k in range(2000)]  # exact half microseconds
    instants += [1764601469 + k * 0.000137 for k in range(3000)]  # many within one second
    assert [iso(s) for s in instants] == [_reference(s) for s in instants]


def test_the_memo_of_written_seconds_stays_bounded() -> None:
    for n in range(_stamps._SECONDS_MAX * 2 + 10):
        iso(1.0e9 + n + 0.25)
    assert 0 < len(_stamps._SECONDS) <= _stamps._SECONDS_MAX
    assert iso(1.0e9 + 7.25) == _reference(1.0e9 + 7.25)
