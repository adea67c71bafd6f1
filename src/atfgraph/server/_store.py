"""The graph server's durable state, on SQLite (the default: one file) or PostgreSQL (a URL).

Each public coroutine is one state transition and runs as one write transaction on the shared
writer thread (group commit); reads run on this thread's reader connection as one snapshot. On
PostgreSQL the hot transitions are instead one statement each, a server-side function that is
PostgreSQL's copy of the rule written here (``_graph_pg``, migration postgres/0008), pipelined by
the same writer. Every
lookup goes through a primary key or an index (see migrations/<dialect>/), so the cost of an
operation does not grow with history.

The module is split by concept: the named statements (``_graph_sql``, one set for both
dialects), the rows and their JSON views (``_graph_rows``), the console's reads
(``_console_reads``) and, here, the transitions. SQLite has a single writer, so a transition's
reads and writes never interleave with another's; on PostgreSQL, where several servers may share
the database, each transition first locks the rows whose state it checks (the traverser, the
approval), and claims and sweeps skip rows another server holds.

A write function may be run twice by the writer (when another job of its batch fails, each job is
re-run alone), so it touches nothing but the connection it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from pyworkflow import CheckpointConflictError
from pyworkflow import store as kit
from pyworkflow.store import (
    WRITE_TIMEOUT,
    GroupCommitWriter,
    Migration,
    SQLiteDatabase,
    SQLiteStore,
    check_revision,
    crashpoint,
    load_migrations,
    pyworkflow_migrations,
    write_checkpoint,
)

from .._json import dumps, fragment, loads
from .._models import TraverserStatus
from . import _tracing as tracing
from ._approval_store import ApprovalTransitions
from ._assign import escalate_due
from ._console_reads import ConsoleReads
from ._dburl import parse_location
from ._graph_pg import PgTransitions
from ._graph_rows import (
    Conn,
    Lease,
    Row,
    StepRecord,
    SweepOutcome,
    _row,
    _rows,
    approval_view,
    new_id,
    step_view,
    traverser_view,
    worker_view,
)
from ._graph_sql import (
    ENGINE_STATUS,
    SQL_APPROVALS_OF,
    SQL_CANCEL_WAITS,
    SQL_CHECKPOINTS,
    SQL_CLAIM,
    SQL_DROP_QUEUE_ROW,
    SQL_EXPIRED_LEASES,
    SQL_FINISH,
    SQL_GET_CHECKPOINT,
    SQL_GET_MEMORY,
    SQL_GET_TRAVERSER,
    SQL_GET_WORKER,
    SQL_INSERT_TRAVERSER,
    SQL_INSERT_WORKER,
    SQL_LEASE,
    SQL_LEASES_OF_WORKER,
    SQL_LIST_TRAVERSERS,
    SQL_LOCK_TRAVERSER,
    SQL_NODES_WITH_WORK,
    SQL_QUEUE_RETRY,
    SQL_QUEUE_TRAVERSER,
    SQL_READY,
    SQL_RENEW,
    SQL_REQUEUE,
    SQL_RETRY,
    SQL_SET_TRACE_CONTEXT,
    SQL_STEPS,
    SQL_SWEEP_DUE,
    SQL_TRACE_CONTEXT,
    SQL_TRAVERSER_BY_KEY,
    SQL_TRAVERSER_EXISTS,
    SQL_UNLEASE,
    SQL_UPSERT_MEMORY,
    SQL_WORKER_SEEN,
    SQL_WORKERS,
    SWEEP_BATCH,
    TRAVERSER_SCOPE,
)
from ._identity import AuditEntry, identity_migrations, write_audit
from ._lease_rules import leased, live_row, record_steps
from ._observe import AttemptClock, reaped
from ._paging import Key, keyset
from ._refusals import Conflict, Forbidden, NotFound
from ._stamps import iso

T = TypeVar("T")


def server_migrations(dialect: str) -> list[Migration]:
    """The server's three version tracks, in the order they are applied: pyworkflow's runs and
    waits (so the server's inbox shows pyworkflow hooks beside approvals), atfgraph's graph state,
    and identity."""
    return [
        *pyworkflow_migrations(dialect),
        *load_migrations("atfgraph.server.migrations", dialect, "atfgraph"),
        *identity_migrations(dialect),
    ]


#: A worker that has sent no heartbeat for this many lease durations is taken to have stopped
#: answering (frozen, paused by a debugger, its loop blocked, or gone): claims in its name get
#: nothing, so a re-dispatched attempt goes to a worker that answers instead of into a long poll
#: the stopped one opened before it stopped. Heartbeats come every third of a lease, so a live
#: worker is never near it; its next heartbeat makes it eligible again.
SILENT_AFTER = 0.75
#: Leases this server handed out whose worker it remembers (started over when full).
_LEASE_HOLDERS_MAX = 100_000


class GraphStore(ApprovalTransitions, ConsoleReads):
    """The graph server's store: a SQLite file path, or a ``postgresql://`` URL. pyworkflow's
    tables live in the same database."""

    def __init__(
        self,
        location: str,
        *,
        lease_seconds: float = 30.0,
        synchronous: str = "FULL",
        write_timeout: float = WRITE_TIMEOUT,
    ) -> None:
        """``write_timeout``: seconds a transition may wait for the database (a lock another
        process holds, an unreachable PostgreSQL) before it fails with
        ``pyworkflow.DatabaseUnavailableError`` (the HTTP edge's 503 ``database_unavailable``)."""
        self.lease_seconds = lease_seconds
        #: worker id -> (its node, the token it registered with): neither ever changes
        self._worker_nodes: dict[str, tuple[str, str | None, str | None]] = {}
        # (traverser, epoch) -> the worker this server leased it to (see check_lease).
        self._lease_holders: dict[tuple[str, int], str] = {}
        self.attempts = AttemptClock()
        self.db: GroupCommitWriter[Any]
        #: pyworkflow's store on the same database (the inbox lists its hooks)
        self.pyworkflow: Any
        parsed = parse_location(location)  # a file path, sqlite:///..., or postgresql://...
        location = parsed.location
        if parsed.is_postgres:
            # Looked up here: psycopg is the postgres extra's, only imported for a URL.
            self.db = kit.PostgresDatabase(
                location,
                migrations=server_migrations("postgres"),
                write_timeout=write_timeout,
                lock_timeout_ms=max(1, int(write_timeout * 1000)),
            )
            try:
                self.pyworkflow = kit.PostgresStore(location, min_size=1, max_size=4)
            except BaseException:
                self.db.close()
                raise
            self._own_pyworkflow = True
            #: the hot transitions as server-side functions (SQLite runs the write functions)
            self._pg: PgTransitions | None = PgTransitions(self.db, self.db.reader)
        else:
            self.db = SQLiteDatabase(
                location,
                migrations=server_migrations("sqlite"),
                synchronous=synchronous,
                write_timeout=write_timeout,
            )
            # Shares the writer; never closed on its own.
            self.pyworkflow = SQLiteStore(location, db=self.db)
            self._own_pyworkflow = False
            self._pg = None

    @property
    def is_postgres(self) -> bool:
        return not isinstance(self.db, SQLiteDatabase)

    def close(self) -> None:
        if self._own_pyworkflow:
            self.pyworkflow.close()
        self.db.close()

    def _read(self, fn: Callable[[Conn], T]) -> T:
        """A read of several statements, in one snapshot."""
        return self.db.read(fn)

    def read_one(self, fn: Callable[[Conn], T]) -> T:
        """A read of one statement: a statement is its own snapshot, so no transaction is opened
        around it (on PostgreSQL that saves two round trips)."""
        return fn(self.db.reader())

    # -- lease checks ----------------------------------------------------------------------------

    _leased = staticmethod(leased)
    _record_steps = staticmethod(record_steps)

    async def check_lease(self, lease: Lease, *, live: bool = True) -> None:
        """Refuse a request made under ``lease`` unless it is the traverser's live lease now
        (NotFound, LeaseLost) held by the worker it names (Forbidden). A lease's worker never
        changes while its epoch stands (a claim sets both), so a write checked here and whose
        transaction then finds the same epoch live is that worker's.

        ``live=False`` (a write, whose transaction checks that the epoch is live): when this
        server handed the lease out it knows its worker, and no read is needed."""
        ident = lease.traverser_id
        holder = self._lease_holders.get((ident, lease.epoch))
        if not live and holder is not None:
            if lease.worker_id is not None and holder != lease.worker_id:
                raise Forbidden(f"the lease on traverser {ident!r} is held by another worker")
            return
        if self._pg is not None:
            row: Row | None = await self._pg.traverser_row(ident)
        else:
            row = self.read_one(lambda c: _row(c, SQL_GET_TRAVERSER, (ident,)))
        row = live_row(row, ident, lease.epoch, time.time())
        if lease.worker_id is not None and row["lease_worker"] != lease.worker_id:
            raise Forbidden(f"the lease on traverser {ident!r} is held by another worker")

    # -- traversers ------------------------------------------------------------------------------

    async def submit(
        self,
        target: str,
        input_json: bytes,
        max_attempts: int,
        idempotency_key: str | None = None,
        audit: AuditEntry | None = None,
        parent: Lease | None = None,
        trace_context: str | None = None,
        ident: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Queue a traverser; returns it and whether it was created (False: an earlier submission
        with the same idempotency key, returned as it is now). ``audit`` is recorded with the
        creation (its target becomes the new traverser's id). ``parent``: the lease (traverser,
        epoch) of the handler whose child step this is, refused unless it is live.
        ``trace_context``: the run's stored trace carrier (``_tracing``; written by the Python
        transition, which PostgreSQL's submission function predates). ``ident``: the new
        traverser's id (default: a new one)."""
        node_id = target.partition(".")[0]
        ident = ident or new_id()
        if self._pg is not None and parent is None and trace_context is None:
            made = await self._pg.submit(
                ident, target, input_json, node_id, max_attempts, idempotency_key, audit, time.time()
            )
            if made is not None:
                return made, True

        def earlier(conn: Conn) -> Row | None:
            found = _row(conn, SQL_TRAVERSER_BY_KEY, (idempotency_key,))
            if found is not None and (
                found["target"] != target or loads(found["input"]) != loads(input_json)
            ):
                raise Conflict(
                    f"idempotency key {idempotency_key!r} was used for a different submission",
                    "idempotency_conflict",
                )
            return found

        def fn(conn: Conn) -> tuple[dict[str, Any], bool]:
            now = time.time()
            if parent is not None:
                self._leased(conn, parent.traverser_id, parent.epoch, now)
            if idempotency_key is not None and (found := earlier(conn)) is not None:
                return traverser_view(found), False
            inserted = conn.execute(
                SQL_INSERT_TRAVERSER,
                (ident, target, input_json, node_id, max_attempts, idempotency_key, now, now),
            ).rowcount
            if inserted == 0:
                # A submission with this key committed on another server after our lookup (the
                # insert waited for it); a new statement sees it.
                found = earlier(conn)
                assert found is not None
                return traverser_view(found), False
            conn.execute(SQL_QUEUE_TRAVERSER, (ident, now, node_id))
            if trace_context is not None:
                conn.execute(SQL_SET_TRACE_CONTEXT, (trace_context, ident))
            row = _row(conn, SQL_GET_TRAVERSER, (ident,))
            assert row is not None
            if audit is not None:
                write_audit(conn, replace(audit, target=ident), now)
            return traverser_view(row), True

        return await self.db.write(fn)

    def trace_context(self, traverser_id: str) -> str | None:
        """The run's stored trace carrier (primary key), None when it has none."""
        found = self.read_one(lambda c: c.execute(SQL_TRACE_CONTEXT, (traverser_id,)).fetchone())
        return None if found is None else found[0]

    def get_traverser(self, traverser_id: str) -> dict[str, Any]:
        row = self.read_one(lambda c: _row(c, SQL_GET_TRAVERSER, (traverser_id,)))
        if row is None:
            raise NotFound.of("traverser", traverser_id)
        return traverser_view(row)

    async def read_traverser(self, traverser_id: str) -> dict[str, Any]:
        """:meth:`get_traverser` for a coroutine (a long poll): on PostgreSQL read in a writer's
        pipelined group instead of a round trip that holds up the event loop."""
        if self._pg is not None:
            return await self._pg.get_traverser(traverser_id)
        return self.get_traverser(traverser_id)

    def list_traversers(self, status: str, limit: int, after: Key | None = None) -> list[dict[str, Any]]:
        """Traversers in ``status``, newest first, after the cursor's ``(created_at, id)``."""
        cond, params, order = keyset(("r.created_at", "r.id"), True, after)
        sql = SQL_LIST_TRAVERSERS.format(where=cond, order=order)
        return [
            traverser_view(r)
            for r in self.read_one(lambda c: _rows(c, sql, (ENGINE_STATUS[status], *params, limit)))
        ]

    def path(self, traverser_id: str) -> dict[str, Any]:
        def fn(conn: Conn) -> dict[str, Any]:
            row = _row(conn, SQL_GET_TRAVERSER, (traverser_id,))
            if row is None:
                raise NotFound.of("traverser", traverser_id)
            steps = [step_view(s) for s in _rows(conn, SQL_STEPS, (traverser_id,))]
            return {"traverser": traverser_view(row), "steps": steps}

        return self._read(fn)

    async def cancel(
        self, traverser_id: str, audit: AuditEntry | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        """Cancel a traverser that has not finished (its pending approvals leave the inbox), with
        ``reason`` as its error's message; one already finished is returned as it is. ``audit``
        is recorded either way."""

        def fn(conn: Conn) -> dict[str, Any]:
            now = time.time()
            row = _row(conn, SQL_LOCK_TRAVERSER, (traverser_id,))
            if row is None:
                raise NotFound.of("traverser", traverser_id)
            if audit is not None:
                write_audit(conn, audit, now)
            if not TraverserStatus(row["status"]).is_terminal:
                error = dumps({"code": "cancelled", "message": reason or "cancelled by request"})
                _finish(conn, traverser_id, TraverserStatus.CANCELLED, None, error, now)
                conn.execute(SQL_CANCEL_WAITS, (now, traverser_id))
                row = _row(conn, SQL_GET_TRAVERSER, (traverser_id,))
                assert row is not None
            return traverser_view(row)

        return await self.db.write(fn)

    async def retry(self, traverser_id: str, audit: AuditEntry | None = None) -> dict[str, Any]:
        """A new attempt of a failed traverser: queued for its node with one more attempt
        allowed, from its checkpoints, recorded child steps and decided approvals. Refused for a
        traverser that has not failed (``invalid_state``); ``audit`` is recorded with it."""

        def fn(conn: Conn) -> dict[str, Any]:
            now = time.time()
            row = _row(conn, SQL_LOCK_TRAVERSER, (traverser_id,))
            if row is None:
                raise NotFound.of("traverser", traverser_id)
            if (
                row["status"] != TraverserStatus.FAILED
                or conn.execute(SQL_RETRY, (now, traverser_id)).rowcount == 0
            ):
                raise Conflict(
                    f"traverser {traverser_id!r} is {row['status']}; only a failed traverser is retried",
                    "invalid_state",
                )
            conn.execute(SQL_QUEUE_RETRY, (traverser_id, now, row["attempt"], row["node_id"]))
            if audit is not None:
                write_audit(conn, audit, now)
            retried = _row(conn, SQL_GET_TRAVERSER, (traverser_id,))
            assert retried is not None
            return traverser_view(retried)

        return await self.db.write(fn)

    # -- workers and leases ----------------------------------------------------------------------

    async def register_worker(
        self, node_id: str, version: str, capacity: int, token_id: str | None = None
    ) -> dict[str, Any]:
        """Register a worker; ``token_id`` is the credential it registered with, the only worker
        credential that may then act as it (see :meth:`worker_token`)."""
        ident = new_id()

        def fn(conn: Conn) -> dict[str, Any]:
            now = time.time()
            conn.execute(SQL_INSERT_WORKER, (ident, node_id, version, capacity, now, now, token_id))
            row = _row(conn, SQL_GET_WORKER, (ident,))
            assert row is not None
            return worker_view(row)

        return await self.db.write(fn)

    def list_workers(self, limit: int, after: Key | None = None) -> list[dict[str, Any]]:
        """Workers, newest registration first, after the cursor's ``(registered_at, id)``."""
        cond, params, order = keyset(("registered_at", "id"), True, after)
        sql = SQL_WORKERS.format(where=cond, order=order)
        return [worker_view(r) for r in self.read_one(lambda c: _rows(c, sql, (*params, limit)))]

    def worker_node(self, worker_id: str) -> str:
        """The node a worker serves (never changes: remembered after the first lookup)."""
        return self._worker_identity(worker_id)[0]

    def worker_token(self, worker_id: str) -> str | None:
        """The id of the token the worker registered with (None: registered before tokens were
        recorded, or by a caller without one); ``404`` for an unknown worker."""
        return self._worker_identity(worker_id)[1]

    def worker_version(self, worker_id: str) -> str | None:
        """The version of its node a worker runs (None: it registered without one)."""
        return self._worker_identity(worker_id)[2]

    def _worker_identity(self, worker_id: str) -> tuple[str, str | None, str | None]:
        known = self._worker_nodes.get(worker_id)
        if known is None:
            row = self.read_one(lambda c: _row(c, SQL_GET_WORKER, (worker_id,)))
            if row is None:
                raise NotFound.of("worker", worker_id)
            known = (str(row["node_id"]), row["token_id"], row["version"])
            if len(self._worker_nodes) >= 10_000:
                self._worker_nodes.clear()
            self._worker_nodes[worker_id] = known
        return known

    def get_worker(self, worker_id: str) -> dict[str, Any]:
        row = self.read_one(lambda c: _row(c, SQL_GET_WORKER, (worker_id,)))
        if row is None:
            raise NotFound.of("worker", worker_id)
        return worker_view(row)

    async def _claim(self, worker_id: str, limit: int) -> list[dict[str, Any]]:
        """Lease up to ``limit`` queued traversers of the worker's (node, version), each returned
        with everything its handler reads on replay: checkpoints, recorded steps, approvals."""
        if self._pg is not None:
            now = time.time()
            return await self._pg.claim(
                worker_id, limit, now, now + self.lease_seconds, self._silent_before(now)
            )

        def fn(conn: Conn) -> list[dict[str, Any]]:
            now = time.time()
            worker = _row(conn, SQL_GET_WORKER, (worker_id,))
            if worker is None:
                raise NotFound.of("worker", worker_id)
            if worker["last_seen"] < self._silent_before(now):
                return []  # it stopped answering: its open long polls get nothing (see SILENT_AFTER)
            ids = [r[0] for r in conn.execute(SQL_READY, (worker["node_id"], now, worker["version"], limit))]
            tasks: list[dict[str, Any]] = []
            expires = now + self.lease_seconds
            for ident in ids:
                if conn.execute(SQL_CLAIM, (worker["version"], now, ident)).rowcount == 0:
                    continue  # no longer queued (cancelled since it was read)
                conn.execute(SQL_LEASE, (worker_id, expires, ident))
                row = _row(conn, SQL_GET_TRAVERSER, (ident,))
                assert row is not None
                tasks.append(
                    {
                        "traverser": traverser_view(row),
                        "epoch": row["epoch"],
                        "lease_expires_at": expires,
                        "lease_expires_at_iso": iso(expires),
                        "checkpoints": {
                            c["name"]: {"value": fragment(c["value"]), "revision": c["revision"]}
                            for c in _rows(conn, SQL_CHECKPOINTS, (ident,))
                        },
                        "steps": [step_view(s) for s in _rows(conn, SQL_STEPS, (ident,))],
                        "approvals": [approval_view(a) for a in _rows(conn, SQL_APPROVALS_OF, (ident,))],
                    }
                )
            return tasks

        return await self.db.write(fn)

    def _silent_before(self, now: float) -> float:
        return now - SILENT_AFTER * self.lease_seconds

    async def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[str, int]], stats: bytes | None
    ) -> tuple[list[str], bool]:
        """Extend the worker's leases; return the ids whose lease it no longer holds, and whether
        the worker had been silent (no heartbeat for SILENT_AFTER leases) until now."""

        def fn(conn: Conn) -> tuple[list[str], bool]:
            now = time.time()
            worker = _row(conn, SQL_GET_WORKER, (worker_id,))
            if worker is None:
                raise NotFound.of("worker", worker_id)
            conn.execute(SQL_WORKER_SEEN, (now, stats, worker_id))
            lost: list[str] = []
            for ident, epoch in leases:
                if conn.execute(SQL_RENEW, (now + self.lease_seconds, ident, epoch, worker_id)).rowcount == 0:
                    lost.append(ident)
            return lost, worker["last_seen"] < self._silent_before(now)

        return await self.db.write(fn)

    async def _complete(
        self, traverser_id: str, epoch: int, result: bytes, steps: Sequence[StepRecord]
    ) -> None:
        if self._pg is not None:
            await self._pg.end_attempt(traverser_id, epoch, "succeeded", result, False, steps, time.time())
            return

        def fn(conn: Conn) -> None:
            now = time.time()
            row = self._leased(conn, traverser_id, epoch, now)
            self._record_steps(conn, row, steps, now)
            _finish(conn, traverser_id, TraverserStatus.SUCCEEDED, result, None, now)

        await self.db.write(fn)

    async def _fail(
        self, traverser_id: str, epoch: int, error: bytes, retryable: bool, steps: Sequence[StepRecord]
    ) -> str:
        """End the attempt with an error: queued again while attempts remain and the error is
        retryable, else failed. Returns the new status."""
        if self._pg is not None:
            return await self._pg.end_attempt(
                traverser_id, epoch, "failed", error, retryable, steps, time.time()
            )

        def fn(conn: Conn) -> str:
            now = time.time()
            row = self._leased(conn, traverser_id, epoch, now)
            self._record_steps(conn, row, steps, now)
            if retryable and row["attempt"] < row["max_attempts"]:
                _requeue(conn, traverser_id, error, charged=True, now=now)
                return TraverserStatus.QUEUED.value
            _finish(conn, traverser_id, TraverserStatus.FAILED, None, error, now)
            return TraverserStatus.FAILED.value

        return await self.db.write(fn)

    async def _release(self, traverser_id: str, epoch: int, steps: Sequence[StepRecord]) -> None:
        """Give a lease back unfinished (worker shutdown): queued again, the attempt not charged."""
        if self._pg is not None:
            await self._pg.end_attempt(traverser_id, epoch, "released", None, False, steps, time.time())
            return

        def fn(conn: Conn) -> None:
            now = time.time()
            row = self._leased(conn, traverser_id, epoch, now)
            self._record_steps(conn, row, steps, now)
            _requeue(conn, traverser_id, row["error"], charged=False, now=now)

        await self.db.write(fn)

    async def release_all(self, worker_id: str) -> list[str]:
        """Give back every lease a stopping worker still holds (uncharged); returns their nodes.
        Covers the race where the worker stopped while a claim's answer was in flight: those
        tasks would otherwise wait for their lease to expire and be charged an attempt."""

        def fn(conn: Conn) -> list[str]:
            now = time.time()
            rows = conn.execute(SQL_LEASES_OF_WORKER, (worker_id,)).fetchall()
            for row in rows:
                _requeue(conn, row[0], None, charged=False, now=now)
            return sorted({row[1] for row in rows})

        return await self.db.write(fn)

    # -- checkpoints and memory ------------------------------------------------------------------

    async def save_checkpoint(
        self,
        traverser_id: str,
        epoch: int,
        name: str,
        value: bytes,
        expected_revision: int | None,
        steps: Sequence[StepRecord],
    ) -> int:
        if self._pg is not None:
            return await self._pg.save_checkpoint(
                traverser_id, epoch, name, value, expected_revision, steps, time.time()
            )

        def fn(conn: Conn) -> int:
            now = time.time()
            row = self._leased(conn, traverser_id, epoch, now)
            self._record_steps(conn, row, steps, now)
            try:
                return write_checkpoint(
                    conn, traverser_id, TRAVERSER_SCOPE, name, value, expected_revision, now
                )
            except CheckpointConflictError as exc:
                raise Conflict(str(exc), "revision_conflict") from None

        return await self.db.write(fn)

    def get_checkpoint(self, traverser_id: str, name: str) -> dict[str, Any]:
        def fn(conn: Conn) -> tuple[bool, Any]:
            exists = conn.execute(SQL_TRAVERSER_EXISTS, (traverser_id,)).fetchone()
            return exists is not None, conn.execute(SQL_GET_CHECKPOINT, (traverser_id, name)).fetchone()

        exists, found = self._read(fn)
        if not exists:
            raise NotFound.of("traverser", traverser_id)
        if found is None:
            raise NotFound.of("checkpoint", name)
        return {"traverser_id": traverser_id, "name": name, "value": fragment(found[0]), "revision": found[1]}

    async def save_memory(
        self,
        scope: str,
        key: str,
        value: bytes,
        expected_revision: int | None,
        lease: Lease | None,
    ) -> int:
        def fn(conn: Conn) -> int:
            now = time.time()
            if lease is not None:
                self._leased(conn, lease.traverser_id, lease.epoch, now)
            current = conn.execute(SQL_GET_MEMORY, (scope, key)).fetchone()
            revision = 0 if current is None else int(current[1])
            try:
                check_revision(f"memory {f'{scope}/{key}'!r}", expected_revision, revision)
            except CheckpointConflictError as exc:
                raise Conflict(str(exc), "revision_conflict") from None
            if (
                conn.execute(SQL_UPSERT_MEMORY, (scope, key, value, revision + 1, now, revision)).rowcount
                == 0
            ):
                raise Conflict(
                    f"memory {scope}/{key!r} was written concurrently; read it again", "revision_conflict"
                )
            return revision + 1

        return await self.db.write(fn)

    def get_memory(self, scope: str, key: str) -> dict[str, Any]:
        found = self.read_one(lambda c: c.execute(SQL_GET_MEMORY, (scope, key)).fetchone())
        if found is None:
            raise NotFound.of("memory", f"{scope}/{key}")
        return {"scope": scope, "key": key, "value": fragment(found[0]), "revision": found[1]}

    # -- the sweeper's transitions ---------------------------------------------------------------

    async def _sweep(self) -> SweepOutcome:
        """Fire what fell due: the engine's one sweeper expires due waits (approvals, and the
        hooks and timers of pyworkflow runs in this database), which continues the traversers
        paused on them; then the reaper settles remote leases that ran out (retrying or failing
        their traversers). Safe at any time, including right after a restart, when it catches up
        on everything that fell due while the server was down."""
        out = SweepOutcome(set(), set())
        # Approvals whose handler asked for an escalation are re-assigned before they expire: all
        # of those due by ``now`` (batch after batch), then the expiry of what fell due by the
        # same ``now``, so that a deadline falling between the two can never expire an approval
        # that was to escalate. On the writer (a read-only transaction when there is none): the
        # request threads' readers see nothing of the background tasks.
        now = time.time()
        # First one read of three index entries (SQL_SWEEP_DUE): with nothing due, a tick is that
        # read rather than two or three transactions. A statement on the writer, as the rest.
        due = await self.db.submit(SQL_SWEEP_DUE, (now, now, now), "")
        if not any(due[0]):
            return out
        while await self.db.write(lambda conn: escalate_due(conn, SWEEP_BATCH, now)) >= SWEEP_BATCH:
            pass
        expired = await self.pyworkflow.expire_due_waits(now=now, limit=SWEEP_BATCH)

        def reap(conn: Conn) -> SweepOutcome:
            now = time.time()
            for tid, node, attempt, max_attempts in conn.execute(
                SQL_EXPIRED_LEASES, (now, SWEEP_BATCH)
            ).fetchall():
                message = f"lease expired during attempt {attempt} (worker lost or hung)"
                if attempt < max_attempts:
                    _requeue(
                        conn, tid, dumps({"code": "lease_expired", "message": message}), charged=True, now=now
                    )
                    out.nodes.add(node)
                else:
                    error = dumps({"code": "lease_expired", "message": f"{message}; no attempts left"})
                    _finish(conn, tid, TraverserStatus.FAILED, None, error, now)
                out.traversers.add(tid)
            if expired:
                out.nodes.update(r[0] for r in conn.execute(SQL_NODES_WITH_WORK, (now,)).fetchall())
            return out

        return await self.db.write(reap)

    # -- the worker protocol's transitions, observed (metrics and logs: _observe) ---------------

    async def claim(self, worker_id: str, limit: int) -> list[dict[str, Any]]:
        tasks = await self._claim(worker_id, limit)
        if tasks and tracing.enabled():
            ids = [t["traverser"]["id"] for t in tasks]
            found = self.read_one(
                lambda c: tracing.stored_contexts(lambda q, p: c.execute(q, p).fetchall(), ids)
            )
            tracing.add_to_tasks(tasks, found)
        if tasks:
            crashpoint("server_after_claim")
            self.attempts.claimed(tasks, time.time())
            if len(self._lease_holders) >= _LEASE_HOLDERS_MAX:
                self._lease_holders.clear()
            for task in tasks:
                self._lease_holders[(task["traverser"]["id"], task["epoch"])] = worker_id
        return tasks

    async def complete(
        self, traverser_id: str, epoch: int, result: bytes, steps: Sequence[StepRecord]
    ) -> None:
        await self._complete(traverser_id, epoch, result, steps)
        crashpoint("server_after_complete")
        self.attempts.ended(traverser_id, epoch, "succeeded")

    async def fail(
        self, traverser_id: str, epoch: int, error: bytes, retryable: bool, steps: Sequence[StepRecord]
    ) -> str:
        status = await self._fail(traverser_id, epoch, error, retryable, steps)
        self.attempts.ended(
            traverser_id, epoch, "retrying" if status == TraverserStatus.QUEUED.value else "failed"
        )
        return status

    async def release(self, traverser_id: str, epoch: int, steps: Sequence[StepRecord]) -> None:
        await self._release(traverser_id, epoch, steps)
        self.attempts.ended(traverser_id, epoch, "released")

    async def sweep(self) -> SweepOutcome:
        outcome = await self._sweep()
        if outcome.nodes or outcome.traversers:
            crashpoint("server_after_sweep")
        reaped(outcome.traversers)
        return outcome


def _finish(conn: Conn, traverser_id: str, status: TraverserStatus, result: bytes | None,
            error: bytes | None, now: float) -> None:  # fmt: skip
    """End an attempt with a terminal outcome: the run finished, its queue row (lease) gone."""
    conn.execute(SQL_FINISH, (ENGINE_STATUS[status.value], result, error, now, now, traverser_id))
    conn.execute(SQL_DROP_QUEUE_ROW, (traverser_id,))


def _requeue(conn: Conn, traverser_id: str, error: bytes | None, *, charged: bool, now: float) -> None:
    """End an attempt and queue another: the lease is given back and the row due now. An attempt
    not charged (a release) gives one more attempt to the budget."""
    conn.execute(SQL_REQUEUE, (error, 0 if charged else 1, now, traverser_id))
    conn.execute(SQL_UNLEASE, (now, traverser_id))
