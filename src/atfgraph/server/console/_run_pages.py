"""One run's page, for a traverser or a pyworkflow run, and its live regions.

One page for a run of either kind: its summary, cancel or retry (confirmed first), its steps
with their results, its approvals (a traverser's) or waits and events (a pyworkflow run's), its
checkpoints with their kept revisions and the diff between each and the one before, and the
timeline with durations (``_history``).

The page is rendered once; console.js then polls ``/runs/{id}/live`` (the same page, of which
it takes the ``data-live`` regions) while the run is in progress, and leaves alone a region the
reviewer is typing in. No full-page refresh ever replaces a form.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from pyworkflow.store import RunStatus

from .._console_reads import CHECKPOINT_HISTORY
from .._identity import Permission
from .._refusals import NotFound
from .._store import GraphStore
from ._answers import schema_fields
from ._common import Auth, Draft, _identity, _reader, _store, assignments, error_page, render
from ._history import revisions, timeline

router = APIRouter(include_in_schema=False)

#: What the run page's buttons do, each confirmed on the page first (``?confirm=ACTION``).
ACTIONS = {
    "cancel": "Cancel this run? It stops at once: its lease ends and its pending waits and approvals "
    "leave the inbox.",
    "retry": "Retry this failed run? A new attempt starts from its checkpoints, steps and decisions.",
}
#: What the page says of a pyworkflow run started here (and on its page while nothing has
#: claimed it): the console cannot see which processes serve the database.
UNCLAIMED = (
    "Nothing serving this database has claimed it yet: it runs once a pyworkflow runtime serving "
    "this database (pyworkflow.serve(), or a Celery worker and its sweeper) has workflow {name} "
    "registered; the console cannot see whether one is running. A runtime without it fails the run "
    "(WorkflowNotFoundError); retry it once one with it serves."
)

#: What a retried or cancelled pyworkflow run's page says about who continues it.
WORKFLOW_RUNTIME = (
    "A pyworkflow runtime serving this database (local or Celery) takes its next turn; the console "
    "cannot see one."
)


async def run_page(request: Request, auth: Auth, run_id: str, draft: Draft | None = None) -> Response:
    """The page of run ``run_id``, a traverser's or a pyworkflow run's (one page: a traverser
    adds its approvals, a pyworkflow run its waits and events), with ``draft`` (a refused
    answer) shown in its card."""
    store = _store(request)
    here = f"/runs/{quote(run_id, safe='')}"
    try:
        record = GraphStore._decoded(await store.get_run(run_id))
    except NotFound:
        return error_page(request, 404, "Not found", f"There is no run {run_id!r}.", auth)
    r = record["run"]
    traverser = r["kind"] == "traverser"
    identity = _identity(request)
    audit = await identity.list_audit(target=run_id, limit=100)
    approvals: list[dict[str, Any]] = []
    if traverser:
        approvals = store.console_run(run_id)["approvals"]
        assigned = assignments(store, [a["id"] for a in approvals])
        for approval in approvals:
            approval["fields"] = schema_fields(approval["response_schema"])
            approval["assigned"] = assigned[approval["id"]]
            audit += await identity.list_audit(target=approval["id"], limit=100)
    history, history_cut = store.console_checkpoint_history(run_id)
    checkpoints = [
        dict(c, revisions=revisions(history.get((c["scope"], c["name"]), []))) for c in record["checkpoints"]
    ]
    terminal = RunStatus(r["status"]).is_terminal
    action = "retry" if r["status"] == RunStatus.FAILED.value else None if terminal else "cancel"
    confirm = request.query_params.get("confirm", "")
    return render(
        request,
        "run.html",
        auth,
        status=422 if draft else 200,
        r=r,
        status_name=r.get("traverser_status", r["status"]),
        traverser=traverser,
        record=record,
        steps=record["steps"],
        waits=[w for w in record["waits"] if w["kind"] != "approval"],
        approvals=approvals,
        checkpoints=checkpoints,
        history_cut=history_cut,
        kept=CHECKPOINT_HISTORY,
        timeline=timeline(record, approvals, history, audit),
        terminal=terminal,
        here=here,
        draft=draft,
        action=action,
        confirm=confirm if confirm == action else "",
        can_submit=auth.principal.can(Permission.SUBMIT),
        actions=ACTIONS,
        runtime_note=None if traverser else WORKFLOW_RUNTIME,
        unclaimed=None
        if traverser or r["status"] != RunStatus.PENDING.value
        else UNCLAIMED.format(name=r["workflow"]),
        nav="runs",
        live_url=None if terminal else here + "/live",
    )


@router.get("/runs/{run_id}")
async def run_detail(request: Request, run_id: str) -> Response:
    return await run_page(request, await _reader(request), run_id)


@router.get("/runs/{run_id}/live")
async def run_live(request: Request, run_id: str) -> Response:
    """The run page's live regions (status, path, checkpoints, approvals, timeline)."""
    return await run_page(request, await _reader(request, live=True), run_id)


__all__ = ["ACTIONS", "UNCLAIMED", "WORKFLOW_RUNTIME", "router", "run_page"]
