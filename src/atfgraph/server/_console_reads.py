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
WHERE 1 = 1{where}
ORDER BY w.created_at, w.id LIMIT ?
"""
_EVERY_INBOX_KIND = "w.kind NOT IN ('timer', 'retry')"
#: The counts the console shows stop at COUNT_CAP: more shows as "10,000+". A count reads every
#: row it counts, and the inbox and the Runs page ask for theirs on every live refresh (every 2 s
#: while a page is open): uncapped, 998,949 pending step hooks took 82 ms a refresh on
#: PostgreSQL and 73 ms on SQLite (bench.parked). Each group is counted up to COUNT_CAP + 1 rows
#: by a walk of its own that stops there.
COUNT_CAP = 10_000
#: A search (the inbox's, the Runs page's) reads at most SEARCH_WINDOW rows a request: the first
#: rows in the listing's order that the other filters and the cursor select, of which it shows
#: those that match. A page the window did not fill ends where the window does, and its link on
#: goes on from there. Unbounded, a term that matches nothing read every row of the listing on
#: every live refresh (every 2 s while a page is open), each a LIKE over the run's input: 0.65 s
#: for the Runs page's list and as much for its counts with 200,000 parked runs on SQLite, in a
#: read transaction that holds back the WAL's checkpoint (PostgreSQL: vacuum) as long.
SEARCH_WINDOW = 20_000
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
#: A search's conditions on a row's other table are scalar subqueries, "(SELECT 1 ...) = 1", one
#: primary key (or index prefix) lookup per row searched: written as EXISTS, PostgreSQL turns
#: them into a hashed subplan that reads every row of the other table that matches by itself
#: (every run or approval, whatever the window), and a JOIN searched on both tables into a hash
#: join over every run (140 ms with 200,000 runs for a term that matches at once; 1.4 ms so).
#: Whether a run has an approval whose operation key matches ({like}: waits' UNIQUE (run_id,
#: wait_key) index's prefix).
SQL_RUN_HAS_KEY = (
    "(SELECT 1 FROM waits k WHERE k.run_id = r.id AND k.kind = 'approval' AND ({like}) LIMIT 1) = 1"
)
#: Whether a wait's run matches ({like}, on ``m``; primary key).
SQL_WAIT_RUN_MATCHES = "(SELECT 1 FROM runs m WHERE m.id = w.run_id AND ({like})) = 1"
#: Stored JSON (BLOB on SQLite, bytea on PostgreSQL) as text a search can match.
_AS_TEXT = {"sqlite": "CAST({col} AS TEXT)", "postgresql": "convert_from({col}, 'UTF8')"}

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
class Page:
    """One page of a listing and the cursors of the pages after it (``next``: older runs, or the
    inbox's later waits) and before it (``previous``: newer runs); None: there are none.
    ``stopped``: a search read its whole window (SEARCH_WINDOW rows) without filling the page;
    the rows past it are not searched yet, and the cursor on is the window's last row."""

    items: list[dict[str, Any]]
    next: Cursor | None
    previous: Cursor | None = None
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class RunCounts:
    """The Runs page's counts by engine status, each up to COUNT_CAP + 1. ``partial``: a search
    counted its matches among the newest SEARCH_WINDOW runs, and there are more."""

    by_status: dict[str, int]
    partial: bool = False


def _past(alias: str, sign: str, cursor: Cursor) -> tuple[str, list[Any]]:
    """The condition that a row of ``alias`` lies past ``cursor`` (created_at, id): ``sign`` ">"
    newer, "<" older; ">=" / "<=" take the cursor's own row too."""
    cond = f" AND ({alias}.created_at {sign[0]} ? OR ({alias}.created_at = ? AND {alias}.id {sign} ?))"
    return cond, [cursor[0], cursor[0], cursor[1]]


def _window(
    conn: Conn, table: str, where: str, params: list[Any], newest_first: bool, match: str
) -> tuple[str, list[Any], Cursor | None]:
    """A search's window over ``table`` (``name alias``) under ``where`` (each condition after
    AND), newest or oldest first, when there is a search (``match``): the condition that keeps a
    read to its first SEARCH_WINDOW rows (and any created at the same moment as the last), and
    the cursor past which the rows beyond it lie; an empty condition and None without a search
    or when the window holds every row. Three walks of the listing's own index (a few ms for
    20,000 entries); the read it bounds still stops at its own LIMIT, so a term that matches
    often reads no more than it did unbounded. The first selects the id too: asked for
    created_at alone, SQLite walks a covering index of another order (waits_pending_by_kind)
    and sorts every pending wait (150 ms with 200,000, not 3)."""
    if not match:
        return "", [], None
    alias = table.split()[-1]
    way, inside, beyond, extreme = (" DESC", ">=", "<", "MIN") if newest_first else ("", "<=", ">", "MAX")
    found = _rows(
        conn,
        f"SELECT {alias}.created_at, {alias}.id FROM {table} WHERE 1 = 1{where}"
        f" ORDER BY {alias}.created_at{way} LIMIT 1 OFFSET {SEARCH_WINDOW - 1}",
        params,
    )
    if not found:
        return "", [], None
    edge = found[0][0]
    past = f"SELECT 1 FROM {table} WHERE 1 = 1{where} AND {alias}.created_at {beyond} ? LIMIT 1"
    if not _rows(conn, past, [*params, edge]):
        return "", [], None
    # The cursor on is the last of the rows created at the edge's moment, in the listing's order.
    ties = f"SELECT {extreme}({alias}.id) FROM {table} WHERE 1 = 1{where} AND {alias}.created_at = ?"
    last = _rows(conn, ties, [*params, edge])[0][0]
    return f" AND {alias}.created_at {inside} ?", [edge], (edge, last)


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
    ) -> Page:
        """One page of the runs of ``kind`` (all, workflow, traverser) matching every filter
        given (None: no filter; the status by the engine's name or the API's; a node filter
        matches traversers only; ``search``, a lowercased LIKE on the run's id, its workflow or
        target, its input and its approvals' operation keys, within SEARCH_WINDOW runs), newest
        first (created_at, id), as ``list_runs`` shows them: the page after the cursor ``after``
        (older runs), or the page before ``before`` (newer runs), or the first. The page says
        whether there are older (``next``) and newer (``previous``) runs, by their cursors."""
        where, params = self._runs_where(kind, status, node_id, since, until)
        match, matched = self._run_match(search)
        for sign, cursor in (("<", after), (">", before)):
            if cursor is not None:
                cond, values = _past("r", sign, cursor)
                where, params = where + cond, params + values
        way = "" if before is not None else " DESC"
        order = f"r.created_at{way}, r.id{way}"

        def fn(conn: Conn) -> tuple[list[Any], Cursor | None]:
            bound, bounded, edge = _window(conn, "runs r", where, params, before is None, match)
            sql = f"{_RUN_SUMMARY}FROM runs r WHERE 1 = 1{where}{bound}{match} ORDER BY {order} LIMIT ?"
            rows = _rows(conn, sql, [*params, *bounded, *matched, limit + 1])
            return rows, edge if len(rows) <= limit else None

        rows, edge = self.read_one(fn)
        more = len(rows) > limit
        rows = rows[:limit]
        if before is not None:
            rows.reverse()
        items = [run_summary(r) for r in rows]
        if not items:
            # A search that found nothing in its window goes on from the window's end.
            older, newer = (None, edge) if before is not None else (edge, None)
            return Page([], older, newer, stopped=edge is not None)
        first, last = (items[0]["created_at"], items[0]["id"]), (items[-1]["created_at"], items[-1]["id"])
        if before is not None:
            return Page(items, last, first if more else edge, stopped=edge is not None)
        any_newer = after is not None and self._newer_exists(
            kind, status, node_id, since, until, search, first
        )
        return Page(items, last if more else edge, first if any_newer else None, stopped=edge is not None)

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
        """Whether a run newer than ``cursor`` matches; with a search, whether one of the
        SEARCH_WINDOW runs next newer than it does, or there are runs past those."""
        where, params = self._runs_where(kind, status, node_id, since, until)
        cond, values = _past("r", ">", cursor)
        where, params = where + cond, params + values
        match, matched = self._run_match(search)

        def fn(conn: Conn) -> bool:
            bound, bounded, edge = _window(conn, "runs r", where, params, False, match)
            sql = f"SELECT r.id FROM runs r WHERE 1 = 1{where}{bound}{match} LIMIT 1"
            return bool(_rows(conn, sql, [*params, *bounded, *matched])) or edge is not None

        return self.read_one(fn)

    def console_run_counts(
        self,
        kind: str,
        node_id: str | None,
        since: float | None,
        until: float | None,
        search: str | None,
    ) -> RunCounts:
        """How many runs match the filters but the status, by engine status, each up to
        COUNT_CAP + 1 (runs_by_status walked for each status until the limit, the rows read
        where another filter is given). With a search: its matches among the newest
        SEARCH_WINDOW runs (``partial`` when there are more)."""
        where, params = self._runs_where(kind, None, node_id, since, until)
        match, matched = self._run_match(search)
        bound, bounded, edge = self.read_one(lambda c: _window(c, "runs r", where, params, True, match))
        one = SQL_CONSOLE_RUN_COUNT.replace("{where}", where + bound + match)
        counted = self._capped(one, [s.value for s in RunStatus], [*params, *bounded, *matched])
        return RunCounts(counted, partial=edge is not None)

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
    ) -> tuple[str, list[Any]]:
        """The Runs page's filters but the search, as conditions on ``runs r``."""
        values = (None if status is None else engine_status(status), node_id, since, until)
        given = [(c, v) for c, v in zip(CONSOLE_FILTERS, values, strict=True) if v is not None]
        where = KIND_WHERE[kind] + "".join(f" AND {cond}" for cond, _ in given)
        return where, [value for _, value in given]

    def _run_match(self, search: str | None) -> tuple[str, list[Any]]:
        """The Runs page's search as a condition on ``r`` (empty: none): a run matches by its
        id, workflow or target, input, or one of its approvals' operation keys."""
        if not search:
            return "", []
        run, n = self._likes("r", ["id", "workflow"], ["input"])
        key = SQL_RUN_HAS_KEY.format(like="LOWER(k.wait_key) LIKE ? ESCAPE '!'")
        return f" AND ({run} OR {key})", [_pattern(search)] * (n + 1)

    def _likes(self, alias: str, columns: list[str], stored_json: list[str]) -> tuple[str, int]:
        """A search's LIKE on each of ``columns`` and ``stored_json`` (as text) of ``alias``,
        lowercased, joined by OR, and how many patterns it takes."""
        as_text = _AS_TEXT["postgresql" if self.is_postgres else "sqlite"]
        texts = [f"{alias}.{c}" for c in columns] + [as_text.format(col=f"{alias}.{c}") for c in stored_json]
        return " OR ".join(f"LOWER({t}) LIKE ? ESCAPE '!'" for t in texts), len(texts)

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
    ) -> Page:
        """One page of pending waits of ``kinds``, oldest first, after the cursor ``after``
        (created_at, id) and matching ``search`` (within SEARCH_WINDOW waits), with the cursor
        of the next page (None: this is the last)."""
        every = set(kinds) == set(INBOX_KINDS)
        kind_filter = _EVERY_INBOX_KIND if every else f"w.kind IN ({', '.join('?' * len(kinds))})"
        where = f" AND w.status = 'pending' AND {kind_filter}"
        params: list[Any] = [] if every else list(kinds)
        if after is not None:
            cond, values = _past("w", ">", after)
            where, params = where + cond, params + values
        match, matched = "", []
        if search:
            wait, n = self._likes("w", ["id", "wait_key", "name"], ["prompt"])
            run, m = self._likes("m", ["id", "workflow"], ["input"])
            match = f" AND ({wait} OR {SQL_WAIT_RUN_MATCHES.format(like=run)})"
            matched = [_pattern(search)] * (n + m)

        def fn(conn: Conn) -> tuple[list[Any], Cursor | None]:
            bound, bounded, edge = _window(conn, "waits w", where, params, False, match)
            sql = SQL_CONSOLE_INBOX.format(where=where + bound + match)
            rows = _rows(conn, sql, [*params, *bounded, *matched, limit + 1])
            return rows, edge if len(rows) <= limit else None

        rows, edge = self.read_one(fn)
        items = [self._decoded(inbox_item(r)) for r in rows[:limit]]
        more = len(rows) > limit
        return Page(
            items, (items[-1]["created_at"], items[-1]["id"]) if more else edge, stopped=edge is not None
        )

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
