"""``atfg runs cancel`` and ``atfg runs retry``: an operator's transitions of a run of either
kind, a traverser or a pyworkflow run on the server's database (``POST /runs/{id}/cancel``,
``POST /runs/{id}/retry``). Both accept an id prefix."""

from __future__ import annotations

from typing import Any

import click

from .._transport import q
from ._api import api
from ._base import global_options
from ._ids import resolve_id
from ._output import emit_record, progress, when
from ._runs import _error_text, _status, runs


def _emit(ctx: click.Context, run: dict[str, Any]) -> None:
    emit_record(
        ctx,
        run,
        [
            ("id", run.get("id")),
            ("kind", run.get("kind")),
            ("target", run.get("workflow")),
            ("status", _status(run)),
            ("attempt", run.get("attempt") if run.get("kind") == "traverser" else None),
            ("updated", when(run.get("updated_at"))),
            ("finished", when(run.get("finished_at"))),
            ("error", _error_text(run) or None),
        ],
    )


@runs.command("cancel")
@click.argument("run_id", metavar="ID")
@click.option(
    "--reason", default=None, metavar="TEXT", help="Why (kept in the run's error and the audit trail)."
)
@global_options
@click.pass_context
def runs_cancel(ctx: click.Context, run_id: str, reason: str | None) -> None:
    """Cancel a run of either kind that has not finished; its pending approvals and hooks are
    cancelled with it. A run that had finished is shown unchanged."""
    client = api(ctx)
    ident = resolve_id(client, "run", run_id)
    body = {} if reason is None else {"reason": reason}
    before = client.get(f"/runs/{q(ident)}")["run"]
    run: dict[str, Any] = client.post(f"/runs/{q(ident)}/cancel", body)
    if before.get("finished_at") is not None:
        progress(f"run {ident} had already ended ({_status(before)}); nothing changed")
    _emit(ctx, run)


@runs.command("retry")
@click.argument("run_id", metavar="ID")
@global_options
@click.pass_context
def runs_retry(ctx: click.Context, run_id: str) -> None:
    """A new attempt of a failed run: a traverser continues from its checkpoints, recorded steps
    and decided approvals; a pyworkflow run replays its completed steps and runs the failed one
    again (a pyworkflow process serving the database executes it). Follow it with 'runs watch'
    (a traverser) or 'runs show'."""
    client = api(ctx)
    ident = resolve_id(client, "run", run_id)
    answer: dict[str, Any] = client.post(f"/runs/{q(ident)}/retry", {})
    if "target" in answer:  # a traverser's view
        answer = {
            **answer,
            "kind": "traverser",
            "workflow": answer["target"],
            "traverser_status": answer["status"],
        }
    progress(f"retrying run {ident}")
    _emit(ctx, answer)
