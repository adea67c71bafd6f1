"""The graph store's approval transitions and reads: an approval is a wait of kind ``approval``
(run, operation key) in the engine's waits table. Mixed into
:class:`~atfgraph.server._store.GraphStore`, which supplies the writer, the reader and, on
PostgreSQL, the server-side functions."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from pyworkflow.store import GroupCommitWriter, wake_run

from .._json import loads
from .._models import ApprovalStatus, TraverserStatus
from ._graph_pg import PgTransitions
from ._graph_rows import Conn, StepRecord, _row, _rows, approval_view, new_id
from ._graph_sql import (
    APPROVAL_STATUS_WHERE,
    SQL_APPROVAL_BY_KEY,
    SQL_DECIDE,
    SQL_DECISION_TERMS,
    SQL_DROP_QUEUE_ROW,
    SQL_GET_APPROVAL,
    SQL_INSERT_APPROVAL,
    SQL_LIST_APPROVALS,
    SQL_LOCK_APPROVAL,
    SQL_LOCK_TRAVERSER,
    SQL_PAUSE,
)
from ._identity import AuditEntry, write_audit
from ._lease_rules import leased, record_steps
from ._paging import Key, keyset
from ._refusals import Conflict, NotFound

T = TypeVar("T")


class ApprovalTransitions:
    """Request, decide and read approvals."""

    db: GroupCommitWriter[Any]
    _pg: PgTransitions | None

    def read_one(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    async def request_approval(
        self,
        traverser_id: str,
        epoch: int | None,
        operation_key: str,
        prompt: bytes,
        checkpoint: bytes | None,
        expires_in_seconds: float | None,
        pause: bool,
        steps: Sequence[StepRecord],
        audit: AuditEntry | None = None,
        response_schema: bytes | None = None,
        also: Callable[[Conn, str], None] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Find or create the approval (traverser, operation_key). Returns it and whether the
        traverser is now paused on it (a pending approval requested with ``pause``). ``audit``
        is recorded when the approval is created (its target becomes the approval's id), and
        ``also(conn, approval_id)`` runs in that transaction then (an assignment is written).
        ``response_schema`` (a JSON Schema) is stored as the wait's payload schema. The
        PostgreSQL function takes neither, so such a request runs the Python rule."""
        if self._pg is not None and response_schema is None and also is None:
            now = time.time()
            expires_at = None if expires_in_seconds is None else now + expires_in_seconds
            found = await self._pg.request_approval(
                traverser_id, epoch, operation_key, prompt, checkpoint, expires_at, pause, steps, audit,
                new_id(), now,
            )  # fmt: skip
            if found is not None:
                return found

        def fn(conn: Conn) -> tuple[dict[str, Any], bool]:
            now = time.time()
            if epoch is not None:
                row = leased(conn, traverser_id, epoch, now)
                record_steps(conn, row, steps, now)
            else:
                if pause:
                    raise Conflict("pausing a traverser requires its task lease (epoch)", "lease_required")
                found = _row(conn, SQL_LOCK_TRAVERSER, (traverser_id,))
                if found is None:
                    raise NotFound.of("traverser", traverser_id)
                if TraverserStatus(found["status"]).is_terminal:
                    raise Conflict(f"traverser {traverser_id!r} is {found['status']}", "invalid_state")
            approval = _row(conn, SQL_APPROVAL_BY_KEY, (traverser_id, operation_key))
            if approval is None:
                ident = new_id()
                expires_at = None if expires_in_seconds is None else now + expires_in_seconds
                conn.execute(
                    SQL_INSERT_APPROVAL,
                    (
                        ident,
                        traverser_id,
                        operation_key,
                        operation_key,
                        now,
                        expires_at,
                        prompt,
                        checkpoint,
                        response_schema,
                    ),
                )
                approval = _row(conn, SQL_GET_APPROVAL, (ident,))
                assert approval is not None
                if audit is not None:
                    write_audit(conn, replace(audit, target=ident), now)
                if also is not None:
                    also(conn, ident)
            elif loads(approval["prompt"]) != loads(prompt):
                raise Conflict(
                    f"operation key {operation_key!r} was already used with a different prompt",
                    "approval_conflict",
                )
            paused = False
            if pause and approval["status"] == ApprovalStatus.PENDING:
                conn.execute(SQL_PAUSE, (approval["id"], now, traverser_id))
                conn.execute(SQL_DROP_QUEUE_ROW, (traverser_id,))
                paused = True
            return approval_view(approval), paused

        return await self.db.write(fn)

    async def decide_plain(
        self,
        approval_id: str,
        decision: str,
        response: bytes | None,
        decided_by: str,
        audit: AuditEntry | None = None,
    ) -> tuple[dict[str, Any], str | None] | None:
        """:meth:`decide` without reading the approval's terms first, on PostgreSQL: decided
        only if the approval declares no response schema and has no assignment (checked by the
        decision's own statement, atfgraph migration postgres 0018: both are written with the
        approval). None, with nothing changed, otherwise, and always on SQLite, whose read of
        the terms costs no round trip: the caller reads them and calls :meth:`decide`."""
        if self._pg is None:
            return None
        return await self._pg.decide(
            approval_id, decision, response, decided_by, audit, time.time(), plain=True
        )

    async def decision_terms(self, approval_id: str) -> tuple[Any, bool]:
        """What a decision reads before its transaction: the approval's response schema, decoded
        (None: it declares none), and whether it is assigned. One read, off the event loop on
        PostgreSQL; NotFound when there is no such approval."""
        if self._pg is not None:
            found = await self._pg.decision_terms(approval_id)
        else:
            row = self.read_one(lambda c: c.execute(SQL_DECISION_TERMS, (approval_id,)).fetchone())
            found = None if row is None else (row[0], bool(row[1]))
        if found is None:
            raise NotFound.of("approval", approval_id)
        schema, assigned = found
        return (None if schema is None else loads(schema)), assigned

    def get_approval(self, approval_id: str) -> dict[str, Any]:
        row = self.read_one(lambda c: _row(c, SQL_GET_APPROVAL, (approval_id,)))
        if row is None:
            raise NotFound.of("approval", approval_id)
        return approval_view(row)

    def list_approvals(
        self,
        status: str | None,
        traverser_id: str | None,
        limit: int,
        *,
        operation_key: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        after: Key | None = None,
    ) -> list[dict[str, Any]]:
        """Approvals in ``status`` (None: any), of one traverser and operation key, created in
        the time range given, oldest first, after the cursor's ``(created_at, id)``."""
        where, params = "", list[Any]()
        if status is not None:
            condition, values = APPROVAL_STATUS_WHERE[status]
            where, params = f" AND {condition}", list(values)
        for condition, value in (
            ("w.run_id = ?", traverser_id),
            ("w.wait_key = ?", operation_key),
            ("w.created_at >= ?", created_after),
            ("w.created_at < ?", created_before),
        ):
            if value is not None:
                where += f" AND {condition}"
                params.append(value)
        cond, more, order = keyset(("w.created_at", "w.id"), False, after)
        sql = SQL_LIST_APPROVALS.format(where=where + cond, order=order)
        return [approval_view(r) for r in self.read_one(lambda c: _rows(c, sql, (*params, *more, limit)))]

    async def decide(
        self,
        approval_id: str,
        decision: str,
        response: bytes | None,
        decided_by: str,
        audit: AuditEntry | None = None,
        also: Callable[[Conn, float], None] | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        """Record a decision and, in the same transaction, queue the continuation of a traverser
        paused on it and record ``audit`` (with the decision and the stored response as its
        detail). Returns the approval and the node to wake (None when nothing was queued).

        ``also(conn, now)`` runs in that transaction once the decision is made (a decision link
        marks itself used there; a refusal it raises undoes the decision). With ``also`` the
        approval must be pending: the same decision again is refused instead of accepted."""
        if self._pg is not None and also is None:
            found = await self._pg.decide(approval_id, decision, response, decided_by, audit, time.time())
            if found is not None:
                return found

        def fn(conn: Conn) -> tuple[dict[str, Any], str | None]:
            now = time.time()
            row = _row(conn, SQL_LOCK_APPROVAL, (approval_id,))
            if row is None:
                raise NotFound.of("approval", approval_id)
            if row["status"] != ApprovalStatus.PENDING:
                if row["status"] == decision and also is None:  # the same decision again: idempotent
                    view = approval_view(row)
                    if audit is not None:
                        write_audit(conn, _decision_audit(audit, decision, view), now)
                    return view, None
                raise Conflict(f"approval {approval_id!r} is already {row['status']}", "approval_decided")
            if conn.execute(SQL_DECIDE, (decision, decided_by, response, now, approval_id)).rowcount == 0:
                # Decided (or expired) since it was read: never two decisions of one approval.
                raise Conflict(f"approval {approval_id!r} is no longer pending", "approval_decided")
            if also is not None:
                also(conn, now)
            node = self._continue(conn, row["traverser_id"], approval_id, now)
            decided = _row(conn, SQL_GET_APPROVAL, (approval_id,))
            assert decided is not None
            view = approval_view(decided)
            if audit is not None:
                write_audit(conn, _decision_audit(audit, decision, view), now)
            return view, node

        return await self.db.write(fn)

    @staticmethod
    def _continue(conn: Conn, traverser_id: str, approval_id: str, now: float) -> str | None:
        """The engine's wake of a run whose wait was decided: a traverser paused on it is queued
        again (one more attempt allowed); the node to wake, or None."""
        return wake_run(conn, traverser_id, approval_id, now)


def _decision_audit(audit: AuditEntry, decision: str, view: dict[str, Any]) -> AuditEntry:
    extra = audit.detail if isinstance(audit.detail, dict) else {}  # e.g. the decision link's id
    return replace(audit, detail={**extra, "decision": decision, "response": view["response"]})


__all__ = ["ApprovalTransitions"]
