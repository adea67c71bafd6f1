"""What the Celery runtime needs of the PostgreSQL store beyond the ``Store`` protocol
(``runtime._celery.CeleryStore``): a turn message's claim of its own run, and the sweeper's reads
(the rows it may publish, how many are due, when to wake). A base of :class:`PostgresStore`,
whose one-statement ``_fetch`` they run on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._jobs import Rows
from ._pg_sql import SQL_COUNT_READY, SQL_FN_CLAIM_WITH_STATES, SQL_NEXT_WAKE, SQL_READY_IDS
from ._pg_tx import _claims_with_states
from ._protocol import Claim


class CeleryQueue:
    """The Celery runtime's claims and the sweeper's reads (PostgreSQL)."""

    if TYPE_CHECKING:  # PostgresStore's: one statement's rows, through its group commit

        async def _fetch(self, sql: str, params: Any, run_id: str = "") -> Rows: ...

    async def claim_run(
        self, run_id: str, owner: str, *, now: float, lease_ttl: float, max_crashes: int
    ) -> Claim | None:
        """Lease this run if it is due and nobody holds it (the Celery runtime's turn), with its
        state; else None. Not part of :class:`~pyworkflow.store.Store` (yet)."""
        params = ("run", run_id, owner, 1, now, lease_ttl, max_crashes)
        claims = _claims_with_states(await self._fetch(SQL_FN_CLAIM_WITH_STATES, params, run_id)).claims
        return claims[0] if claims else None

    async def ready_runs(
        self,
        *,
        now: float,
        due_before: float | None = None,
        due_after: float | None = None,
        limit: int = 1000,
    ) -> list[tuple[str, int, float]]:
        """Runs a claim would take (unleased, due between ``due_after`` and ``due_before``, or
        lease ran out) as ``(run_id, epoch, available_at)``, a new pair of the last two for each
        wake-up of a run: what the Celery sweeper publishes. Not part of the ``Store`` protocol."""
        due = now if due_before is None else due_before
        after = float("-inf") if due_after is None else due_after
        rows = await self._fetch(SQL_READY_IDS, {"now": now, "due": due, "after": after, "limit": limit})
        return [(str(r[0]), int(r[1]), float(r[2])) for r in rows]

    async def count_ready(self, *, now: float, limit: int) -> int:
        """How many runs a claim would take now (as :meth:`has_ready`), counted up to ``limit``."""
        return int((await self._fetch(SQL_COUNT_READY, {"now": now, "limit": max(limit, 0)}))[0][0])

    async def next_wake(self) -> tuple[float | None, float | None]:
        """The Celery sweeper's wake-up, in one round trip: :meth:`~pyworkflow.store.Store.next_due`
        (deadlines, queue rows and leases) and the earliest deadline of a pending wait alone (the
        sweeper wakes for it even behind a backlog of due queue rows). Not the ``Store`` protocol's."""
        rows = await self._fetch(SQL_NEXT_WAKE, None)
        due, deadline = rows[0] if rows else (None, None)
        return (None if due is None else float(due), None if deadline is None else float(deadline))
