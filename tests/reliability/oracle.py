"""The oracle of the reliability suite: after every trial it reads the database and the
:class:`~tests.reliability.ledger.Ledger` and lists what breaks the guarantees
(docs/guarantees.md). It reads the tables directly (``sqlite3`` or ``psycopg``), never through
the code under test, and both faces at once: they share one model (``runs``, ``steps``,
``waits``, ``checkpoints``, ``queue``, ``events``; a traverser is a run with a ``node_id``, an
approval a wait of kind ``approval``, its checkpoints rows at scope ``''``).

What it asserts (each a line of :meth:`Oracle.check`'s answer when broken):

- **no lost run**: every run the ledger says was started (``"started"`` lines) exists; at the
  end (``final=True``) every run is in one of ``Expect.end`` (completed, unless the scenario says
  waiting or failed is legitimate);
- **no step completed twice**: at most one ``step_completed`` event per (run, step key);
- **side effects bounded**: ledger executions of each ``Expect.effects`` name per run at most
  1 + the crashes that hit that run (``crashes``: the harness's count), at most 1 for
  ``Expect.once`` names, and at least 1 of each ``Expect.required`` name for a completed run
  (for traversers, ``Expect.lost_attempts_are_crashes``: an attempt the server charged and
  lost, to a kill or to a lease that ran out, counts as a crash even when the harness did not
  see it in flight);
- **one decision per wait**: at most one accepted ``"decide"`` per wait in the ledger (over
  HTTP, where a repeated decision answers the recorded one: at most one ``decided_at``), a
  received wait has exactly one decision in the database, and the run resumed (a
  ``run_resumed`` event; a first turn writes none) at most once per resolved wait, plus one
  (a turn a stopping runtime gave back unfinished);
- **checkpoints**: the revisions the ledger saw returned per (run, name) strictly increase, and
  a surviving checkpoint row is not behind the last of them (no lost update);
- **leases**: at most one live lease per run (the queue row is keyed by run, so: no live lease
  on a run that is not running, none left on a run that ended), and no two attempts of one
  traverser with the same epoch in the ledger (two holders of one lease);
- **timers**: no timer or back-off expired before its ``expires_at``;
- SQLite: ``PRAGMA integrity_check`` is ``ok``.

:class:`Figures` sums what the checks saw over many trials, for the summary table.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from tests.reliability.ledger import Ledger

__all__ = ["Expect", "Figures", "Oracle", "Snapshot"]

TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Expect:
    """What the scenario allows: the statuses a run may end in, and which ledger names are
    side effects (at most 1 + crashes) or must happen at most once whatever crashes."""

    end: frozenset[str] = frozenset({"completed"})
    effects: tuple[str, ...] = ()
    once: tuple[str, ...] = ()
    #: ledger names every completed run must show at least once
    required: tuple[str, ...] = ()
    #: count an attempt the server charged beyond the first and the continuations after pauses
    #: (a killed worker's, or a lease that ran out on a loaded machine) as a crash of that run
    lost_attempts_are_crashes: bool = False


@dataclass
class Snapshot:
    """The rows the oracle reads, keyed by the trial's run key (a pyworkflow run's first
    argument, or a traverser's id)."""

    runs: dict[str, tuple[str, str]]  # key -> (run id, status)
    duplicate_keys: list[str]
    steps_completed_twice: list[tuple[str, str, int]]
    checkpoints: dict[tuple[str, str], int]  # (key, scope or name) -> revision
    live_leases_not_running: list[tuple[str, str]]
    queued_after_end: list[str]
    received_without_decision: list[str]
    resumes: Counter[str]  # key -> run_resumed events
    resolved_waits: Counter[str]  # key -> waits received or expired
    early_timers: list[tuple[str, float, float]]
    integrity: str
    #: traversers: attempts charged beyond the first and one continuation per resolved wait
    lost_attempts: dict[str, int] = field(default_factory=dict)
    #: runs with a live lease (a turn in flight, whatever the run's status says)
    leased: list[str] = field(default_factory=list)


class Oracle:
    """Reads one trial's database (a ``sqlite:///`` URL, a bare path or ``postgresql://``)."""

    def __init__(self, storage: str) -> None:
        self.storage = storage
        self.postgres = storage.startswith(("postgresql://", "postgres://"))
        self.path = storage.removeprefix("sqlite:///")

    def _rows(self, conn: Any, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql).fetchall()]

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """One read on a fresh connection (no parameters: the callers' SQL is constant)."""
        if self.postgres:
            import psycopg

            with psycopg.connect(self.storage, autocommit=True) as pg:
                return self._rows(pg, sql)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            return self._rows(conn, sql)
        except sqlite3.OperationalError as exc:  # not migrated yet: no runs
            if "no such table" in str(exc):
                return []
            raise
        finally:
            conn.close()

    def unfinished(self) -> int:
        """Runs that have not ended (what a trial's driver waits for)."""
        rows = self.query(
            "SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'failed', 'cancelled')"
        )
        return int(rows[0][0]) if rows else 0

    def stuck_report(self, now: float | None = None, limit: int = 20) -> str:
        """What each unfinished run is waiting for, for a trial whose runs made no progress in
        time (a liveness finding, not a broken guarantee): the run, its queue row (epoch, wake
        count, due time, lease holder and how long the lease has left, crashes; times relative
        to ``now``), its waits and its last events. Read straight from the tables, like the
        checks."""
        now = time.time() if now is None else now
        runs = self.query(
            "SELECT id, status, node_id, waiting_on FROM runs "
            f"WHERE status NOT IN ('completed', 'failed', 'cancelled') ORDER BY created_at LIMIT {int(limit)}"
        )
        lines = [f"{len(runs)} unfinished run(s) at {now:.3f}:"]

        def ago(value: Any) -> str:
            return "-" if value is None else f"{float(value) - now:+.2f}s"

        for run_id, status, node_id, waiting_on in runs:
            safe = str(run_id).replace("'", "''")
            lines.append(
                f"- run {run_id} key={self.key_of(run_id)} status={status} node={node_id} "
                f"waiting_on={waiting_on}"
            )
            for epoch, wake_seq, available_at, owner, expires, crashes in self.query(
                "SELECT epoch, wake_seq, available_at, lease_owner, lease_expires_at, crashes "
                f"FROM queue WHERE run_id = '{safe}'"
            ) or [(None,) * 6]:
                lines.append(
                    f"  queue: epoch={epoch} wake_seq={wake_seq} due={ago(available_at)} "
                    f"lease={owner} expires={ago(expires)} crashes={crashes}"
                    if epoch is not None
                    else "  queue: no row"
                )
            for kind, key, wstatus, expires_at in self.query(
                "SELECT kind, wait_key, status, expires_at FROM waits "
                f"WHERE run_id = '{safe}' ORDER BY created_at"
            ):
                lines.append(f"  wait {kind} {key}: {wstatus} expires={ago(expires_at)}")
            events = self.query(
                f"SELECT seq, type, key, at FROM events WHERE run_id = '{safe}' ORDER BY seq DESC LIMIT 6"
            )
            lines.append(
                "  last events: "
                + ", ".join(
                    f"{seq} {type_}{'(' + key + ')' if key else ''} {ago(at)}"
                    for seq, type_, key, at in reversed(events)
                )
            )
        return "\n".join(lines)

    def key_of(self, run_id: str) -> str:
        """The trial's key of one run (its first argument; a traverser's own id)."""
        safe = run_id.replace("'", "''")
        rows = self.query(f"SELECT node_id, input FROM runs WHERE id = '{safe}'")
        if not rows or rows[0][0] is not None:
            return run_id
        args = json.loads(bytes(rows[0][1])).get("args") or [run_id]
        return str(args[0])

    def snapshot(self) -> Snapshot:
        if self.postgres:
            import psycopg

            with psycopg.connect(self.storage, autocommit=True) as conn:
                return self._read(conn, "ok")
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            integrity = ";".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
            return self._read(conn, integrity)
        finally:
            conn.close()

    def _read(self, conn: Any, integrity: str) -> Snapshot:
        now = time.time()
        key_of: dict[str, str] = {}
        runs: dict[str, tuple[str, str]] = {}
        duplicates = []
        attempts: dict[str, int] = {}
        for run_id, status, node_id, raw, attempt in self._rows(
            conn, "SELECT id, status, node_id, input, attempt FROM runs"
        ):
            key = run_id
            if node_id is not None:
                attempts[run_id] = int(attempt)
            if node_id is None:
                args = json.loads(bytes(raw)).get("args") or [run_id]
                key = str(args[0])
            if key in runs:
                duplicates.append(key)
            key_of[run_id] = key
            runs[key] = (run_id, status)

        def keyed(run_id: str) -> str:
            return key_of.get(run_id, run_id)

        twice = [
            (keyed(r), k, n)
            for r, k, n in self._rows(
                conn,
                "SELECT run_id, key, count(*) FROM events WHERE type = 'step_completed'"
                " GROUP BY run_id, key HAVING count(*) > 1",
            )
        ]
        checkpoints = {
            (keyed(r), name or scope): rev
            for r, scope, name, rev in self._rows(
                conn, "SELECT run_id, scope, name, revision FROM checkpoints"
            )
        }
        # A live lease is a turn in flight: on a running run, or on a suspended one whose turn's
        # end committed before the lease's release, which the engine writes with the process's
        # next write (a crash in between leaves it to expire: docs/guarantees.md). On any other
        # run it is a violation.
        live = self._rows(
            conn,
            "SELECT q.run_id, r.status FROM queue q JOIN runs r ON r.id = q.run_id"
            f" WHERE q.lease_owner IS NOT NULL AND q.lease_expires_at > {now!r}",
        )
        leased = [(r, st) for r, st in live if st not in ("running", "suspended")]
        ended = self._rows(
            conn,
            "SELECT q.run_id FROM queue q JOIN runs r ON r.id = q.run_id"
            " WHERE r.status IN ('completed', 'failed', 'cancelled')",
        )
        # A received hook holds its payload; a received approval its decision.
        undecided = self._rows(
            conn,
            "SELECT id FROM waits WHERE status = 'received' AND kind = 'approval' AND decision IS NULL",
        )
        resumes = Counter(
            {keyed(r): n for r, n in self._rows(
                conn, "SELECT run_id, count(*) FROM events WHERE type = 'run_resumed' GROUP BY run_id"
            )}
        )  # fmt: skip
        resolved = Counter(
            {keyed(r): n for r, n in self._rows(
                conn,
                "SELECT run_id, count(*) FROM waits WHERE status IN ('received', 'expired') GROUP BY run_id",
            )}
        )  # fmt: skip
        early = [
            (keyed(r), e, s)
            for r, e, s in self._rows(
                conn,
                "SELECT run_id, expires_at, resolved_at FROM waits WHERE kind IN ('timer', 'retry')"
                " AND status = 'expired' AND resolved_at < expires_at",
            )
        ]
        lost = {r: max(0, n - 1 - resolved.get(r, 0)) for r, n in attempts.items()}
        return Snapshot(
            lost_attempts={r: n for r, n in lost.items() if n},
            runs=runs,
            duplicate_keys=duplicates,
            steps_completed_twice=twice,
            checkpoints=checkpoints,
            live_leases_not_running=[(keyed(r), s) for r, s in leased],
            leased=[keyed(r) for r, _ in live],
            queued_after_end=[keyed(r) for (r,) in ended],
            received_without_decision=[w for (w,) in undecided],
            resumes=resumes,
            resolved_waits=resolved,
            early_timers=early,
            integrity=integrity,
        )

    def check(
        self,
        ledger: Ledger,
        expect: Expect,
        *,
        crashes: Mapping[str, int] | None = None,
        final: bool = False,
    ) -> tuple[list[str], Snapshot]:
        """Every broken guarantee (an empty list when none), and the snapshot it was read from.
        ``final``: the trial is over, so every run must have ended as ``expect.end`` allows."""
        # The ledger first: a line is written after its effect committed, so a database read
        # afterwards is at least as new as every line (read the other way round, a write landing
        # in between would look like a lost update).
        entries = ledger.entries()
        snap = self.snapshot()
        crashes = dict(crashes or {})
        if expect.lost_attempts_are_crashes:
            for key, lost in snap.lost_attempts.items():
                crashes[key] = max(crashes.get(key, 0), lost)
        bad: list[str] = []
        if snap.integrity != "ok":
            bad.append(f"integrity_check: {snap.integrity}")
        bad += [f"run key {k!r} has more than one run" for k in snap.duplicate_keys]
        for e in entries:
            if e.what == "started" and e.run not in snap.runs:
                bad.append(f"lost run: {e.run!r} was started ({e.extra}) and is not in the database")
        if final:
            bad += [
                f"lost run: {key!r} is {status}, expected one of {sorted(expect.end)}"
                for key, (_, status) in sorted(snap.runs.items())
                if status not in expect.end
            ]
            bad += [f"{k!r} ended and still has a queue row" for k in snap.queued_after_end]
        bad += [f"step completed twice: {k!r} {s} x{n}" for k, s, n in snap.steps_completed_twice]
        bad += [f"live lease on {k!r}, which is {s}" for k, s in snap.live_leases_not_running]
        bad += [f"approval {w} received without a decision" for w in snap.received_without_decision]
        bad += [f"timer of {k!r} expired at {s} before its deadline {e}" for k, e, s in snap.early_timers]
        for key, n in snap.resumes.items():
            if n > 1 + snap.resolved_waits.get(key, 0):
                bad.append(f"{key!r} resumed {n} times for {snap.resolved_waits.get(key, 0)} resolved waits")
        bad += _ledger_checks(entries, expect, crashes, snap, final)
        return bad, snap


def _ledger_checks(
    entries: Iterable[Any], expect: Expect, crashes: Mapping[str, int], snap: Snapshot, final: bool
) -> list[str]:
    bad: list[str] = []
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    accepted: Counter[tuple[str, str]] = Counter()
    revisions: dict[tuple[str, str], list[int]] = defaultdict(list)
    epochs: dict[tuple[str, int], set[int]] = defaultdict(set)
    decided_at: dict[tuple[str, str], set[float]] = defaultdict(set)
    for e in entries:
        counts[e.what][e.run] += 1
        if e.what == "decide" and e.extra.get("outcome") == "accepted":
            accepted[(e.run, str(e.extra.get("wait")))] += 1
        if e.what == "decide" and e.extra.get("decided_at") is not None:
            decided_at[(e.run, str(e.extra.get("wait")))].add(e.extra["decided_at"])
        elif e.what == "checkpoint":
            revisions[(e.run, str(e.extra["name"]))].append(int(e.extra["revision"]))
        elif e.what == "attempt" and "epoch" in e.extra:
            epochs[(e.run, int(e.extra["epoch"]))].add(e.pid)
    for what in expect.effects:
        for key, n in counts[what].items():
            if n > 1 + crashes.get(key, 0):
                bad.append(f"{what} of {key!r} ran {n} times with {crashes.get(key, 0)} crash(es)")
    for what in expect.once:
        bad += [f"{what} of {key!r} ran {n} times" for key, n in counts[what].items() if n > 1]
    if final:
        for what in expect.required:
            for key, (_, status) in snap.runs.items():
                if status == "completed" and key in counts["started"] and counts[what][key] == 0:
                    bad.append(f"{key!r} completed but {what} never ran")
    bad += [f"wait {w} of {k!r} accepted {n} decisions" for (k, w), n in accepted.items() if n > 1]
    bad += [
        f"wait {w} of {k!r} answered {len(t)} decisions" for (k, w), t in decided_at.items() if len(t) > 1
    ]
    for (key, name), seen in revisions.items():
        if any(b <= a for a, b in pairwise(seen)):
            bad.append(f"checkpoint {name!r} of {key!r}: revisions not strictly increasing: {seen}")
        stored = snap.checkpoints.get((key, name))
        if stored is not None and stored < max(seen):
            bad.append(f"checkpoint {name!r} of {key!r} is at {stored}, behind the written {max(seen)}")
    for (key, epoch), pids in epochs.items():
        if len(pids) > 1:
            bad.append(f"{key!r} epoch {epoch} was held by {len(pids)} processes at once")
    return bad


@dataclass
class Figures:
    """What a campaign of trials saw, for the summary table."""

    face: str
    backend: str
    trials: int = 0
    runs: int = 0
    crash_points: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    reexecutions: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add_reexecutions(self, ledger: Ledger, names: Iterable[str]) -> None:
        for what in names:
            self.reexecutions += sum(n - 1 for n in ledger.counts(what).values() if n > 1)

    def row(self) -> str:
        points = ",".join(f"{p}:{n}" for p, n in sorted(self.crash_points.items())) or "-"
        return (
            f"| {self.face} | {self.backend} | {self.trials} | {sum(self.crash_points.values())} "
            f"| {len(self.crash_points)} | {self.kills} | {self.runs} | {self.reexecutions} "
            f"| {len(self.violations)} | {self.seconds:.0f} | {points} |"
        )

    HEADER = (
        "| face | backend | trials | crash-point hits | points hit | random kills | runs "
        "| re-executions | violations | seconds | hits per point |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
