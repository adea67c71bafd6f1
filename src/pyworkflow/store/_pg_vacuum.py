"""The run queue's vacuum on PostgreSQL, started by the loops that serve the queue.

Every turn changes rows of ``queue`` (a start inserts one, a claim takes its lease, a suspension
or the end of the run deletes it), and each change leaves a dead row version in the table and in
its indexes until a ``VACUUM`` removes it. A claim reads the queue's index in due order, so the
dead versions at its front are read again by every claim until then. Migration 0013 asks
autovacuum to vacuum ``queue`` after every 1,000 changes, but autovacuum looks at each database
once per ``autovacuum_naptime`` (a minute by default), and a busy queue leaves some 100,000 dead
versions in a minute. On the graph server's approval cycle (``python -m bench.atfgraph_cycles
-n 40000 -c 24 --capacity 24 --park 0 --db postgresql://...``, two minutes) with autovacuum on,
PostgreSQL's CPU per cycle was 1.61-1.64 ms and the throughput 273-278 cycles/s; with this
vacuum, 1.37-1.38 ms and 302-303 cycles/s (docs/atfgraph.md, "2026-12-06").

So each loop that serves the queue (pyworkflow's local runtime and Celery sweeper, the graph
server's sweeper) ticks a :class:`QueueVacuum`: every :data:`LOOK_SECONDS` it reads the queue's
count of dead row versions (``pg_stat_user_tables``, kept by PostgreSQL in shared memory) and,
from :data:`DEAD_ROWS` (the table's autovacuum threshold), vacuums it. Both run on a thread of
the vacuum's own, so no loop waits for them. ``VACUUM`` takes no lock a read or a write waits
for, and with ``SKIP_LOCKED`` a process skips a pass while another (or autovacuum) is at it. A
role that may not vacuum the table (neither its owner nor the database's, nor a superuser, nor on
PostgreSQL 17 a role with ``MAINTAIN`` on it) gets a warning from PostgreSQL instead of a vacuum:
the process logs it once and stops trying. While something older than the dead rows keeps them
(an idle transaction left open), a vacuum removes nothing, and the looks back off (see
:data:`MAX_PAUSE_SECONDS`) rather than vacuum in vain every second.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from ._metrics import QUEUE_VACUUMS, labelled

if TYPE_CHECKING:
    import psycopg

    from ._pg_db import PgConnection

_log = logging.getLogger("pyworkflow.postgres")

#: Dead row versions in ``queue`` from which a look vacuums it: the threshold migration 0013
#: gives autovacuum for the table.
DEAD_ROWS = 1_000
#: Seconds between two looks at the count.
LOOK_SECONDS = 1.0
#: The longest pause between looks while vacuums leave the dead rows where they are (a
#: transaction older than them still sees them: an idle transaction left open, a long report, a
#: replica's feedback) or looks fail (the database down): each such vacuum or failed look
#: doubles the pause, up to autovacuum's default naptime.
MAX_PAUSE_SECONDS = 60.0

SQL_DEAD_ROWS = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('queue')"
SQL_VACUUM = "VACUUM (SKIP_LOCKED) queue"
#: The warning ``SKIP_LOCKED`` gives when another vacuum holds the table: not a refusal.
_LOCK_NOT_AVAILABLE = "55P03"


class QueueVacuum:
    """Vacuums ``queue`` in the PostgreSQL database at ``url`` when it has :data:`DEAD_ROWS` dead
    row versions or more, looked at ``every`` seconds after the last look ended (see the module's
    docstring). :meth:`tick` from the owner's loop; :meth:`close` when it stops."""

    def __init__(self, url: str, *, dead_rows: int = DEAD_ROWS, every: float = LOOK_SECONDS) -> None:
        if dead_rows < 1 or not every > 0:
            raise ValueError("dead_rows must be at least 1 and every positive")
        self.url = url
        self.dead_rows = dead_rows
        self.every = every
        #: vacuums this process ran, and why it stopped trying (None while it tries)
        self.vacuums = 0
        self.refused: str | None = None
        #: seconds from one look to the next (``every``, longer while vacuums remove nothing)
        self.pause = every
        self._next = 0.0
        self._conn: PgConnection | None = None
        #: (severity, SQLSTATE, message) of the notices of the statement under way
        self._warnings: list[tuple[str | None, str | None, str | None]] = []
        self._look: concurrent.futures.Future[None] | None = None
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    @classmethod
    def of(cls, db: Any) -> QueueVacuum | None:
        """The vacuum for a kit database if it is a PostgreSQL one (None for SQLite, whose
        deleted rows leave nothing that a later read must step over)."""
        pg_db = sys.modules.get("pyworkflow.store._pg_db")  # loaded wherever one is open
        if pg_db is None or not isinstance(db, pg_db.PostgresDatabase):
            return None
        return cls(db.url)

    def tick(self) -> bool:
        """Start a look if one is due and the last has finished (True); costs a clock read when
        not. Never waits for the database."""
        now = time.monotonic()
        with self._lock:
            if now < self._next or self.refused is not None or self._closed:
                return False
            if self._look is not None and not self._look.done():
                return False
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pyworkflow-vacuum")
            self._look = self._pool.submit(self._look_once)
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the look under way, if any, to finish (tests, shutdown)."""
        look = self._look
        if look is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                look.result(timeout)

    def _look_once(self) -> None:
        try:
            conn = self._connection()
            row = conn.execute(SQL_DEAD_ROWS).fetchone()
            if row is None or row[0] is None or row[0] < self.dead_rows:
                self.pause = self.every
                return
            self._warnings.clear()
            conn.execute(SQL_VACUUM)
            warned = [w for w in self._warnings if w[0] == "WARNING"]
            refusals = [w for w in warned if w[1] != _LOCK_NOT_AVAILABLE]
            if refusals:
                labelled(QUEUE_VACUUMS, "refused").inc()
                self.refused = refusals[0][2] or "a warning"
                _log.warning(
                    "this process stops vacuuming the run queue: PostgreSQL said %r (let its owner "
                    "vacuum it, or rely on autovacuum: docs/deployment.md)",
                    self.refused,
                )
            elif warned:
                labelled(QUEUE_VACUUMS, "skipped").inc()
            else:
                labelled(QUEUE_VACUUMS, "vacuumed").inc()
                self.vacuums += 1
                left = conn.execute(SQL_DEAD_ROWS).fetchone()  # what the vacuum could not remove
                kept = left is not None and left[0] is not None and left[0] >= self.dead_rows
                self.pause = min(self.pause * 2, MAX_PAUSE_SECONDS) if kept else self.every
        except Exception as exc:  # the database is down or restarting: a later look tries again
            labelled(QUEUE_VACUUMS, "failed").inc()
            self._drop()
            self.pause = min(self.pause * 2, MAX_PAUSE_SECONDS)
            _log.debug("the run queue's vacuum failed: %s", exc)
        finally:
            self._next = time.monotonic() + self.pause  # the pause runs from the look's end

    def _connection(self) -> PgConnection:
        if self._conn is None or not self._conn.usable:
            self._drop()
            from ._pg_db import _connect

            # No statement timeout (not even the role's): a vacuum of a long-neglected queue may
            # take a while, and only this thread waits for it.
            self._conn = _connect(self.url, options="-c statement_timeout=0")
            self._conn.raw.add_notice_handler(self._noticed)
        return self._conn

    def _noticed(self, notice: psycopg.errors.Diagnostic) -> None:
        # Read now: the notice's fields are gone once the handler returns.
        self._warnings.append((notice.severity_nonlocalized, notice.sqlstate, notice.message_primary))

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        """Stop looking: a vacuum under way is cancelled (it keeps what it had done) and its
        connection closed."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            look, conn = self._look, self._conn
        if look is not None and not look.done() and conn is not None:
            with contextlib.suppress(Exception):
                conn.raw.cancel_safe(timeout=2.0)
        if pool is not None:
            pool.shutdown(wait=True)
        self._drop()
