"""``pyworkflow worker``'s options: defaults that suit each Celery pool, and bad values refused
before anything starts."""

from __future__ import annotations

import os
import sys

import pytest
from click.testing import CliRunner

from pyworkflow.cli import main
from pyworkflow.runtime import _celery_worker
from pyworkflow.runtime._celery import DEFAULT_DISPATCH_GRACE
from pyworkflow.runtime._celery_worker import default_concurrency, settings_from_environment


def test_concurrency_defaults_suit_the_pool() -> None:
    # Threads only wait for the process's shared turn loop: many are cheap. Prefork children each
    # run their own loop: one per CPU. Solo runs one turn at a time.
    assert default_concurrency("threads") == 32
    assert default_concurrency("prefork") == (os.cpu_count() or 1)
    assert default_concurrency("solo") == 1


def test_bad_concurrency_and_pool_are_refused_with_one_message() -> None:
    runner = CliRunner()
    for args, fragment in (
        (["--concurrency", "0"], "0 is not in the range"),
        (["--concurrency", "-3"], "-3 is not in the range"),
        (["--concurrency", "many"], "'many' is not a valid integer"),
        (["--concurrency", "100000"], "100000 is not in the range"),
        (["--pool", "gevent"], "'gevent' is not one of"),
    ):
        result = runner.invoke(main, ["worker", "--storage", "postgresql://nowhere/x", *args])
        assert result.exit_code == 2, (args, result.output)
        assert fragment in result.output, (args, result.output)


def test_the_dispatch_grace_is_set_by_option_or_environment_and_bad_values_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--dispatch-grace`` (``$PYWORKFLOW_DISPATCH_GRACE``): how long a due run may wait for its
    turn's message before the sweeper publishes it again. Refused, on both commands and in the
    environment of a plain Celery worker, unless it is a number of seconds from 1 to a day."""
    runner = CliRunner()
    for command in ("worker", "sweeper"):
        for value, fragment in (
            ("0", "0.0 is not in the range"),
            ("-5", "-5.0 is not in the range"),
            ("nan", "nan is not in the range 1.0<=x<=86400.0"),
            ("soon", "'soon' is not a valid float"),
            ("100000", "100000.0 is not in the range"),
        ):
            args = [command, "--storage", "postgresql://nowhere/x", "--dispatch-grace", value]
            result = runner.invoke(main, args)
            assert result.exit_code == 2, (command, value, result.output)
            assert fragment in result.output, (command, value, result.output)
    monkeypatch.setenv("PYWORKFLOW_STORAGE", "postgresql://nowhere/x")
    assert settings_from_environment().dispatch_grace == DEFAULT_DISPATCH_GRACE == 30.0
    monkeypatch.setenv("PYWORKFLOW_DISPATCH_GRACE", "3")
    assert settings_from_environment().dispatch_grace == 3.0
    for bad in ("0", "soon", "nan", "inf", "-1"):
        monkeypatch.setenv("PYWORKFLOW_DISPATCH_GRACE", bad)
        with pytest.raises(
            RuntimeError, match="PYWORKFLOW_DISPATCH_GRACE must be a number of seconds from 1 to"
        ):
            settings_from_environment()
    monkeypatch.delenv("PYWORKFLOW_DISPATCH_GRACE")
    # The plain Celery worker's other numbers are checked the same way.
    monkeypatch.setenv("PYWORKFLOW_LEASE_TTL", "12.5")
    monkeypatch.setenv("PYWORKFLOW_MAX_CRASHES", "2")
    settings = settings_from_environment()
    assert (settings.lease_ttl, settings.max_crashes) == (12.5, 2)
    for name, bad, what in (
        ("PYWORKFLOW_LEASE_TTL", "nan", "a positive number of seconds"),
        ("PYWORKFLOW_LEASE_TTL", "-3", "a positive number of seconds"),
        ("PYWORKFLOW_LEASE_TTL", "long", "a positive number of seconds"),
        ("PYWORKFLOW_MAX_CRASHES", "0", "a whole number of at least 1"),
        ("PYWORKFLOW_MAX_CRASHES", "2.5", "a whole number of at least 1"),
    ):
        monkeypatch.setenv(name, bad)
        with pytest.raises(RuntimeError, match=f"{name} must be {what}, not '{bad}'"):
            settings_from_environment()
        monkeypatch.delenv(name)


def test_the_dispatch_grace_reaches_the_sweeper(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []
    monkeypatch.setattr(_celery_worker, "run_sweeper", lambda settings: seen.append(settings.dispatch_grace))
    args = ["sweeper", "--storage", "postgresql://nowhere/x", "--dispatch-grace", "2.5"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("PYWORKFLOW_DISPATCH_GRACE", "7")
    result = CliRunner().invoke(main, ["sweeper", "--storage", "postgresql://nowhere/x"])
    assert result.exit_code == 0, result.output
    assert seen == [2.5, 7.0]


def test_bad_durations_and_crash_limits_are_refused_on_both_commands() -> None:
    """As ``configure`` refuses them: a lease, a sweep interval or a visibility timeout that is not
    a positive, finite number of seconds, and a crash limit under 1."""
    runner = CliRunner()
    for command in ("worker", "sweeper"):
        for option, value, fragment in (
            ("--lease-ttl", "0", "0.0 is not a positive number of seconds"),
            ("--lease-ttl", "-1", "-1.0 is not a positive number of seconds"),
            ("--lease-ttl", "nan", "nan is not a positive number of seconds"),
            ("--lease-ttl", "inf", "inf is not a positive number of seconds"),
            ("--sweep-interval", "0", "0.0 is not a positive number of seconds"),
            ("--sweep-interval", "nan", "nan is not a positive number of seconds"),
            ("--visibility-timeout", "-5", "-5.0 is not a positive number of seconds"),
            ("--max-crashes", "0", "0 is not in the range x>=1"),
            ("--max-crashes", "-3", "-3 is not in the range x>=1"),
        ):
            result = runner.invoke(main, [command, "--storage", "postgresql://nowhere/x", option, value])
            assert result.exit_code == 2, (command, option, value, result.output)
            assert fragment in result.output, (command, option, value, result.output)


def test_a_database_that_cannot_be_reached_is_one_line() -> None:
    """Nothing listens on port 1: the sweeper (and a worker, which starts one) ends with one line
    and exit code 1, not a traceback."""
    result = CliRunner().invoke(main, ["sweeper", "--storage", "postgresql://127.0.0.1:1/x"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: cannot use the database: "), result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output, result.output


def test_without_the_postgres_extra_the_sweeper_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg cannot be imported (as without the ``postgres`` extra): the store's own message,
    one line, exit 2; the command's error handling imports nothing of its own."""
    for name in [
        m for m in sys.modules if m == "psycopg" or m.startswith(("psycopg.", "pyworkflow.store._p"))
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    result = CliRunner().invoke(main, ["sweeper", "--storage", "postgresql://127.0.0.1:1/x"])
    assert result.exit_code == 2, result.output
    assert "PostgreSQL storage needs the postgres extra" in result.output, result.output
    assert "Traceback" not in result.output, result.output
