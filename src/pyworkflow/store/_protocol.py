"""What the engine needs from storage: a small protocol every backend implements, and the plain
records it returns. Each mutating method is one state transition in one transaction.

A turn of a run (one execution of its workflow function from the top) holds a lease on the run's
queue row; its writes carry a :class:`Fence` and are refused with ``LeaseLostError`` once another
worker has claimed the run (a higher epoch).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._errors import DatabaseUnavailableError


def database_failed(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a store call, says the database failed under the call rather
    than refused it: unreachable or restarting, its connection lost, a lock or its write lock
    held past the timeouts, its disk failing (:class:`~pyworkflow.DatabaseUnavailableError`,
    SQLite's and psycopg's ``OperationalError``). Whether the call's work was done cannot be
    known from it, and the same call may succeed later; a refusal (a fence, a revision, a bad
    argument) is none of these. Nor is SQLite's generic ``SQLITE_ERROR`` (a statement the
    database cannot run: no such table or column, a syntax error), which SQLite raises as an
    ``OperationalError`` too, nor PostgreSQL's class 54 (a program limit: a value too large for
    an index entry), which psycopg raises as one: running the call again would meet it again."""
    if isinstance(exc, DatabaseUnavailableError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        # Raised by SQLite itself, it carries SQLite's code; one made without it is taken as
        # the database's.
        return getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_ERROR
    psycopg = sys.modules.get("psycopg")  # imported only where a PostgreSQL store is open
    return (
        psycopg is not None and isinstance(exc, psycopg.OperationalError) and not over_a_database_limit(exc)
    )


def over_a_database_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's class 54, a program limit exceeded (a value too large for
    an index entry, too many columns, a statement too complex): the same statement would meet it
    again, so it is a refusal of what was sent, not the database failing."""
    return (getattr(exc, "sqlstate", None) or "").startswith("54")


class RunStatus(StrEnum):
    """State of a run. Allowed transitions::

    pending   -> running | cancelled
    running   -> suspended | completed | failed | cancelled | running (crash, re-claimed)
    suspended -> running | cancelled
    failed    -> suspended (an operator's retry: a new attempt from what the run recorded)
    completed, cancelled: terminal; failed is terminal until retried
    """

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class WaitStatus(StrEnum):
    """State of a wait. Exactly one transition out of ``pending``, by a conditional update, so a
    payload racing a deadline has one winner::

    pending -> received | expired | cancelled
    """

    PENDING = "pending"
    RECEIVED = "received"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class WaitKind(StrEnum):
    HOOK = "hook"  # workflow-level hook()
    STEP_HOOK = "step_hook"  # step_hook() inside a step
    TIMER = "timer"  # durable sleep(): expiry is its normal end
    RETRY = "retry"  # back-off before a step's next attempt
    APPROVAL = "approval"  # a person's decision on a remote run (atfgraph's request_approval)


class StepStatus(StrEnum):
    RETRYING = "retrying"  # an attempt failed; the next one waits for its back-off timer
    RUNNING = "running"  # suspended inside the step (progress such as delivered chunks kept)
    COMPLETED = "completed"
    FAILED = "failed"  # retries exhausted or a FatalError: the error is replayed


_E = TypeVar("_E", bound=StrEnum)


def _by_value(kind: type[_E]) -> Callable[[str], _E]:
    """``kind(value)`` for a value read from the database, as one dict lookup: an Enum's call
    goes through ``EnumType.__call__`` and ``Enum.__new__`` (about a microsecond), and the
    engine converts a few statuses a run. A value that is not one of ``kind``'s: KeyError."""
    return {member.value: member for member in kind}.__getitem__


#: ``RunStatus(value)``, ``WaitStatus(value)``, ... for values read from rows (see _by_value)
run_status = _by_value(RunStatus)
wait_status = _by_value(WaitStatus)
wait_kind = _by_value(WaitKind)
step_status = _by_value(StepStatus)


@dataclass(frozen=True, slots=True)
class Fence:
    """Identifies one turn: writes are accepted only while ``epoch`` is the run's current one."""

    run_id: str
    epoch: int
    wake_seq: int


@dataclass(slots=True)
class RunRecord:
    id: str
    workflow: str
    status: RunStatus
    input: bytes
    result: bytes | None
    error: bytes | None
    created_at: float
    updated_at: float
    finished_at: float | None


@dataclass(slots=True)
class StepRecord:
    step_key: str
    status: StepStatus
    attempt: int
    result: bytes | None
    error: bytes | None
    delivered: int


@dataclass(slots=True)
class WaitRecord:
    id: str
    run_id: str
    wait_key: str
    kind: WaitKind
    name: str
    step_key: str
    status: WaitStatus
    notified: bool
    created_at: float
    expires_at: float | None
    resolved_at: float | None
    payload: bytes | None
    payload_schema: bytes | None


@dataclass(slots=True)
class CheckpointRecord:
    scope: str
    name: str
    value: bytes
    revision: int


@dataclass(slots=True)
class RunState:
    """Everything replay needs, read with indexed lookups by run id (never the event log)."""

    steps: dict[str, StepRecord] = field(default_factory=dict)
    waits: dict[str, WaitRecord] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], CheckpointRecord] = field(default_factory=dict)


@dataclass(slots=True)
class Claim:
    fence: Fence
    workflow: str
    input: bytes
    resumed: bool  # False for a run's first turn (nothing to load)
    #: the run's state, read with the claim (SQLite: in its transaction; PostgreSQL: by its
    #: statement, after the lease); None: not read, the runtime loads it
    #: (:meth:`Store.load_state`) if ``resumed``
    state: RunState | None = None

    async def load_state(self, store: Store) -> RunState:
        """What replay of this turn starts from: the state the claim read, else a resumed
        run's state from ``store``, else a new run's empty state."""
        if self.state is not None:
            return self.state
        return await store.load_state(self.fence.run_id) if self.resumed else RunState()


@dataclass(slots=True)
class Poll:
    """What one tick of a runtime found: the runs it claimed and when to look again."""

    claims: list[Claim]
    next_due: float | None  # as :meth:`Store.next_due`, after the claims


@dataclass(slots=True)
class Event:
    run_id: str
    seq: int
    at: float
    type: str
    key: str | None
    data: bytes | None


@dataclass(slots=True)
class NewWait:
    id: str
    wait_key: str
    kind: WaitKind
    name: str
    step_key: str
    token_digest: bytes | None
    expires_at: float | None
    payload_schema: bytes | None


@runtime_checkable
class Store(Protocol):
    """Durable state of pyworkflow. Times are seconds since the epoch."""

    # -- runs ------------------------------------------------------------------------------------
    async def create_run(
        self,
        run_id: str,
        workflow: str,
        input: bytes,
        *,
        now: float,
        lease_owner: str | None,
        lease_ttl: float,
        also: Callable[[Any], None] | None = None,
        abandoned: Callable[[Claim], None] | None = None,
    ) -> Claim | None:
        """Insert a run and its queue row. With ``lease_owner`` the row is claimed at once (the
        caller runs the first turn itself) and the claim is returned. ``also(conn)`` runs in the
        same transaction (an audit entry that must commit with the run, or not at all).
        ``abandoned(claim)``: called on the caller's loop with the claim if the caller was
        cancelled while the write was in flight and it committed all the same (the lease is
        held: the claim must still become a turn, or be released)."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[RunRecord]:
        """Runs newest first (creation time, then id), optionally only those in ``status`` or of
        ``workflow``. ``after``: the id of the last run of the previous page; the page continues
        after it (``WorkflowNotFoundError`` when no run has that id)."""
        ...

    async def get_events(self, run_id: str, *, after_seq: int = 0, limit: int = 10_000) -> list[Event]: ...

    async def load_state(self, run_id: str) -> RunState: ...

    async def cancel_run(
        self,
        run_id: str,
        *,
        now: float,
        reason: str | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> bool:
        """Cancel a run that is not terminal: its pending waits are cancelled too, and its steps'
        checkpoints deleted (as every end of a run, see :meth:`complete_run`). ``reason`` is kept
        as its error (``CancellationError``); ``also(conn)`` is the caller's own write (an audit
        entry) in the same transaction, as for :meth:`resolve_wait`. False (and nothing written,
        ``also`` not called) for a run that had ended."""
        ...

    async def retry_run(self, run_id: str, *, now: float, also: Callable[[Any], None] | None = None) -> str:
        """A new attempt of a failed run from what it recorded (``pyworkflow.store._manage``):
        ``ok``; else nothing changed and the answer says why: ``remote`` (a traverser: the graph
        server retries those) or the status of a run that has not failed.
        ``WorkflowNotFoundError`` for an unknown run; ``also`` as for :meth:`cancel_run`."""
        ...

    # -- the queue -------------------------------------------------------------------------------
    async def has_ready(self, *, now: float) -> bool:
        """Cheap read: is there a queue row a claim would take?"""
        ...

    async def claim(
        self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int
    ) -> list[Claim]:
        """Lease up to ``limit`` due runs. A row whose previous lease was never released counts as
        a crash; past ``max_crashes`` the run is failed instead of claimed."""
        ...

    async def heartbeat(self, owner: str, *, lease_expires_at: float) -> int: ...

    async def expire_leases_of(self, owners: Sequence[str], *, now: float) -> int:
        """Make the leases of known-dead owners claimable now."""
        ...

    async def lease_owners(self, *, now: float) -> list[str]: ...

    async def next_due(self) -> float | None:
        """The earliest time at which a claim or a wait expiry could find work."""
        ...

    async def poll(self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int) -> Poll:
        """A runtime's tick in one call: if anything is due at ``now``, expire due waits
        (:meth:`expire_due_waits`) and claim up to ``limit`` runs (:meth:`claim`; ``limit`` 0 only
        expires); return the claims and :meth:`next_due` as it is afterwards."""
        ...

    async def release(self, fence: Fence, *, now: float) -> None:
        """End a turn without changing the run (shutdown): the run is claimable again at once."""
        ...

    # -- turn writes (fenced) --------------------------------------------------------------------
    async def complete_step(self, fence: Fence, step_key: str, result: bytes, *, now: float) -> None:
        """Record a step's result, once, and delete the step's checkpoints (scope ``step_key``)
        in the same transaction: they served only its re-execution."""
        ...

    async def fail_step(
        self,
        fence: Fence,
        step_key: str,
        *,
        attempt: int,
        error: bytes,
        retry: NewWait | None,
        delivered: int,
        now: float,
    ) -> None:
        """Record a failed attempt: with ``retry`` (a back-off timer) the step will run again (its
        checkpoints stay for that attempt), without it the failure is final and is replayed from
        now on, and the step's checkpoints are deleted in the same transaction."""
        ...

    async def save_checkpoint(
        self, fence: Fence, scope: str, name: str, value: bytes, *, expected_revision: int | None, now: float
    ) -> int: ...

    async def delete_checkpoint(
        self, fence: Fence, scope: str, name: str, *, now: float, defer: bool = False
    ) -> bool:
        """Delete a checkpoint; whether there was one. ``defer=True`` (the caller's turn knows
        there is one, and no promise hangs on the deletion being durable): the store may write
        it in the transaction of the turn's next write instead, before anything written after
        it, and then returns True at once. A crash before that leaves the checkpoint, as a crash
        just before the call would have."""
        ...

    async def create_wait(
        self, fence: Fence, wait: NewWait, *, now: float, suspend: bool = False
    ) -> WaitRecord:
        """Create a pending wait; if the run already has one with this key, return it unchanged.
        ``suspend=True``: the turn suspends on it next; the store may record the suspension's
        status and event in this transaction (then :meth:`suspend_run` with ``recorded=True``
        only ends the turn)."""
        ...

    async def add_wait_token(self, fence: Fence, wait_id: str, token_digest: bytes) -> None: ...

    async def suspend_run(
        self,
        fence: Fence,
        *,
        notified: Sequence[str],
        delivered: dict[str, int],
        now: float,
        recorded: bool = False,
        then: Callable[[BaseException | None], None] | None = None,
        due: Callable[[], None] | None = None,
    ) -> None:
        """End a turn that waits: its waits whose ``on_created`` ran are marked notified, its
        generator steps' delivered counts saved, the run ``suspended`` and its lease released
        (kept due if a wake-up came during the turn). ``recorded=True``: the turn's last
        ``create_wait(suspend=True)`` committed; a store that recorded the suspension there may
        write the rest without waiting (it frees only the lease: a crash before it commits lets
        the lease expire and the turn run again, ``on_created`` again). ``then(error)`` runs once
        the suspension is durable (``None``) or failed, on any thread; ``due()`` after it, on any
        thread, when what committed left the run due again (a wake-up came during the turn). A
        store that notifies every runtime of a run made due (PostgreSQL's ``subscribe``) may
        leave ``due`` uncalled."""
        ...

    async def complete_run(self, fence: Fence, result: bytes, *, now: float) -> None:
        """End the run (as :meth:`fail_run`, :meth:`cancel_run` and the crash limit do): its
        pending waits are cancelled and its steps' checkpoints deleted (every scope but ``''``,
        a run's own, which an atfgraph traverser's checkpoints use and which stay)."""
        ...

    async def fail_run(self, fence: Fence, error: bytes, *, now: float) -> None: ...

    # -- decisions -------------------------------------------------------------------------------
    async def get_wait_by_token(self, token_digest: bytes) -> WaitRecord | None: ...

    async def get_wait(self, wait_id: str) -> WaitRecord | None: ...

    async def list_waits(
        self,
        *,
        status: WaitStatus | None = WaitStatus.PENDING,
        kinds: Sequence[WaitKind] | None = None,
        limit: int = 100,
    ) -> list[WaitRecord]:
        """Waits oldest first, optionally only those in ``status`` and of ``kinds``."""
        ...

    async def resolve_wait(
        self,
        *,
        token_digest: bytes | None = None,
        wait_id: str | None = None,
        payload: bytes,
        now: float,
        check: Callable[[WaitRecord], None] | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> WaitRecord:
        """``pending -> received`` and wake the run, in one transaction. Raises the matching
        ``HookError`` (and changes nothing) when the wait is unknown, expired, cancelled or
        already received; a wait past its deadline is expired here rather than received.
        ``check(wait)`` runs inside the transaction before anything is written (the payload's
        schema check); what it raises refuses the decision. ``also(conn)`` is the caller's own
        write (an audit entry), run in the same transaction once the decision is recorded, on the
        kit database's connection (SQLite's, or PostgreSQL's synchronous one, which takes the
        same SQL): the decision and that write commit together."""
        ...

    async def resolve_wait_and_claim(
        self,
        *,
        token_digest: bytes,
        payload: bytes,
        now: float,
        check: Callable[[WaitRecord], None] | None,
        owner: str,
        lease_ttl: float,
        max_crashes: int,
        abandoned: Callable[[Claim], None] | None = None,
    ) -> tuple[WaitRecord, Claim | None]:
        """:meth:`resolve_wait` by token, and the woken run's claim for ``owner`` if nobody holds
        it (the local runtime's resumed turn, as :meth:`create_run` claims a new run's first):
        in the same transaction, or None and the run is claimed as any woken run is.
        ``abandoned(claim)`` as :meth:`create_run`'s, if the decision claimed the run."""
        ...

    async def expire_due_waits(self, *, now: float, limit: int = 500) -> int: ...

    @property
    def database(self) -> Any:
        """The kit database under the store (a :class:`~pyworkflow.store.GroupCommitWriter`):
        its ``read(fn)`` serves the metrics' state gauges."""
        ...

    def close(self) -> None: ...
