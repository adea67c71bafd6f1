"""``atfg ps``, ``atfg runs start|list|show|watch`` and ``atfg checkpoints get``.

A run is a traverser or one of pyworkflow's own workflow runs in the server's database
(``GET /runs``, ``GET /runs/{id}``). Following one (a traverser) is a chain of long polls on
``GET /traversers/{id}`` that wait for any status other than the current one, so a change is
printed the moment it happens; a pyworkflow run is polled (``GET /runs/{id}``), every second
at most. ``runs start --workflow NAME`` starts a pyworkflow run by workflow name
(``POST /runs``).
"""

from __future__ import annotations

import time
from typing import Any

import click

from .._models import TraverserStatus
from .._transport import q
from ._api import Api, api
from ._base import (
    EXIT_ERROR,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    AliasGroup,
    CliError,
    global_options,
    json_argument,
    output_format,
)
from ._ids import resolve_id
from ._output import Column, compact, emit_list, emit_record, field, pretty, print_table, progress, when
from ._paging import fetch, paging_options

STATUSES = [s.value for s in TraverserStatus]
#: What ``runs list --status`` takes: a traverser's status as the API names it, or the engine's
#: name of one (``pending``, ``suspended``, ``completed``), which pyworkflow runs report.
RUN_STATUSES = [*STATUSES, "pending", "suspended", "completed"]
KINDS = ["all", "workflow", "traverser"]
_TERMINAL = {s.value for s in TraverserStatus if s.is_terminal}
#: One long poll; the server caps it at 60 s.
_POLL_SECONDS = 30.0
#: How long a follow rides out a server that cannot be reached (a restart) before giving up.
_UNAVAILABLE_GRACE = 30.0


def _attempt(item: dict[str, Any]) -> str:
    if item.get("kind") == "workflow":
        return "-"
    return f"{item.get('attempt')}/{item.get('max_attempts')}"


def _status(item: dict[str, Any]) -> Any:
    """A listed run's status: a traverser's as the API names it, a pyworkflow run's the engine's."""
    return item.get("traverser_status") or item.get("status")


def _error_text(item: dict[str, Any]) -> str:
    """An error on one line: a traverser's ``code: message``, a pyworkflow run's ``type: message``."""
    error = item.get("error")
    if isinstance(error, dict):
        return f"{error.get('code') or error.get('type')}: {error.get('message')}"
    return ""


# -- ps --------------------------------------------------------------------------------------------


@click.command("ps")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(STATUSES),
    help="Only these statuses (repeatable) [default: running and waiting].",
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000), help="Per status.")
@global_options
@click.pass_context
def ps(ctx: click.Context, statuses: tuple[str, ...], limit: int) -> None:
    """Runs that are running or waiting, and what each waits for (the pending approval's id and
    operation key), newest first."""
    client = api(ctx)
    items = _traversers(client, list(statuses) or ["running", "waiting"], limit)
    waiting_on = {i["waiting_on"] for i in items if i.get("waiting_on")}
    approvals: dict[str, dict[str, Any]] = {}
    if waiting_on:
        for approval in client.get("/approvals", {"status": "pending", "limit": 1000})["items"]:
            approvals[approval["id"]] = approval
        # More than a page of pending approvals (or one decided meanwhile): ask for the rest.
        for approval_id in sorted(waiting_on - approvals.keys()):
            try:
                approvals[approval_id] = client.get(f"/approvals/{q(approval_id)}")
            except CliError as exc:
                if not exc.message.startswith("not found"):
                    raise
    for item in items:
        approval = approvals.get(item.get("waiting_on") or "")
        item["operation_key"] = approval["operation_key"] if approval else None
        item["waiting_since"] = approval["created_at"] if approval else None
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("TARGET", field("target")),
            ("STATUS", field("status")),
            ("ATTEMPT", _attempt),
            ("WAITING ON", field("waiting_on")),
            ("OPERATION KEY", field("operation_key")),
            ("SINCE", lambda i: when(i.get("waiting_since") or i.get("updated_at"))),
        ],
    )


def _traversers(client: Api, statuses: list[str], limit: int) -> list[dict[str, Any]]:
    """Traversers in any of ``statuses``, newest first (one request per status)."""
    items: list[dict[str, Any]] = []
    for status in dict.fromkeys(statuses):
        items += client.get("/traversers", {"status": status, "limit": limit})["items"]
    items.sort(key=lambda i: i.get("created_at") or 0.0, reverse=True)
    return items


# -- runs ------------------------------------------------------------------------------------------


@click.group(
    "runs", cls=AliasGroup, aliases={"ls": "list", "get": "show", "follow": "watch", "submit": "start"}
)
def runs() -> None:
    """Runs: traversers and pyworkflow workflow runs. Start one, list them, show one, follow one."""


@runs.command("start")
@click.argument("target", required=False)
@click.option(
    "--workflow",
    "-w",
    "workflow",
    default=None,
    metavar="NAME",
    help="Start a pyworkflow run of the workflow registered as NAME instead of a traverser (no TARGET).",
)
@click.option(
    "--input",
    "input_",
    default=None,
    metavar="JSON|@FILE",
    help="The skill's (or workflow's) keyword arguments: a JSON object, or @file (@- reads stdin) "
    "[default: {}].",
)
@click.option("--max-attempts", default=3, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--idempotency-key",
    default=None,
    metavar="KEY",
    help="Starting again with the same key returns the run the first start created (traversers).",
)
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the run to its end (through any pause for a person), as 'runs watch'.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="With --wait: give up after this many seconds.",
)
@click.option(
    "--no-check",
    is_flag=True,
    help="Start it although no worker has registered the target's node yet (one may start later).",
)
@global_options
@click.pass_context
def runs_start(
    ctx: click.Context,
    target: str | None,
    workflow: str | None,
    input_: str | None,
    max_attempts: int,
    idempotency_key: str | None,
    wait: bool,
    timeout: float | None,
    no_check: bool,
) -> None:
    """Start a traverser of TARGET (node.skill), or with --workflow NAME a pyworkflow run of the
    workflow registered as NAME, and print its id (-o json: its record). With --wait, follow it
    to its end: status changes on stderr, the final record on stdout."""
    if (target is None) == (workflow is None):
        raise CliError(
            "give a TARGET (node.skill: a traverser) or --workflow NAME (a pyworkflow run), not "
            + ("both" if target is not None else "neither"),
            EXIT_USAGE,
        )
    if workflow is not None:
        given = [
            option
            for option, name in (
                ("--max-attempts", "max_attempts"),
                ("--idempotency-key", "idempotency_key"),
                ("--no-check", "no_check"),
            )
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise CliError(f"{', '.join(given)}: only for a traverser (TARGET), not --workflow", EXIT_USAGE)
    inputs = json_argument("--input", input_)
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        whose = "workflow's" if workflow is not None else "skill's"
        raise CliError(
            f"--input: must be a JSON object of the {whose} keyword arguments, not {type(inputs).__name__}",
            EXIT_USAGE,
        )
    client = api(ctx)
    if workflow is not None:
        run: dict[str, Any] = client.post("/runs", {"workflow": workflow, "input": inputs})
        progress(
            f"started run {run['id']} (workflow {run['workflow']}); a pyworkflow runtime serving this "
            f"database runs it; follow it: atfg runs watch {run['id']}"
        )
        if wait:
            _watch(ctx, client, run["id"], timeout, kind="workflow")
        elif output_format(ctx) == "table":
            click.echo(run["id"])
        else:
            emit_record(ctx, run, [])
        return
    assert target is not None
    node, dot, skill = target.partition(".")
    if dot and node and skill and not no_check:
        _check_served(client, target, node)
    body = {
        "target": target,
        "input": inputs,
        "max_attempts": max_attempts,
        "idempotency_key": idempotency_key,
    }
    view: dict[str, Any] = client.post("/traversers", body)
    progress(f"started run {view['id']} ({view['target']}); follow it: atfg runs watch {view['id']}")
    if wait:
        _watch(ctx, client, view["id"], timeout, kind="traverser")
    elif output_format(ctx) == "table":
        click.echo(view["id"])  # alone on stdout: RUN=$(atfg runs start ...)
    else:
        emit_record(ctx, view, [])


def _check_served(client: Api, target: str, node: str) -> None:
    """Refuse a target whose node no worker has ever registered: it would wait in the queue with
    nothing to run it (a typo, most often). Which skills a node has is known only to its workers: an
    unknown skill of a served node fails the run with ``unknown_skill``."""
    workers = client.get("/workers", {"limit": 1000})["items"]
    if any(w.get("node_id") == node for w in workers):
        return
    nodes = sorted({str(w.get("node_id")) for w in workers})
    known = f"nodes with workers: {', '.join(nodes)}" if nodes else "no worker has registered yet"
    raise CliError(
        f"unknown target {target!r}: no worker serves node {node!r} ({known}); start a worker for it, "
        "or pass --no-check to queue the run for one that starts later"
    )


@runs.command("list")
@click.option(
    "--kind",
    "-k",
    type=click.Choice(KINDS),
    default="all",
    show_default=True,
    help="workflow: pyworkflow's own runs; traverser: atfgraph's.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(RUN_STATUSES),
    help="Only these statuses (repeatable; a traverser's or the engine's name) [default: all].",
)
@click.option("--target", default=None, help="Only runs of this workflow or node.skill.")
@click.option("--id", "id_prefix", default=None, metavar="PREFIX", help="Only runs whose id starts so.")
@paging_options(default_limit=50)
@global_options
@click.pass_context
def runs_list(
    ctx: click.Context,
    kind: str,
    statuses: tuple[str, ...],
    target: str | None,
    id_prefix: str | None,
    limit: int,
    after: str | None,
    every: bool,
) -> None:
    """Runs of either kind, newest first, a page at a time."""
    params: dict[str, Any] = {"kind": kind}
    if statuses:
        params["status"] = list(dict.fromkeys(statuses))
    if target is not None:
        params["target"] = target
    if id_prefix is not None:
        params["id_prefix"] = id_prefix
    items = fetch(api(ctx), "/runs", params, limit, after, every)
    columns: list[Column] = [
        ("ID", field("id")),
        ("TARGET", field("workflow")),
        ("STATUS", _status),
        ("ATTEMPT", _attempt),
        ("KIND", field("kind")),
        ("CREATED", lambda i: when(i.get("created_at"))),
        ("FINISHED", lambda i: when(i.get("finished_at"))),
        ("ERROR", _error_text),
    ]
    emit_list(ctx, items, columns)


@runs.command("show")
@click.argument("run_id", metavar="ID")
@click.option("--follow", "-f", is_flag=True, help="Follow the run until it ends (as 'runs watch').")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="With --follow: give up after this many seconds.",
)
@global_options
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, follow: bool, timeout: float | None) -> None:
    """One run. A traverser: its status, attempts, result or error, and its path of steps. A
    pyworkflow run: its status, input, result or error, steps, waits, checkpoints and events."""
    client = api(ctx)
    run_id = resolve_id(client, "run", run_id)
    if follow:
        _watch(ctx, client, run_id, timeout)
        return
    record = client.get(f"/runs/{q(run_id)}")
    if record["run"]["kind"] == "traverser":
        _show(ctx, client, client.get(f"/traversers/{q(run_id)}"))
    else:
        _show_workflow_run(ctx, record)


def _show_workflow_run(ctx: click.Context, record: dict[str, Any]) -> None:
    run = record["run"]

    def parts() -> None:
        if record["steps"]:
            print_table(
                ["STEP", "STATUS", "ATTEMPT", "RESULT / ERROR"],
                [
                    [s["key"], s["status"], s["attempt"], _error_text(s) or compact(s["result"])]
                    for s in record["steps"]
                ],
                title="steps",
            )
        if record["waits"]:
            print_table(
                ["WAIT", "KIND", "NAME", "STATUS", "CREATED", "EXPIRES"],
                [
                    [w["id"], w["kind"], w["name"], w["status"], when(w["created_at"]), when(w["expires_at"])]
                    for w in record["waits"]
                ],
                title="waits",
            )
        if record["checkpoints"]:
            print_table(
                ["SCOPE", "NAME", "REVISION", "VALUE"],
                [[c["scope"], c["name"], c["revision"], compact(c["value"])] for c in record["checkpoints"]],
                title="checkpoints",
            )
        if record["events"]:
            print_table(
                ["SEQ", "AT", "EVENT", "KEY"],
                [[e["seq"], when(e["at"]), e["type"], e["key"] or ""] for e in record["events"]],
                title="events",
            )
        if record["truncated"]:
            progress(f"only the first 1000 shown of: {', '.join(record['truncated'])}")

    rows: list[tuple[str, Any]] = [
        ("id", run["id"]),
        ("kind", run["kind"]),
        ("workflow", run["workflow"]),
        ("status", run["status"]),
        ("created", when(run.get("created_at"))),
        ("updated", when(run.get("updated_at"))),
        ("finished", when(run.get("finished_at"))),
        ("input", pretty(run.get("input"))),
    ]
    if run.get("error"):
        rows.append(("error", _error_text(run)))
    if run["status"] == "completed":
        rows.append(("result", pretty(run.get("result"))))
    emit_record(ctx, record, rows, after=parts if output_format(ctx) == "table" else None)


@runs.command("watch")
@click.argument("run_id", metavar="ID")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Give up after this many seconds."
)
@global_options
@click.pass_context
def runs_watch(ctx: click.Context, run_id: str, timeout: float | None) -> None:
    """Follow a run of either kind live until it ends: status changes on stderr, the final
    record on stdout. Exits 1 when the run failed or was cancelled."""
    client = api(ctx)
    _watch(ctx, client, resolve_id(client, "run", run_id), timeout)


def _watch(
    ctx: click.Context, client: Api, run_id: str, timeout: float | None, kind: str | None = None
) -> None:
    """Follow a run of either kind to its end, then show it; exit 1 unless it succeeded."""
    if kind is None:
        kind = client.get(f"/runs/{q(run_id)}")["run"]["kind"]
    if kind == "workflow":
        record = follow_workflow_run(client, run_id, timeout)
        _show_workflow_run(ctx, record)
        run = record["run"]
        if run["status"] != "completed":
            detail = _error_text(run)
            raise CliError(f"run {run_id} {run['status']}" + (f": {detail}" if detail else ""), EXIT_ERROR)
        return
    final = follow(client, run_id, timeout)
    _show(ctx, client, final)
    if final["status"] != TraverserStatus.SUCCEEDED:
        detail = _error_text(final)
        raise CliError(f"run {run_id} {final['status']}" + (f": {detail}" if detail else ""), EXIT_ERROR)


def follow(client: Api, run_id: str, timeout: float | None) -> dict[str, Any]:
    """Long-poll the run until it is terminal, printing each change of status or attempt."""
    deadline = None if timeout is None else time.monotonic() + timeout
    view: dict[str, Any] = client.get(f"/traversers/{q(run_id)}")
    _report(view)
    outage = _Outage()
    while view["status"] not in _TERMINAL:
        remaining = _POLL_SECONDS if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            raise CliError(f"run {run_id} is still {view['status']} after {timeout:g}s", EXIT_ERROR)
        wait = min(remaining, _POLL_SECONDS)
        others = ",".join(s for s in STATUSES if s != view["status"])
        try:
            new: dict[str, Any] = client.get(
                f"/traversers/{q(run_id)}", {"wait_for": others, "timeout": wait}, timeout=wait + 15
            )
        except CliError as exc:
            outage.ride_out(exc)  # the run's state is durable: ride out a server restart
            time.sleep(0.25)
            continue
        outage.over()
        if (new["status"], new["attempt"]) != (view["status"], view["attempt"]):
            _report(new)
        view = new
    return view


class _Outage:
    """A followed run's server out of reach: said once, tolerated for ``_UNAVAILABLE_GRACE``
    seconds (a restart), then the error stands."""

    def __init__(self) -> None:
        self.since: float | None = None

    def ride_out(self, exc: CliError) -> None:
        """Return to try again, or raise ``exc`` (not an outage, or one that lasted too long)."""
        if exc.exit_code != EXIT_UNAVAILABLE:
            raise exc
        now = time.monotonic()
        if self.since is None:
            self.since = now
            progress(f"{exc.message}; retrying")
        elif now - self.since > _UNAVAILABLE_GRACE:
            raise exc

    def over(self) -> None:
        self.since = None


#: A pyworkflow run's ending statuses.
_WORKFLOW_TERMINAL = {"completed", "failed", "cancelled"}
#: How often a pyworkflow run is looked at while followed (it has no long poll): from the first
#: to the last interval, doubling.
_WORKFLOW_POLL = (0.1, 1.0)


def follow_workflow_run(client: Api, run_id: str, timeout: float | None) -> dict[str, Any]:
    """Poll a pyworkflow run (``GET /runs/{id}``) until it ends, printing each change of status;
    returns its last record. A run nothing has claimed yet says so once."""
    deadline = None if timeout is None else time.monotonic() + timeout
    interval = _WORKFLOW_POLL[0]
    record: dict[str, Any] = client.get(f"/runs/{q(run_id)}")
    seen = None
    outage = _Outage()
    while True:
        run = record["run"]
        if run["status"] != seen:
            seen = run["status"]
            _report_workflow_run(run)
        if run["status"] in _WORKFLOW_TERMINAL:
            return record
        if deadline is not None and time.monotonic() >= deadline:
            raise CliError(f"run {run_id} is still {run['status']} after {timeout:g}s", EXIT_ERROR)
        pause = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
        time.sleep(pause)
        interval = min(interval * 2, _WORKFLOW_POLL[1])
        try:
            record = client.get(f"/runs/{q(run_id)}")
        except CliError as exc:
            outage.ride_out(exc)
            continue
        outage.over()


def _report_workflow_run(run: dict[str, Any]) -> None:
    line = f"{when(time.time())}  {run['id']}  {run['status']}"
    if run["status"] == "pending":
        line += "  (waiting for a pyworkflow runtime serving this database to claim it)"
    detail = _error_text(run)
    if detail:
        line += f"  {detail}"
    progress(line)


def _report(view: dict[str, Any]) -> None:
    line = f"{when(time.time())}  {view['id']}  {view['status']}  attempt {_attempt(view)}"
    if view.get("waiting_on"):
        line += f"  waiting on approval {view['waiting_on']}"
    detail = _error_text(view)
    if detail:
        line += f"  {detail}"
    progress(line)


def _show(ctx: click.Context, client: Api, view: dict[str, Any]) -> None:
    def path() -> None:
        steps = client.get(f"/traversers/{q(view['id'])}/path")["steps"]
        if steps:
            print_table(
                ["STEP", "TARGET", "STATUS", "ATTEMPT", "RESULT / ERROR"],
                [
                    [s["key"], s["target"], s["status"], s["attempt"], _error_text(s) or compact(s["result"])]
                    for s in steps
                ],
                title="path",
            )

    rows: list[tuple[str, Any]] = [
        ("id", view["id"]),
        ("target", view["target"]),
        ("status", view["status"]),
        ("attempt", _attempt(view)),
        ("version", view.get("version")),
        ("created", when(view.get("created_at"))),
        ("updated", when(view.get("updated_at"))),
        ("finished", when(view.get("finished_at"))),
        ("waiting on", view.get("waiting_on")),
        ("input", pretty(view.get("input"))),
    ]
    if view.get("error"):
        rows.append(("error", _error_text(view)))
    if view["status"] == TraverserStatus.SUCCEEDED:
        rows.append(("result", pretty(view.get("result"))))
    emit_record(ctx, view, rows, after=path if output_format(ctx) == "table" else None)


# -- checkpoints -----------------------------------------------------------------------------------


@click.group("checkpoints", cls=AliasGroup, aliases={"show": "get"})
def checkpoints() -> None:
    """A run's checkpoints."""


@checkpoints.command("get")
@click.argument("traverser_id", metavar="TRAVERSER")
@click.argument("name")
@global_options
@click.pass_context
def checkpoints_get(ctx: click.Context, traverser_id: str, name: str) -> None:
    """A checkpoint's value and revision."""
    client = api(ctx)
    traverser_id = resolve_id(client, "run", traverser_id)
    record = client.get(f"/traversers/{q(traverser_id)}/checkpoints/{q(name)}")
    emit_record(
        ctx,
        record,
        [
            ("traverser", record["traverser_id"]),
            ("name", record["name"]),
            ("revision", record["revision"]),
            ("value", pretty(record["value"])),
        ],
    )
