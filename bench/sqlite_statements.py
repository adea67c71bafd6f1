"""What SQLite's transitions cost as one statement each, in wall-clock microseconds.

    python -m bench.sqlite_statements [--n 4000] [--rounds 5] [--out F]

Each transition the SQLite store writes as one statement (an ``INSERT`` into a TEMP view whose
trigger does the writes: ``pyworkflow/store/_sqlite_statements.py``) is timed on a connection of
its own, as written (its writes ``OR FAIL``) and in SQLite's default form (``ABORT``: the same
text with the conflict clauses taken out), and a wait's creation also as the six statements from
Python that wrote it before (the fence's read, the key's read, the wait, its event, the run's
status, its event), a checkpoint's save as the four before ``pyworkflow_save_checkpoint`` (the
fence's read, the revision's, the write, the event), a claim's lease as the three before
``pyworkflow_lease`` (the queue row, the run's status, the event). With ABORT a trigger that writes more
than once makes SQLite keep a statement journal, a copy of each page the statement changes, to
be able to undo that statement alone; the store never needs that (a refusal comes before any
write, and an error after one rolls the whole transaction back), so its triggers are written
``OR FAIL``.

Each round runs every form ``n`` times, ``--batch`` (32) a transaction as in a writer's batch, on
a fresh run each time (created beforehand in the same transaction, untimed), with ``synchronous =
OFF`` (no fsync: the statement's own work; the commits are not timed); the forms
alternate within a round, and the rounds are repeated. Reported per transition and form: the
median over the rounds of the mean microseconds a statement. The figures are wall-clock: compare
the forms of one sitting, not sittings.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyworkflow.store import SQLiteStore
from pyworkflow.store._rows import SQL_CHECKPOINT_REVISION, SQL_UPSERT_CHECKPOINT
from pyworkflow.store._sqlite import (
    SQL_APPEND_EVENT,
    SQL_FENCE,
    SQL_WAIT_BY_KEY,
)
from pyworkflow.store._sqlite_statements import (
    SQL_COMPLETE_STEP,
    SQL_CREATE_RUN,
    SQL_CREATE_WAIT,
    SQL_END_RUN,
    SQL_LEASE,
    SQL_SAVE_CHECKPOINT,
    WRITER_STATEMENTS,
)

#: A run's status as the store set it from Python (the suspension before ``pyworkflow_suspended``).
SQL_SET_RUN_STATUS = "UPDATE runs SET status = ?, updated_at = ? WHERE id = ?"

#: A claim's lease as the store wrote it from Python before ``pyworkflow_lease`` (with the run's
#: status and the event).
SQL_LEASE_QUEUE = """
UPDATE queue SET epoch = epoch + 1, lease_owner = ?, lease_expires_at = ?, crashes = ? WHERE run_id = ?
"""

#: A wait's insertion as the store wrote it from Python before ``pyworkflow_create_wait`` took
#: its place (1403e50^): the baseline of ``wait_from_python``.
SQL_INSERT_WAIT = """
INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status, created_at, expires_at,
                   payload_schema)
VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)
"""

#: A step checkpoint's value, as bench.hitl's (about 200 bytes).
_CHECKPOINT = b'{"c":"' + b"c" * 190 + b'"}'

#: The forms: as written, and SQLite's default conflict resolution (views renamed ``abort_*``).
FORMS = ("or_fail", "abort")


def _abort(sql: str) -> str:
    return sql.replace("OR FAIL ", "").replace("RAISE(FAIL,", "RAISE(ABORT,").replace("pyworkflow_", "abort_")


def _form(sql: str, form: str) -> str:
    return sql if form == "or_fail" else _abort(sql)


def _connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    for statement in WRITER_STATEMENTS:
        conn.execute(statement)
        conn.execute(_abort(statement))
    return conn


def _transitions(conn: sqlite3.Connection) -> dict[str, dict[str, Callable[[str, int], Any]]]:
    """Per transition, per form: a function of (a fresh run's id, a number) that writes it."""

    def created(form: str) -> Callable[[str, int], Any]:
        sql = _form(SQL_CREATE_RUN, form)
        return lambda run, i: conn.execute(sql, (f"{run}+", "wf", "running", b"{}", 1.0, 1, "w", 99.0))

    def step(form: str) -> Callable[[str, int], Any]:
        sql = _form(SQL_COMPLETE_STEP, form)
        return lambda run, i: conn.execute(sql, (run, 1, "s#1", b"1", 2.0))

    def wait(form: str) -> Callable[[str, int], Any]:
        sql = _form(SQL_CREATE_WAIT, form)
        return lambda run, i: conn.execute(
            sql, (run, 1, f"w{run}", "k", "step_hook", "approve", "s#1", run.encode(), None, None, True, 2.0)
        )

    def wait_from_python(run: str, i: int) -> None:
        conn.execute(SQL_FENCE, (run,)).fetchone()
        conn.execute(SQL_WAIT_BY_KEY, (run, "k")).fetchone()
        params = (f"w{run}", run, "k", "step_hook", "approve", "s#1", run.encode(), 2.0, None, None)
        conn.execute(SQL_INSERT_WAIT, params)
        conn.execute(SQL_APPEND_EVENT, (run, 2.0, "wait_created", "k", None))
        conn.execute(SQL_SET_RUN_STATUS, ("suspended", 2.0, run))
        conn.execute(SQL_APPEND_EVENT, (run, 2.0, "run_suspended", None, None))

    def checkpoint(form: str) -> Callable[[str, int], Any]:
        sql = _form(SQL_SAVE_CHECKPOINT, form)
        return lambda run, i: conn.execute(sql, (run, 1, "s#1", "", _CHECKPOINT, 0, 2.0))

    def checkpoint_from_python(run: str, i: int) -> None:
        conn.execute(SQL_FENCE, (run,)).fetchone()
        conn.execute(SQL_CHECKPOINT_REVISION, (run, "s#1", "")).fetchone()
        conn.execute(SQL_UPSERT_CHECKPOINT, (run, "s#1", "", _CHECKPOINT, 1, 2.0))
        conn.execute(SQL_APPEND_EVENT, (run, 2.0, "checkpoint_saved", "s#1", None))

    def lease(form: str) -> Callable[[str, int], Any]:
        sql = _form(SQL_LEASE, form)
        return lambda run, i: conn.execute(sql, (run, "w2", 130.0, 0, "run_resumed", 2.0))

    def lease_from_python(run: str, i: int) -> None:
        conn.execute(SQL_LEASE_QUEUE, ("w2", 130.0, 0, run))
        conn.execute(SQL_SET_RUN_STATUS, ("running", 2.0, run))
        conn.execute(SQL_APPEND_EVENT, (run, 2.0, "run_resumed", None, None))

    def end(form: str) -> Callable[[str, int], Any]:
        sql = _form(SQL_END_RUN, form)
        return lambda run, i: conn.execute(sql, (run, 1, "completed", b"1", None, "run_completed", 3.0))

    return {
        "create_run": {f: created(f) for f in FORMS},
        "complete_step": {f: step(f) for f in FORMS},
        "create_wait (suspending)": {**{f: wait(f) for f in FORMS}, "python": wait_from_python},
        "save_checkpoint": {**{f: checkpoint(f) for f in FORMS}, "python": checkpoint_from_python},
        "lease (a resume)": {**{f: lease(f) for f in FORMS}, "python": lease_from_python},
        "end_run (fenced)": {f: end(f) for f in FORMS},
    }


def measure(n: int, rounds: int, directory: Path, batch: int = 32) -> dict[str, dict[str, float]]:
    """Median over ``rounds`` of the mean microseconds a statement, per transition and form,
    ``batch`` transitions a transaction."""
    path = directory / "statements.db"
    SQLiteStore(str(path), synchronous="OFF").close()  # the engine's schema
    conn = _connection(path)
    try:
        transitions = _transitions(conn)
        samples: dict[str, dict[str, list[float]]] = {
            name: {form: [] for form in forms} for name, forms in transitions.items()
        }
        runs = 0
        for _ in range(rounds):
            for name, forms in transitions.items():
                for form, write in forms.items():
                    spent = 0.0
                    for i in range(n):
                        if i % batch == 0:
                            conn.execute("BEGIN IMMEDIATE")
                        run = f"r{runs}"
                        runs += 1
                        conn.execute(SQL_CREATE_RUN, (run, "wf", "running", b"{}", 1.0, 1, "w", 99.0))
                        started = time.perf_counter()
                        write(run, i)
                        spent += time.perf_counter() - started
                        if i % batch == batch - 1 or i == n - 1:
                            conn.execute("COMMIT")
                    samples[name][form].append(spent / n * 1e6)
    finally:
        conn.close()
    return {
        name: {form: round(statistics.median(values), 2) for form, values in forms.items()}
        for name, forms in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sqlite_statements", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=4000, help="statements a form and round (default 4000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, forms alternated in each (default 5)")
    parser.add_argument(
        "--batch", type=int, default=32, help="transitions a transaction, as a writer's batch (default 32)"
    )
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.batch < 1:
        parser.error("--n, --rounds and --batch must be at least 1")
    with tempfile.TemporaryDirectory(prefix="pyworkflow-statements-") as directory:
        figures = measure(args.n, args.rounds, Path(directory), args.batch)
    print(
        f"microseconds a transition, median of {args.rounds} rounds of {args.n}, {args.batch} a transaction"
        f" (synchronous OFF,"
        f" SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}):"
    )
    for name, forms in figures.items():
        cells = "  ".join(f"{form} {value:6.2f}" for form, value in forms.items())
        print(f"  {name:26s} {cells}  or_fail/abort {forms['or_fail'] / forms['abort']:.2f}")
    if args.out is not None:
        args.out.write_text(
            json.dumps({"n": args.n, "rounds": args.rounds, "batch": args.batch, "us": figures}, indent=2)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
