"""Reads of every run in the database, of either kind, and of the one inbox.

A run is a row of the engine's ``runs`` table: a pyworkflow run (``node_id`` NULL, kind
``workflow``) or a traverser (a ``node_id``, kind ``traverser``). Both are listed and shown with
the engine's status; a traverser also carries the API's name for it (``traverser_status``).
The inbox is one query over the ``waits`` table: pending approvals, hooks and step hooks, oldest
first, each with its run's summary.

Not hot paths; every read is bounded by its LIMIT and walks an index (see migrations 0007).
Statements are read-only and live here, apart from the graph store's transitions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pyworkflow.store import RunStatus, WaitKind

from .._json import fragment
from ._graph_rows import Conn, Row, _row, _rows
from ._graph_sql import ENGINE_STATUS
from ._paging import Key, keyset
from ._refusals import NotFound
from ._stamps import iso, stamped

T = TypeVar("T")

#: The kinds of run: ``workflow`` (pyworkflow's own, no node) and ``traverser`` (a node's).
RUN_KINDS = ("all", "workflow", "traverser")
#: The statuses a listing may filter on: the engine's, or the API's name of a traverser status.
RUN_STATUSES = tuple(s.value for s in RunStatus) + tuple(k for k, v in ENGINE_STATUS.items() if k != v)
#: The API's name of each engine status (a traverser's ``traverser_status``).
API_STATUS = {engine: api for api, engine in ENGINE_STATUS.items()}
#: The kinds of wait a person answers: the inbox's.
INBOX_KINDS = (WaitKind.APPROVAL.value, WaitKind.HOOK.value, WaitKind.STEP_HOOK.value)
#: At most this many steps, waits, checkpoints and events in one run's record (each says when
#: there were more).
RUN_PART_LIMIT = 1000

#: A run's summary, as listings show it (its error, but no input or result).
_RUN_SUMMARY = """
SELECT r.id, r.workflow, r.node_id, r.version, r.status, r.attempt, r.max_attempts, r.waiting_on,
       r.error, r.created_at, r.updated_at, r.finished_at
"""
#: Every run newest first (then by id, the cursor's tie-break), under the conditions given
#: (``{where}``: kind, status, target, id prefix, time, the cursor; ``{order}``). With a status:
#: runs_by_status (status, created_at) walked backwards; without: runs_by_created. The other
#: conditions are on the row, so LIMIT counts only matching runs.
SQL_RUNS = _RUN_SUMMARY + "FROM runs r WHERE 1 = 1{where}{order} LIMIT ?"
#: The kind conditions of a listing.
KIND_WHERE = {"all": "", "workflow": " AND r.node_id IS NULL", "traverser": " AND r.node_id IS NOT NULL"}
#: One run of either kind, with its input, result and error (primary key).
SQL_RUN = _RUN_SUMMARY.rstrip() + ", r.input, r.result\nFROM runs r WHERE r.id = ?"
#: A run's step records: a traverser's in path order (seq), a pyworkflow run's (no seq) in the
#: order they were recorded (primary key prefix run_id).
SQL_RUN_STEPS = """
SELECT step_key, status, attempt, seq, target, result, error, delivered, updated_at
FROM steps WHERE run_id = ? ORDER BY seq, updated_at, step_key LIMIT ?
"""
#: A run's waits of every kind, oldest first (the UNIQUE (run_id, wait_key) index's prefix).
SQL_RUN_WAITS = """
SELECT id, wait_key, kind, name, step_key, status, created_at, expires_at, resolved_at, payload,
       payload_schema, prompt, checkpoint, decision, decided_by
FROM waits WHERE run_id = ? ORDER BY created_at, id LIMIT ?
"""
#: A run's checkpoints of every scope ('' the traverser's handler, else a pyworkflow step key).
SQL_RUN_CHECKPOINTS = """
SELECT scope, name, value, revision, updated_at FROM checkpoints
WHERE run_id = ? ORDER BY scope, name LIMIT ?
"""
#: The ids that start with a prefix, in id order (each table's primary key walked over the range
#: from the prefix to the prefix followed by DEL, above every character of an id: under a
#: byte-order collation, SQLite's BINARY or PostgreSQL's "C", it holds exactly the ids with that
#: prefix; the substr condition keeps only exact matches under any other). ``{table}``:
#: runs, or waits (``{kind}``: an approval's condition).
SQL_IDS_WITH_PREFIX = """
SELECT id FROM {table} WHERE id >= ? AND id < ? AND substr(id, 1, ?) = ?{kind} ORDER BY id LIMIT ?
"""
#: How many candidates an ambiguous prefix lists.
PREFIX_CANDIDATES = 10

#: The inbox: pending approvals, hooks and step hooks oldest first (then by id, the cursor's
#: tie-break; ``{where}`` is the cursor's condition and ``{kinds}`` narrows it to hooks for
#: GET /hooks), each with its run's summary.
#: waits_inbox (created_at, partial on exactly these conditions) walked in order and bounded by
#: LIMIT; each run is a primary key lookup. The kinds are written as every kind but the two a
#: deadline ends (timer, retry; INBOX_KINDS are the rest, a unit test keeps them so): an IN list
#: of the three would be a search of waits_by_kind and a sort of every pending wait.
SQL_INBOX = """
SELECT w.id, w.run_id, w.wait_key, w.kind, w.name, w.step_key, w.created_at, w.expires_at,
       w.payload_schema, w.prompt, w.checkpoint,
       r.workflow, r.node_id, r.status AS run_status, r.attempt, r.max_attempts
FROM waits w JOIN runs r ON r.id = w.run_id
WHERE w.status = 'pending' AND w.kind NOT IN ('timer', 'retry'){kinds}{where}{order} LIMIT ?
"""
#: The hook kinds, as a condition of SQL_INBOX.
HOOKS_ONLY = " AND w.kind IN ('hook', 'step_hook')"


def engine_status(status: str) -> str:
    """The engine's status for a status filter given either way (``waiting`` -> ``suspended``)."""
    return ENGINE_STATUS.get(status, status)


def run_summary(row: Row) -> dict[str, Any]:
    """A run as listings show it: traversers add their target, node, attempts and API status."""
    kind = "workflow" if row["node_id"] is None else "traverser"
    view: dict[str, Any] = {
        "id": row["id"],
        "kind": kind,
        "workflow": row["workflow"],
        "status": row["status"],
        "error": fragment(row["error"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "finished_at": row["finished_at"],
    }
    stamped(view, "created_at", "updated_at", "finished_at")
    if kind == "traverser":
        view.update(
            target=row["workflow"],
            node_id=row["node_id"],
            version=row["version"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            waiting_on=row["waiting_on"],
            traverser_status=API_STATUS.get(row["status"], row["status"]),
        )
    return view


def _step(row: Row) -> dict[str, Any]:
    view = {
        "key": row["step_key"],
        "status": row["status"],
        "attempt": row["attempt"],
        "seq": row["seq"],
        "target": row["target"],
        "result": fragment(row["result"]),
        "error": fragment(row["error"]),
        "delivered": row["delivered"],
        "updated_at": row["updated_at"],
    }
    return stamped(view, "updated_at")


def _wait(row: Row) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": row["id"],
        "kind": row["kind"],
        "key": row["wait_key"],
        "name": row["name"],
        "step_key": row["step_key"],
        "status": row["status"],
        "created_at": row["created_at"],
        "expires_at": row["expires_at"],
        "resolved_at": row["resolved_at"],
        "payload": fragment(row["payload"]),
    }
    stamped(view, "created_at", "expires_at", "resolved_at")
    if row["kind"] == WaitKind.APPROVAL.value:
        view.update(
            prompt=fragment(row["prompt"]),
            checkpoint=fragment(row["checkpoint"]),
            decision=row["decision"],
            decided_by=row["decided_by"],
        )
    else:
        view["payload_schema"] = fragment(row["payload_schema"])
    return view


def _checkpoint(row: Row) -> dict[str, Any]:
    view = {
        "scope": row["scope"],
        "name": row["name"],
        "value": fragment(row["value"]),
        "revision": row["revision"],
        "updated_at": row["updated_at"],
    }
    return stamped(view, "updated_at")


def inbox_item(row: Row) -> dict[str, Any]:
    """A pending wait a person answers, with its run's summary."""
    traverser = row["node_id"] is not None
    run: dict[str, Any] = {
        "id": row["run_id"],
        "kind": "traverser" if traverser else "workflow",
        "workflow": row["workflow"],
        "status": row["run_status"],
    }
    if traverser:
        run.update(
            target=row["workflow"],
            node_id=row["node_id"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            traverser_status=API_STATUS.get(row["run_status"], row["run_status"]),
        )
    item: dict[str, Any] = {
        "id": row["id"],
        "kind": row["kind"],
        "key": row["wait_key"],
        "name": row["name"],
        "step_key": row["step_key"],
        "created_at": row["created_at"],
        "expires_at": row["expires_at"],
        "run": run,
    }
    stamped(item, "created_at", "expires_at")
    if row["kind"] == WaitKind.APPROVAL.value:
        item.update(
            prompt=fragment(row["prompt"]),
            checkpoint=fragment(row["checkpoint"]),
            response_schema=fragment(row["payload_schema"]),
        )
    else:
        item["payload_schema"] = fragment(row["payload_schema"])
    return item


def _bounded(rows: list[Row], view: Callable[[Row], dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Views of at most RUN_PART_LIMIT rows (one more was read), and whether there were more."""
    return [view(r) for r in rows[:RUN_PART_LIMIT]], len(rows) > RUN_PART_LIMIT


class RunsReads:
    """Mixed into the graph store (through ``ConsoleReads``), which supplies the readers and
    ``pyworkflow``, its pyworkflow store on the same database."""

    pyworkflow: Any

    def _read(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    def read_one(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError

    def list_runs(
        self,
        kind: str,
        status: str | Sequence[str] | None,
        limit: int,
        *,
        target: str | None = None,
        id_prefix: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        after: Key | None = None,
    ) -> list[dict[str, Any]]:
        """Runs of ``kind`` (all, workflow, traverser), in ``status`` (one or several, the
        engine's or the API's names; None: any), of ``target`` (a workflow's name or a
        traverser's node.skill), whose id starts with ``id_prefix``, created in the time range
        given, newest first, after the cursor's ``(created_at, id)``."""
        where = KIND_WHERE[kind]
        params: list[Any] = []
        statuses = list(
            dict.fromkeys(engine_status(s) for s in ([status] if isinstance(status, str) else status or ()))
        )
        if statuses:
            where += " AND r.status IN (" + ", ".join("?" * len(statuses)) + ")"
            params += statuses
        if target is not None:
            where += " AND r.workflow = ?"
            params.append(target)
        if id_prefix is not None:
            where += " AND r.id LIKE ? ESCAPE '!'"
            params.append(id_prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%")
        if created_after is not None:
            where += " AND r.created_at >= ?"
            params.append(created_after)
        if created_before is not None:
            where += " AND r.created_at < ?"
            params.append(created_before)
        cond, more, order = keyset(("r.created_at", "r.id"), True, after)
        sql = SQL_RUNS.format(where=where + cond, order=order)
        return [run_summary(r) for r in self.read_one(lambda c: _rows(c, sql, [*params, *more, limit]))]

    def ids_with_prefix(self, kind: str, prefix: str) -> tuple[list[str], bool]:
        """Ids of ``kind`` (run, approval, wait) that start with ``prefix``: at most
        :data:`PREFIX_CANDIDATES`, and whether there are more."""
        table = "runs" if kind == "run" else "waits"
        cond = " AND kind = 'approval'" if kind == "approval" else ""
        sql = SQL_IDS_WITH_PREFIX.format(table=table, kind=cond)
        params = (prefix, prefix + "\x7f", len(prefix), prefix, PREFIX_CANDIDATES + 1)
        ids = [str(r[0]) for r in self.read_one(lambda c: _rows(c, sql, params))]
        return ids[:PREFIX_CANDIDATES], len(ids) > PREFIX_CANDIDATES

    async def get_run(self, run_id: str) -> dict[str, Any]:
        """One run of either kind with its steps, waits, checkpoints (one snapshot) and event log
        (pyworkflow's store: a traverser's transitions append none), each bounded."""
        n = RUN_PART_LIMIT + 1

        def fn(conn: Conn) -> dict[str, Any]:
            row = _row(conn, SQL_RUN, (run_id,))
            if row is None:
                raise NotFound.of("run", run_id)
            steps, more_steps = _bounded(_rows(conn, SQL_RUN_STEPS, (run_id, n)), _step)
            waits, more_waits = _bounded(_rows(conn, SQL_RUN_WAITS, (run_id, n)), _wait)
            checkpoints, more_cps = _bounded(_rows(conn, SQL_RUN_CHECKPOINTS, (run_id, n)), _checkpoint)
            run = run_summary(row)
            run.update(input=fragment(row["input"]), result=fragment(row["result"]))
            truncated = [
                name
                for name, more in (("steps", more_steps), ("waits", more_waits), ("checkpoints", more_cps))
                if more
            ]
            return {
                "run": run,
                "steps": steps,
                "waits": waits,
                "checkpoints": checkpoints,
                "truncated": truncated,
            }

        record = self._read(fn)
        events = await self.pyworkflow.get_events(run_id, limit=n)
        record["events"] = [
            {
                "seq": e.seq,
                "at": e.at,
                "at_iso": iso(e.at),
                "type": e.type,
                "key": e.key,
                "data": fragment(e.data),
            }
            for e in events[:RUN_PART_LIMIT]
        ]
        if len(events) > RUN_PART_LIMIT:
            record["truncated"].append("events")
        return record

    def inbox(
        self, limit: int, *, after: Key | None = None, hooks_only: bool = False
    ) -> list[dict[str, Any]]:
        """Pending approvals, hooks and step hooks together (``hooks_only``: hooks and step
        hooks), oldest first, with their runs, after the cursor's ``(created_at, id)``."""
        cond, params, order = keyset(("w.created_at", "w.id"), False, after)
        sql = SQL_INBOX.format(kinds=HOOKS_ONLY if hooks_only else "", where=cond, order=order)
        return [inbox_item(r) for r in self.read_one(lambda c: _rows(c, sql, (*params, limit)))]
