"""``atfg approvals list|show|decide`` and ``atfg hooks list|resume``: the inbox of every wait.

Approvals park atfgraph traversers; hooks park pyworkflow runs stored in the same database. A
decision or a resume continues the waiting run at once (the server queues it in the same
transaction).
"""

from __future__ import annotations

from typing import Any

import click

from .._transport import q
from ._api import api
from ._base import AliasGroup, CliError, global_options, json_argument
from ._ids import resolve_id
from ._output import compact, emit_list, emit_record, field, pretty, progress, when
from ._paging import fetch, paging_options

_APPROVAL_STATUSES = ["pending", "approved", "rejected", "expired", "all"]


@click.group(
    "approvals",
    cls=AliasGroup,
    aliases={"ls": "list", "get": "show"},
)
def approvals() -> None:
    """Approvals: the reviewer's inbox, one approval, and decisions."""


@approvals.command("list")
@click.option("--status", default="pending", show_default=True, type=click.Choice(_APPROVAL_STATUSES))
@click.option("--run", "run_id", default=None, metavar="ID", help="Only this run's approvals.")
@click.option("--operation-key", default=None, metavar="KEY", help="Only approvals of this operation key.")
@paging_options()
@global_options
@click.pass_context
def approvals_list(
    ctx: click.Context,
    status: str,
    run_id: str | None,
    operation_key: str | None,
    limit: int,
    after: str | None,
    every: bool,
) -> None:
    """Approvals, oldest first (pending ones by default), a page at a time."""
    params: dict[str, Any] = {"status": status}
    if run_id is not None:
        params["traverser_id"] = run_id
    if operation_key is not None:
        params["operation_key"] = operation_key
    items = fetch(api(ctx), "/approvals", params, limit, after, every)
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("RUN", field("traverser_id")),
            ("OPERATION KEY", field("operation_key")),
            ("STATUS", field("status")),
            ("CREATED", lambda a: when(a.get("created_at"))),
            ("EXPIRES", lambda a: when(a.get("expires_at"))),
            ("DECIDED BY", field("decided_by")),
            ("PROMPT", lambda a: compact(a.get("prompt"))),
        ],
    )


def _approval_rows(approval: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ("id", approval["id"]),
        ("run", approval["traverser_id"]),
        ("operation key", approval["operation_key"]),
        ("status", approval["status"]),
        ("created", when(approval.get("created_at"))),
        ("expires", when(approval.get("expires_at"))),
        ("decided by", approval.get("decided_by")),
        ("decided", when(approval.get("decided_at"))),
        ("prompt", pretty(approval.get("prompt"))),
        ("checkpoint", pretty(approval.get("checkpoint"))),
        ("response", pretty(approval.get("response"))),
    ]


@approvals.command("show")
@click.argument("approval_id", metavar="ID")
@global_options
@click.pass_context
def approvals_show(ctx: click.Context, approval_id: str) -> None:
    """One approval with its prompt, checkpoint and decision."""
    client = api(ctx)
    approval = client.get(f"/approvals/{q(resolve_id(client, 'approval', approval_id))}")
    emit_record(ctx, approval, _approval_rows(approval))


@approvals.command("decide")
@click.argument("approval_id", metavar="ID")
@click.option("--approve", is_flag=True, help="Approve.")
@click.option("--reject", is_flag=True, help="Reject.")
@click.option(
    "--response",
    default=None,
    metavar="JSON|@FILE",
    help="The reviewer's answer, handed to the run: JSON, or @file (@- reads stdin).",
)
@global_options
@click.pass_context
def approvals_decide(
    ctx: click.Context, approval_id: str, approve: bool, reject: bool, response: str | None
) -> None:
    """Approve or reject; the waiting run continues. The same decision again changes nothing;
    a different one is refused."""
    if approve == reject:
        raise click.UsageError("give exactly one of --approve or --reject", ctx)
    body = {
        "decision": "approved" if approve else "rejected",
        "response": json_argument("--response", response),
    }
    client = api(ctx)
    approval = client.post(f"/approvals/{q(resolve_id(client, 'approval', approval_id))}/decide", body)
    progress(f"{approval['status']} {approval['id']}; run {approval['traverser_id']} continues")
    emit_record(ctx, approval, _approval_rows(approval))


# -- hooks -----------------------------------------------------------------------------------------


@click.group("hooks", cls=AliasGroup, aliases={"ls": "list"})
def hooks() -> None:
    """Pending pyworkflow hooks stored in the server's database."""


@hooks.command("list")
@paging_options()
@global_options
@click.pass_context
def hooks_list(ctx: click.Context, limit: int, after: str | None, every: bool) -> None:
    """Pending hooks and step hooks, oldest first, with the run each one parks."""
    items = fetch(api(ctx), "/hooks", {}, limit, after, every)
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("RUN", field("run_id")),
            ("KIND", field("kind")),
            ("NAME", field("name")),
            ("STEP", field("step_key")),
            ("CREATED", lambda h: when(h.get("created_at"))),
            ("EXPIRES", lambda h: when(h.get("expires_at"))),
        ],
    )


@hooks.command("resume")
@click.argument("hook_id", metavar="ID")
@click.option(
    "--payload",
    default=None,
    metavar="JSON|@FILE",
    help="What the waiting step receives: JSON, or @file (@- reads stdin) [default: null].",
)
@global_options
@click.pass_context
def hooks_resume(ctx: click.Context, hook_id: str, payload: str | None) -> None:
    """Deliver a payload to a pending hook; its run continues."""
    value = json_argument("--payload", payload)
    answer = api(ctx).post(f"/hooks/{q(hook_id)}/resume", {"payload": value})
    if not isinstance(answer, dict):
        raise CliError("the server answered the resume without a record")
    progress(f"resumed hook {answer.get('hook_id')} ({answer.get('hook_name')}); run {answer.get('run_id')}")
    emit_record(
        ctx,
        answer,
        [
            ("run", answer.get("run_id")),
            ("hook", answer.get("hook_id")),
            ("name", answer.get("hook_name")),
            ("status", answer.get("status")),
        ],
    )
