"""``pyworkflow worker``'s options: defaults that suit each Celery pool, and bad values refused
before anything starts."""

from __future__ import annotations

import os

from click.testing import CliRunner

from pyworkflow.cli import main
from pyworkflow.runtime._celery_worker import default_concurrency


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
