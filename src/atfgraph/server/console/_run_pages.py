"""One run's page, for a traverser or a pyworkflow run, and its live regions.

The page is rendered once; console.js then polls ``/runs/{id}/live`` (the same page, of which
it takes the ``data-live`` regions) while the run is in progress, and leaves alone a region the
reviewer is typing in. No full-page refresh ever replaces a form.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from pyworkflow.store import RunStatus

from ..._models import TraverserStatus
from .._identity import Permission
from .._refusals import NotFound
from .._store import GraphStore
from ._answers import schema_fields
from ._common import Auth, Draft, _identity, _reader, _store, assignments, error_page, render

router = APIRouter(include_in_schema=False)

#: What the run page's buttons do, each confirmed on the page first (``?confirm=ACTION``).
ACTIONS = {
    "cancel": "Cancel this run? It stops at once: its lease ends and its pending approvals leave the inbox.",
    "retry": "Retry this failed run? A new attempt starts from its checkpoints, steps and decisions.",
}


async def run_page(request: Request, auth: Auth, run_id: str, draft: Draft | None = None) -> Response:
    """The page of run ``run_id`` (a traverser's or a pyworkflow run's), with ``draft`` (a
    refused answer) shown in its card."""
    store = _store(request)
    here = f"/runs/{quote(run_id, safe='')}"
    try:
        run = store.console_run(run_id)
    except NotFound:
        try:
            record = GraphStore._decoded(await store.get_run(run_id))
        except NotFound:
            return error_page(request, 404, "Not found", f"There is no run {run_id!r}.", auth)
        terminal = RunStatus(record["run"]["status"]).is_terminal
        return render(
            request,
            "workflow_run.html",
            auth,
            status=422 if draft else 200,
            r=record["run"],
            record=record,
            terminal=terminal,
            here=here,
            nav="runs",
            live_url=None if terminal else here + "/live",
        )
    identity = _identity(request)
    audit = await identity.list_audit(target=run_id, limit=100)
    assigned = assignments(store, [a["id"] for a in run["approvals"]])
    for approval in run["approvals"]:
        approval["fields"] = schema_fields(approval["response_schema"])
        approval["assigned"] = assigned[approval["id"]]
        audit += await identity.list_audit(target=approval["id"], limit=100)
    terminal = TraverserStatus(run["traverser"]["status"]).is_terminal
    confirm = request.query_params.get("confirm", "")
    return render(
        request,
        "run.html",
        auth,
        status=422 if draft else 200,
        run=run,
        t=run["traverser"],
        timeline=_timeline(run, audit),
        terminal=terminal,
        here=here,
        draft=draft,
        confirm=confirm if confirm in ACTIONS else "",
        can_submit=auth.principal.can(Permission.SUBMIT),
        actions=ACTIONS,
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


def _timeline(run: dict[str, Any], audit: list[dict[str, Any]]) -> list[tuple[float, str, str, float | None]]:
    """What the store recorded about one run, in time order: (when, what, detail, seconds since
    the previous entry)."""
    t = run["traverser"]
    events: list[tuple[float, str, str]] = [(t["created_at"], "submitted", t["target"])]
    for step in run["steps"]:
        events.append(
            (step["created_at"], f"step {step['status']}", f"{step['target']} (attempt {step['attempt']})")
        )
    for cp in run["checkpoints"]:
        events.append((cp["updated_at"], "checkpoint saved", f"{cp['name']} (revision {cp['revision']})"))
    for a in run["approvals"]:
        events.append((a["created_at"], "approval requested", a["operation_key"]))
        if a["decided_at"] is not None:
            events.append((a["decided_at"], f"approval {a['status']}", f"by {a['decided_by']}"))
    for entry in audit:
        detail = f"{entry['principal']} ({entry['role']}): {entry['outcome']}"
        events.append((entry["at"], f"audit {entry['action']}", detail))
    if t["finished_at"] is not None:
        events.append((t["finished_at"], t["status"], f"after attempt {t['attempt']}"))
    else:
        events.append(
            (t["updated_at"], f"now {t['status']}", f"attempt {t['attempt']} of {t['max_attempts']}")
        )
    events.sort(key=lambda e: e[0])
    return [
        (at, what, detail, None if i == 0 else at - events[i - 1][0])
        for i, (at, what, detail) in enumerate(events)
    ]


__all__ = ["ACTIONS", "router", "run_page"]
