"""The review console's reads of the graph store: filtered listings and one run's whole record,
decoded for templates. Not a hot path; each read is bounded by its LIMIT."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyworkflow.store import RunStatus

from .._json import dumps, loads
from ._graph_rows import Conn, _row, _rows, approval_view, step_view, traverser_view
from ._graph_sql import (
    CONSOLE_FILTERS,
    SQL_APPROVALS_OF,
    SQL_CONSOLE_CHECKPOINTS,
    SQL_CONSOLE_DECIDED,
    SQL_CONSOLE_PENDING,
    SQL_GET_TRAVERSER,
    SQL_STEPS,
    TRAVERSER_SCOPE,
)
from ._refusals import NotFound
from ._runs_reads import (
    _RUN_SUMMARY,
    INBOX_KINDS,
    KIND_WHERE,
    RunsReads,
    engine_status,
    inbox_item,
    run_summary,
)

#: The console's inbox: pending waits a person answers, of the kinds asked for, oldest first,
#: after a cursor (created_at, id) and matching a search (lowercased LIKE on the wait's id and
#: key, its run's id, workflow or target, input and an approval's prompt). Every inbox kind is
#: written as SQL_INBOX writes it (every kind but timer and retry), which walks waits_inbox in
#: order; an IN list of the three is a search of waits_by_kind and a sort of every pending wait
#: (590 ms with 200,000 parked runs, bench.parked). One kind walks waits_by_kind in order.
SQL_CONSOLE_INBOX = """
SELECT w.id, w.run_id, w.wait_key, w.kind, w.name, w.step_key, w.created_at, w.expires_at,
       w.payload_schema, w.prompt, w.checkpoint,
       r.workflow, r.node_id, r.status AS run_status, r.attempt, r.max_attempts
FROM waits w JOIN runs r ON r.id = w.run_id
WHERE w.status = 'pending' AND {kinds}{where}
ORDER BY w.created_at, w.id LIMIT ?
"""
_EVERY_INBOX_KIND = "w.kind NOT IN ('timer', 'retry')"
#: The counts the console shows stop at COUNT_CAP: more shows as "10,000+". A count reads every
#: row it counts, and the inbox and the Runs page ask for theirs on every live refresh (every 2 s
#: while a page is open): uncapped, 998,949 pending step hooks took 82 ms a refresh on
#: PostgreSQL and 73 ms on SQLite (bench.parked). Each group is counted up to COUNT_CAP + 1 rows
#: by a walk of its own that stops there.
COUNT_CAP = 10_000
#: The pending waits of one inbox kind ({group}), up to {limit} (waits_pending_by_kind's prefix).
#: The groups and the limit are written into the statement, not bound: they are the code's own
#: constants, and a plan made without knowing the kind (PostgreSQL's generic plan of a prepared
#: statement) may read the whole table for a kind that has no row.
SQL_CONSOLE_INBOX_COUNT = (
    "SELECT '{group}', COUNT(*) FROM"
    " (SELECT 1 FROM waits w WHERE w.status = 'pending' AND w.kind = '{group}' LIMIT {limit}) counted"
)
#: The runs of one status ({group}) that match the Runs page's other filters ({where}), up to
#: {limit}.
SQL_CONSOLE_RUN_COUNT = (
    "SELECT '{group}', COUNT(*) FROM"
    " (SELECT 1 FROM runs r WHERE r.status = '{group}'{where} LIMIT {limit}) counted"
)
#: Whether a run has an approval whose operation key matches a search (waits' UNIQUE (run_id,
#: wait_key) index's prefix).
SQL_RUN_HAS_KEY = """
SELECT 1 FROM waits k WHERE k.run_id = r.id AND k.kind = 'approval' AND LOWER(k.wait_key) LIKE ? ESCAPE '!'
"""
#: Stored JSON (BLOB on SQLite, bytea on PostgreSQL) as text a search can match.
_AS_TEXT = {"sqlite": "CAST({col} AS TEXT)", "postgresql": "convert_from({col}, 'UTF8')"}
_SEARCHED = ("w.id", "w.wait_key", "w.name", "r.id", "r.workflow")
_SEARCHED_JSON = ("r.input", "w.prompt")

#: A run's kept checkpoint revisions, newest first per checkpoint: each checkpoint's row (its
#: latest revision) and the earlier ones its trigger copied when they were replaced (atfgraph
#: migration sqlite 0013 / postgres 0016; CHECKPOINT_HISTORY in all).
SQL_CHECKPOINT_REVISIONS = """
SELECT scope, name, revision, value, saved_at FROM (
    SELECT scope, name, revision, value, updated_at AS saved_at FROM checkpoints WHERE run_id = ?
    UNION ALL
    SELECT scope, name, revision, value, saved_at FROM atfg_checkpoint_revisions WHERE run_id = ?
) kept ORDER BY scope, name, revision DESC LIMIT ?
"""
#: How many revisions of each checkpoint are kept: the row and the trigger's last 19 ("- 20").
CHECKPOINT_HISTORY = 20

T = TypeVar("T")
#: A place in a listing newest first: (created_at, id) of a row.
Cursor = tuple[float, str]


@dataclass(frozen=True, slots=True)
class RunsPage:
    """One page of runs, newest first, and the cursors of the pages of older (``next``) and
    newer (``previous``) runs (None: there are none)."""

    items: list[dict[str, Any]]
    next: Cursor | None
    previous: Cursor | None


def _pattern(search: str) -> str:
    """A LIKE pattern (ESCAPE '!') matching ``search`` anywhere, lowercased."""
    return "%" + search.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


class ConsoleReads(RunsReads):
    """Mixed into :class:`~atfgraph.server._store.GraphStore`, which supplies the two readers
    (and, through :class:`RunsReads`, every run's reads and the inbox's)."""

    @property
    def is_postgres(self) -> bool:
        raise NotImplementedError

    def _read(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    def read_one(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    def console_runs(
        self,
        kind: str,
        status: str | None,
        node_id: str | None,
        since: float | None,
        until: float | None,
        limit: int,
        search: str | None = None,
        after: Cursor | None = None,
        before: Cursor | None = None,
    ) -> RunsPage:
        """One page of the runs of ``kind`` (all, workflow, traverser) matching every filter
        given (None: no filter; the status by the engine's name or the API's; a node filter
        matches traversers only; ``search``, a lowercased LIKE on the run's id, its workflow or
        target, its input and its approvals' operation keys), newest first (created_at, id), as
        ``list_runs`` shows them: the page after the cursor ``after`` (older runs), or the page
        before ``before`` (newer runs), or the first. The page says whether there are older
        (``next``) and newer (``previous``) runs, by their cursors."""
        where, params = self._runs_where(kind, status, node_id, since, until, search)
        if after is not None:
            where += " AND (r.created_at < ? OR (r.created_at = ? AND r.id < ?))"
            params += [after[0], after[0], after[1]]
        if before is not None:
            where += " AND (r.created_at > ? OR (r.created_at = ? AND r.id > ?))"
            params += [before[0], before[0], before[1]]
        order = "r.created_at, r.id" if before is not None else "r.created_at DESC, r.id DESC"
        sql = _RUN_SUMMARY + f"FROM runs r WHERE 1 = 1{where} ORDER BY {order} LIMIT ?"
        rows = self.read_one(lambda c: _rows(c, sql, [*params, limit + 1]))
        more = len(rows) > limit
        rows = rows[:limit]
        if before is not None:
            rows.reverse()
        items = [run_summary(r) for r in rows]
        if not items:
            return RunsPage(items, None, None)
        first, last = (items[0]["created_at"], items[0]["id"]), (items[-1]["created_at"], items[-1]["id"])
        older = more if before is None else True
        newer = (more if before is not None else after is not None) and self._newer_exists(
            kind, status, node_id, since, until, search, first
        )
        return RunsPage(items, last if older else None, first if newer else None)

    def _newer_exists(
        self,
        kind: str,
        status: str | None,
        node_id: str | None,
        since: float | None,
        until: float | None,
        search: str | None,
        cursor: Cursor,
    ) -> bool:
        where, params = self._runs_where(kind, status, node_id, since, until, search)
        where += " AND (r.created_at > ? OR (r.created_at = ? AND r.id > ?))"
        sql = f"SELECT r.id FROM runs r WHERE 1 = 1{where} LIMIT 1"
        found = self.read_one(lambda c: _rows(c, sql, [*params, cursor[0], cursor[0], cursor[1]]))
        return bool(found)

    def console_run_counts(
        self,
        kind: str,
        node_id: str | None,
        since: float | None,
        until: float | None,
        search: str | None,
    ) -> dict[str, int]:
        """How many runs match the filters but the status, by engine status, each up to
        COUNT_CAP + 1 (runs_by_status walked for each status until the limit, the rows read
        where another filter is given)."""
        where, params = self._runs_where(kind, None, node_id, since, until, search)
        one = SQL_CONSOLE_RUN_COUNT.replace("{where}", where)
        return self._capped(one, [s.value for s in RunStatus], params)

    def _capped(self, one: str, groups: list[str], params: list[Any]) -> dict[str, int]:
        """Each group's count up to COUNT_CAP + 1, in one statement: ``one`` counts ``{group}`` up
        to ``{limit}`` with ``params``; the groups are the code's own names, never a client's."""
        sql = " UNION ALL ".join(
            one.replace("{group}", group).replace("{limit}", str(COUNT_CAP + 1)) for group in groups
        )
        counted = self.read_one(lambda c: c.execute(sql, params * len(groups)).fetchall())
        return {str(name): int(n) for name, n in counted}

    def _runs_where(
        self,
        kind: str,
        status: str | None,
        node_id: str | None,
        since: float | None,
        until: float | None,
        search: str | None,
    ) -> tuple[str, list[Any]]:
        values = (None if status is None else engine_status(status), node_id, since, until)
        given = [(c, v) for c, v in zip(CONSOLE_FILTERS, values, strict=True) if v is not None]
        where = KIND_WHERE[kind] + "".join(f" AND {cond}" for cond, _ in given)
        params: list[Any] = [value for _, value in given]
        if search:
            as_text = _AS_TEXT["postgresql" if self.is_postgres else "sqlite"]
            columns = ["r.id", "r.workflow", as_text.format(col="r.input")]
            like = " OR ".join(f"LOWER({c}) LIKE ? ESCAPE '!'" for c in columns)
            where += f" AND ({like} OR EXISTS ({SQL_RUN_HAS_KEY}))"
            params += [_pattern(search)] * (len(columns) + 1)
        return where, params

    def console_approvals(self, pending: bool, limit: int) -> list[dict[str, Any]]:
        """Pending approvals oldest first, or decided ones newest first; each with its traverser's
        ``target``, ``node_id``, ``traverser_status`` and ``attempt``, JSON decoded."""
        sql = SQL_CONSOLE_PENDING if pending else SQL_CONSOLE_DECIDED
        out = []
        for row in self.read_one(lambda c: _rows(c, sql, (limit,))):
            view = self._decoded(approval_view(row))
            view.update(
                target=row["t_target"],
                node_id=row["t_node_id"],
                traverser_status=row["t_status"],
                attempt=row["t_attempt"],
            )
            out.append(view)
        return out

    def console_inbox(
        self,
        kinds: tuple[str, ...],
        search: str | None,
        after: tuple[float, str] | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
        """One page of pending waits of ``kinds``, oldest first, after the cursor ``after``
        (created_at, id) and matching ``search``; and the cursor of the next page (None: this
        is the last)."""
        where = ""
        every = set(kinds) == set(INBOX_KINDS)
        params: list[Any] = [] if every else list(kinds)
        if after is not None:
            where += " AND (w.created_at > ? OR (w.created_at = ? AND w.id > ?))"
            params += [after[0], after[0], after[1]]
        if search:
            as_text = _AS_TEXT["postgresql" if self.is_postgres else "sqlite"]
            columns = [*_SEARCHED, *(as_text.format(col=c) for c in _SEARCHED_JSON)]
            where += " AND (" + " OR ".join(f"LOWER({c}) LIKE ? ESCAPE '!'" for c in columns) + ")"
            params += [_pattern(search)] * len(columns)
        kind_filter = _EVERY_INBOX_KIND if every else f"w.kind IN ({', '.join('?' * len(kinds))})"
        sql = SQL_CONSOLE_INBOX.format(kinds=kind_filter, where=where)
        rows = self.read_one(lambda c: _rows(c, sql, [*params, limit + 1]))
        items = [self._decoded(inbox_item(r)) for r in rows[:limit]]
        more = len(rows) > limit
        return items, (items[-1]["created_at"], items[-1]["id"]) if more else None

    def console_inbox_counts(self) -> dict[str, int]:
        """How many approvals, hooks and step hooks are pending, each up to COUNT_CAP + 1 (more
        than COUNT_CAP: see ``shown_count``)."""
        return self._capped(SQL_CONSOLE_INBOX_COUNT, ["approval", "hook", "step_hook"], [])

    def console_run(self, traverser_id: str) -> dict[str, Any]:
        """One traverser with its steps (and when each was recorded), checkpoints (and when each
        was last written) and approvals, read in one snapshot, JSON decoded."""

        def fn(conn: Conn) -> dict[str, Any]:
            row = _row(conn, SQL_GET_TRAVERSER, (traverser_id,))
            if row is None:
                raise NotFound.of("traverser", traverser_id)
            steps = [
                {**self._decoded(step_view(s)), "created_at": s["created_at"]}
                for s in _rows(conn, SQL_STEPS, (traverser_id,))
            ]
            checkpoints = [
                {
                    "name": c["name"],
                    "value": loads(c["value"]),
                    "revision": c["revision"],
                    "updated_at": c["updated_at"],
                }
                for c in _rows(conn, SQL_CONSOLE_CHECKPOINTS, (traverser_id, TRAVERSER_SCOPE))
            ]
            approvals = [
                self._decoded(approval_view(a)) for a in _rows(conn, SQL_APPROVALS_OF, (traverser_id,))
            ]
            return {
                "traverser": self._decoded(traverser_view(row)),
                "steps": steps,
                "checkpoints": checkpoints,
                "approvals": approvals,
            }

        return self._read(fn)

    def console_checkpoint_history(
        self, run_id: str, limit: int = 1000
    ) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], bool]:
        """The kept revisions of each of a run's checkpoints, by (scope, name), newest first,
        JSON decoded; and whether there were more than ``limit`` rows (the rest not read)."""
        rows = self.read_one(lambda c: _rows(c, SQL_CHECKPOINT_REVISIONS, (run_id, run_id, limit + 1)))
        history: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows[:limit]:
            history.setdefault((r["scope"], r["name"]), []).append(
                {"revision": r["revision"], "value": loads(r["value"]), "saved_at": r["saved_at"]}
            )
        return history, len(rows) > limit

    @staticmethod
    def _decoded(view: dict[str, Any]) -> dict[str, Any]:
        """A view with its embedded JSON fragments decoded (for templates rather than responses)."""
        decoded: dict[str, Any] = loads(dumps(view))
        return decoded
