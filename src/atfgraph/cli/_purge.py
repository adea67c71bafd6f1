"""``atfg db purge``: retention on demand, on the database itself (no server needed).

Runs of either face that finished (completed, failed, cancelled) more than ``--older-than`` ago
are deleted with their events, steps, waits, checkpoints and this component's rows about their
waits; the audit trail has its own cut-off, ``--audit-older-than``. ``--dry-run`` counts what
would go, per table, and deletes nothing. Bounded batches, one short transaction each, so a
server running on the same database keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import click

from ._base import EXIT_UNAVAILABLE, EXIT_USAGE, CliError, output_option
from ._db import db
from ._output import emit_list, field, progress


def _age(option: str, raw: str | None) -> float | None:
    if raw is None:
        return None
    from pyworkflow import ConfigurationError
    from pyworkflow.store import parse_age

    try:
        return parse_age(raw, what=option)
    except ConfigurationError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


@db.command("purge")
@click.option(
    "--db",
    "db_path",
    default=None,
    help="SQLite file or postgresql:// URL [$ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db].",
)
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="Delete runs that finished longer ago than AGE (30d, 12h, 90m, 45s, 2w).",
)
@click.option(
    "--audit-older-than",
    default=None,
    metavar="AGE",
    help="Delete audit entries older than AGE (the trail has its own retention).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted, per table; delete nothing.")
@output_option
@click.pass_context
def db_purge(
    ctx: click.Context,
    db_path: str | None,
    older_than: str | None,
    audit_older_than: str | None,
    dry_run: bool,
) -> None:
    """Delete finished runs (and, separately, audit entries) older than an age, in bounded
    batches; prints the rows deleted (or, with --dry-run, that would be) per table."""
    import os

    from pyworkflow import ConfigurationError

    from ..server._dburl import first_line, parse_location, redact
    from ..server._retention import count, purge
    from ..server._store import GraphStore
    from ._db import _default_db_path

    runs_age = _age("--older-than", older_than)
    audit_age = _age("--audit-older-than", audit_older_than)
    if runs_age is None and audit_age is None:
        raise CliError(
            "say what to purge: --older-than AGE (runs), --audit-older-than AGE, or both", EXIT_USAGE
        )
    try:
        location = parse_location(db_path or os.environ.get("ATFGRAPH_DB") or _default_db_path())
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", EXIT_USAGE) from None
    if not location.is_postgres and not Path(location.location).is_file():
        raise CliError(f"--db: no database file at {location.location}", EXIT_USAGE)
    shown = redact(location.location)
    now = time.time()
    runs_before = None if runs_age is None else now - runs_age
    audit_before = None if audit_age is None else now - audit_age
    try:
        store = GraphStore(location.location)
    except Exception as exc:  # any failure to open it: the message says which
        raise CliError(f"cannot open {shown}: {first_line(exc)}", EXIT_UNAVAILABLE) from None
    try:
        if dry_run:
            counts = store.db.read(
                lambda conn: count(conn, runs_before=runs_before, audit_before=audit_before)
            )
            progress(f"{shown}: dry run, nothing deleted; {counts.get('runs', 0)} run(s) would be purged")
        else:
            report = asyncio.run(purge(store.db, runs_before=runs_before, audit_before=audit_before))
            counts = report.counts
            rate = (
                f", {report.runs / report.seconds:.0f} runs/s" if report.runs and report.seconds > 0 else ""
            )
            progress(
                f"{shown}: purged {report.runs} run(s) and {counts.get('atfg_audit', 0)} audit entr(ies) "
                f"in {report.batches} batch(es), {report.seconds:.2f} s{rate}"
            )
    except CliError:
        raise
    except Exception as exc:  # the database refused (locked past the timeout, gone)
        raise CliError(f"cannot purge {shown}: {first_line(exc)}", EXIT_UNAVAILABLE) from None
    finally:
        store.close()
    emit_list(
        ctx,
        [{"table": table, "rows": rows} for table, rows in counts.items()],
        [("TABLE", field("table")), ("ROWS", field("rows"))],
    )
