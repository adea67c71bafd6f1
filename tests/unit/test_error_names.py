"""pyworkflow's exceptions are known by their public names: in a run's recorded error, in
tracebacks and in pickles (which cross to Celery workers)."""

from __future__ import annotations

import pickle

import orjson
import pytest

import pyworkflow
from pyworkflow import _errors
from pyworkflow._serde import encode_error

ERRORS = sorted(
    (c for c in vars(_errors).values() if isinstance(c, type) and issubclass(c, BaseException)),
    key=lambda c: c.__name__,
)


def test_every_error_class_is_exported_under_its_public_name() -> None:
    assert len(ERRORS) >= 20
    for cls in ERRORS:
        assert cls.__module__ == "pyworkflow", cls
        assert getattr(pyworkflow, cls.__name__) is cls
        assert cls.__name__ in pyworkflow.__all__


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_each_error_pickles_to_the_same_class(cls: type[BaseException]) -> None:
    exc = cls("boom")
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is cls and str(again) == str(exc)


def test_a_recorded_error_names_the_public_class() -> None:
    try:
        raise pyworkflow.RetryableError("carrier busy")
    except pyworkflow.RetryableError as exc:
        recorded = orjson.loads(encode_error(exc))
    assert recorded["type"] == "pyworkflow.RetryableError"
    assert "pyworkflow.RetryableError: carrier busy" in recorded["traceback"]
    assert "_errors" not in recorded["type"]


@pytest.mark.parametrize("recorded", ["pyworkflow._errors.RetryableError", "pyworkflow.RetryableError"])
def test_a_failure_recorded_under_either_name_replays_as_the_same_class(recorded: str) -> None:
    """Databases written before the public names record the private module's path; replay
    rebuilds the same exception from either."""
    from pyworkflow._step import _replayed_error

    rebuilt = _replayed_error(orjson.dumps({"type": recorded, "message": "carrier busy"}))
    assert type(rebuilt) is pyworkflow.RetryableError and str(rebuilt) == "carrier busy"
