"""Retention on the server's database: finished runs of both faces (the engine's rule,
:func:`pyworkflow.store.purge_runs`) and, separately, the audit trail.

A run's own rows go with it (events, steps, waits, checkpoints); this component's rows about its
waits (decision links, deliveries, assignments, the notification outbox) are deleted by the
trigger of atfgraph migration 0009/0011 in the same transaction, and counted here. The audit
trail outlives the runs it mentions: it has its own cut-off (``--audit-older-than``, the server's
``--audit-retention``), since an operator often keeps who-did-what longer than the runs.

Both purges go in bounded batches, one short transaction each (see :mod:`pyworkflow.store`'s
retention for why). Used by the server's purger task (off unless a retention is set) and by
``atfg db purge``.
"""

from __future__ import annotations

import time
from typing import Any

from pyworkflow.store import PurgeReport, count_purgeable, purge_runs

#: This component's rows about a wait, deleted with it by the trigger ``atfg_wait_deleted``.
WAIT_ROWS: tuple[tuple[str, str], ...] = (
    ("atfg_wait_links", "wait_id"),
    ("atfg_deliveries", "wait_id"),
    ("atfg_assignments", "wait_id"),
    ("atfg_wait_events", "wait_id"),
)
#: Audit entries deleted per transaction.
AUDIT_BATCH = 1000

#: The oldest audit entries before a cut-off (``atfg_audit_by_at``, identity migration 0003).
SQL_OLD_AUDIT = "SELECT id FROM atfg_audit WHERE at < ? ORDER BY at LIMIT ? /*FOR UPDATE SKIP LOCKED*/"
#: How many audit entries a purge with this cut-off would delete (the dry run).
SQL_COUNT_OLD_AUDIT = "SELECT COUNT(*) FROM atfg_audit WHERE at < ?"


def _purge_audit_batch(conn: Any, before: float, limit: int) -> int:
    ids = [r[0] for r in conn.execute(SQL_OLD_AUDIT, (before, limit)).fetchall()]
    if not ids:
        return 0
    marks = ", ".join("?" * len(ids))
    return int(conn.execute(f"DELETE FROM atfg_audit WHERE id IN ({marks})", tuple(ids)).rowcount)


async def purge(
    db: Any,
    *,
    runs_before: float | None,
    audit_before: float | None,
    max_batches: int | None = None,
) -> PurgeReport:
    """Delete runs finished before ``runs_before`` and audit entries older than
    ``audit_before`` (either None: that part is kept), in batches on ``db`` (the graph store's
    kit database); ``max_batches`` bounds each part."""
    report = (
        PurgeReport()
        if runs_before is None
        else await purge_runs(db, runs_before, max_batches=max_batches, counted=WAIT_ROWS)
    )
    if audit_before is not None:
        started = time.monotonic()
        batches = deleted = 0
        while max_batches is None or batches < max_batches:
            n = await db.write(lambda conn: _purge_audit_batch(conn, audit_before, AUDIT_BATCH))
            batches += 1
            deleted += n
            if n < AUDIT_BATCH:
                break
        else:
            report.finished = False
        report.add({"atfg_audit": deleted})
        report.batches += batches
        report.seconds += time.monotonic() - started
    return report


def count(conn: Any, *, runs_before: float | None, audit_before: float | None) -> dict[str, int]:
    """What :func:`purge` would delete now, per table (a read on ``conn``: the dry run)."""
    counts = {} if runs_before is None else count_purgeable(conn, runs_before, counted=WAIT_ROWS)
    if audit_before is not None:
        counts["atfg_audit"] = int(conn.execute(SQL_COUNT_OLD_AUDIT, (audit_before,)).fetchone()[0])
    return counts


#: Batches one pass of the server's purger runs at most before it lets the sweeper's and the
#: requests' writes through for a moment (each batch is its own transaction anyway).
PASS_BATCHES = 20


def retention_setting(flag: str | None, env: str) -> float | None:
    """An age from a flag, else from ``$env``; None (keep everything) when neither is set;
    ValueError for one that is not an age (the server refuses to start)."""
    import os

    from pyworkflow import ConfigurationError
    from pyworkflow.store import parse_age

    raw = flag if flag is not None else os.environ.get(env, "").strip() or None
    if raw is None:
        return None
    try:
        return parse_age(raw, what=f"the retention ({env})" if flag is None else "the retention")
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


def purge_seconds() -> float:
    """Seconds between the purger's passes: ``$ATFGRAPH_PURGE_SECONDS``, else 60."""
    import os

    raw = os.environ.get("ATFGRAPH_PURGE_SECONDS", "60")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"$ATFGRAPH_PURGE_SECONDS must be a positive number of seconds, not {raw!r}")
    return value


async def purge_forever(
    db: Any, retention: float | None, audit_retention: float | None, every: float
) -> None:
    """The server's purger (started only when a retention is set): a pass every ``every``
    seconds, at once again while a pass leaves work behind."""
    import asyncio
    import logging

    log = logging.getLogger("atfgraph.server")
    while True:
        pause = every
        try:
            now = time.time()
            report = await purge(
                db,
                runs_before=None if retention is None else now - retention,
                audit_before=None if audit_retention is None else now - audit_retention,
                max_batches=PASS_BATCHES,
            )
            if report.runs or report.counts.get("atfg_audit"):
                log.info(
                    "retention: purged %d run(s) and %d audit entr(ies) in %.2f s",
                    report.runs,
                    report.counts.get("atfg_audit", 0),
                    report.seconds,
                )
            if not report.finished:
                pause = 0.05
        except Exception as exc:  # keep purging later; one bad pass must not stop retention
            log.warning(
                "retention pass failed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            )
        await asyncio.sleep(pause)
