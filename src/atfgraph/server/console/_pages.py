"""The console's pages: sign-in, the Inbox (every kind of wait, with Approvals as its filter),
Runs and Workers, and the static files. One run's page is ``_run_pages``; the forms that change
things are ``_forms``.
"""

from __future__ import annotations

import math
import secrets
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response

from pyworkflow import MAX_WORKFLOW_NAME

from ..._models import TraverserStatus
from .._console_reads import SEARCH_WINDOW
from .._graph_sql import ENGINE_STATUS
from .._identity import Permission
from .._runs_reads import RUN_STATUSES, engine_status
from .._store import GraphStore
from ._answers import schema_fields
from ._common import (
    _WORKER_REFUSED,
    STATIC,
    Draft,
    _authenticate,
    _clear_cookie,
    _client,
    _form,
    _identity,
    _reader,
    _redirect,
    _set_cookie,
    _store,
    _text,
    assignments,
    error_page,
    render,
    sessions_of,
    shown_count,
)
from ._session import LOGIN_COOKIE, SESSION_COOKIE, same_secret

router = APIRouter(include_in_schema=False)


# -- sign-in ----------------------------------------------------------------------------------


@router.get("/login")
async def login_page(request: Request) -> Response:
    if await _authenticate(request) is not None:
        return _redirect("/")
    nonce = request.cookies.get(LOGIN_COOKIE) or ""
    if len(nonce) < 20 or len(nonce) > 100:
        nonce = secrets.token_urlsafe(32)
    response = render(request, "login.html", None, nonce=nonce, message=None)
    _set_cookie(request, response, LOGIN_COOKIE, nonce, 3600)
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    nonce = request.cookies.get(LOGIN_COOKIE)
    if not same_secret(nonce, form.get("csrf")):
        return error_page(
            request,
            403,
            "Form refused",
            "The sign-in form's CSRF token is missing or stale. Reload and retry.",
        )
    identity = _identity(request)
    raw = _text(form, "token").strip()
    principal = identity.verify(raw)
    if principal is None:
        await identity.audit(
            None,
            "console.signin",
            target=None,
            outcome="denied",
            detail="unknown token",
            client=_client(request),
        )
        return render(
            request, "login.html", None, 401, nonce=nonce, message="That token is not valid (or was revoked)."
        )
    if not principal.can(Permission.READ):
        await identity.audit(principal, "console.signin", target=None, outcome="denied", detail="worker-only")
        return error_page(request, 403, "Sign-in refused", _WORKER_REFUSED)
    session = await sessions_of(request).open(principal.id)
    await identity.audit(principal, "console.signin", target=None, outcome="allowed")
    response = _redirect("/")
    _set_cookie(request, response, SESSION_COOKIE, session.id, None)
    _clear_cookie(request, response, LOGIN_COOKIE)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await _form(request)
    auth = await _authenticate(request)
    if auth is not None and auth.session is not None:
        if not same_secret(auth.session.csrf, form.get("csrf")):
            return error_page(
                request, 403, "Form refused", "The form's CSRF token is missing or stale.", auth
            )
        await sessions_of(request).close(auth.session)
    response = _redirect("/login")
    _clear_cookie(request, response, SESSION_COOKIE)
    return response


# -- the inbox ----------------------------------------------------------------------------------

#: The inbox's kind filter: its values and labels ("approval" is the Approvals page).
INBOX_KINDS = {"all": "all", "approval": "approvals", "hook": "hooks", "step_hook": "step hooks"}
_KIND_SETS = {"all": ("approval", "hook", "step_hook"), "approval": ("approval",), "hook": ("hook",),
              "step_hook": ("step_hook",)}  # fmt: skip
#: Waits on one page of the inbox; the next ones are behind the "next" link.
INBOX_PAGE = 50


def _cursor(
    value: str, errors: list[str], listing: str = "inbox", name: str = "after"
) -> tuple[float, str] | None:
    """A listing's cursor "CREATED_AT~ID", a row's place (None: the first page): the inbox's and
    the Runs page's, written the same way."""
    if not value:
        return None
    at, sep, ident = value.partition("~")
    try:
        if not sep or not ident or len(value) > 300 or not math.isfinite(float(at)):
            raise ValueError
        return float(at), ident
    except ValueError:
        errors.append(f"{name}: {value[:50]!r} is not a page of this {listing}; showing the first page")
        return None


def _served(store: GraphStore, nodes: set[str]) -> dict[str, bool]:
    """Which of ``nodes`` have a worker seen within a lease (one that heartbeats)."""
    now = time.time()
    live: dict[str, bool] = dict.fromkeys(nodes, False)
    for w in store.list_workers(1000):
        if w["node_id"] in live and now - w["last_seen"] <= store.lease_seconds:
            live[w["node_id"]] = True
    return live


def inbox_context(request: Request, draft: Draft | None = None) -> dict[str, Any]:
    """The inbox page's values for the query string of ``request`` (the kind filter, the search,
    the cursor), and the decided approvals when approvals are shown."""
    q = request.query_params
    errors: list[str] = []
    kind = q.get("kind", "") or "all"
    if kind not in INBOX_KINDS:
        errors.append(f"kind: {kind[:50]!r} is not one of {', '.join(INBOX_KINDS)}")
        kind = "all"
    search = q.get("q", "").strip()[:200]
    after = _cursor(q.get("after", ""), errors)
    store = _store(request)
    page = store.console_inbox(_KIND_SETS[kind], search or None, after, INBOX_PAGE)
    live = _served(store, {i["run"]["node_id"] for i in page.items if i["kind"] == "approval"})
    cards = [_card(item, live) for item in page.items]
    assigned = assignments(store, [c["id"] for c in cards if c["kind"] == "approval"])
    for card in cards:
        if card["kind"] == "approval":
            card["assigned"] = assigned[card["id"]]
    counted = store.console_inbox_counts()
    counts = {"all": shown_count(counted.values()), **{k: shown_count(n) for k, n in counted.items()}}
    base = {k: v for k, v in (("kind", kind if kind != "all" else ""), ("q", search)) if v}
    next_url = None
    if page.next is not None:
        next_url = "/inbox?" + urlencode({**base, "after": f"{page.next[0]!r}~{page.next[1]}"})
    live_query = urlencode({**base, **({"after": q.get("after", "")} if after else {})})
    return {
        "items": cards,
        "counts": counts,
        "total": counts[kind],
        "kinds": INBOX_KINDS,
        "filters": {"kind": kind, "q": search},
        "errors": errors,
        "next_url": next_url,
        "stopped": page.stopped,
        "search_window": SEARCH_WINDOW,
        "first_url": ("/inbox?" + urlencode(base)) if after else None,
        "page_size": INBOX_PAGE,
        "decided": store.console_approvals(False, 20) if kind in ("all", "approval") else None,
        "back": request.url.path + (("?" + request.url.query) if request.url.query else ""),
        "draft": draft,
        "nav": "approvals" if kind == "approval" else "inbox",
        "live_url": "/inbox/live" + (("?" + live_query) if live_query else ""),
    }


def _card(item: dict[str, Any], live: dict[str, bool]) -> dict[str, Any]:
    run = item["run"]
    if item["kind"] == "approval":
        node = run["node_id"]
        if live.get(node):
            served = {
                "ok": True,
                "text": f"A worker of node {node!r} is connected: the run continues as soon as you decide.",
            }
        else:
            served = {
                "ok": False,
                "text": f"No worker of node {node!r} has been seen within a lease: your decision is "
                "recorded at once, and the run continues when a worker for that node connects.",
            }
        return {
            "id": item["id"],
            "kind": "approval",
            "traverser_id": run["id"],
            "operation_key": item["key"],
            "status": "pending",
            "prompt": item["prompt"],
            "checkpoint": item["checkpoint"],
            "created_at": item["created_at"],
            "expires_at": item["expires_at"],
            "target": run.get("target"),
            "node_id": node,
            "traverser_status": run.get("traverser_status", run["status"]),
            "attempt": run.get("attempt"),
            "fields": schema_fields(item["response_schema"]),
            "served": served,
        }
    return {
        "id": item["id"],
        "run_id": run["id"],
        "workflow": run["workflow"],
        "run_status": run["status"],
        "kind": item["kind"],
        "name": item["name"],
        "step_key": item["step_key"],
        "created_at": item["created_at"],
        "expires_at": item["expires_at"],
        "schema": item["payload_schema"],
        "fields": schema_fields(item["payload_schema"]),
    }


@router.get("/")
async def landing(request: Request) -> Response:
    """The landing page is the inbox (every kind of wait)."""
    auth = await _reader(request)
    return render(request, "inbox.html", auth, **inbox_context(request))


@router.get("/inbox")
async def inbox(request: Request) -> Response:
    auth = await _reader(request)
    return render(request, "inbox.html", auth, **inbox_context(request))


@router.get("/inbox/live")
async def inbox_live(request: Request) -> Response:
    """The inbox's live regions (counts and cards), polled by console.js."""
    auth = await _reader(request, live=True)
    return render(request, "inbox.html", auth, **inbox_context(request))


# -- runs and workers ---------------------------------------------------------------------------


_STATUSES = [s.value for s in TraverserStatus]


def _parse_time(value: str, errors: list[str], label: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        errors.append(f"{label}: {value!r} is not a date and time (YYYY-MM-DDTHH:MM, UTC)")
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


_KINDS = {"all": "all", "workflow": "workflows", "traverser": "traversers"}
#: Runs on one page of the Runs page; the others are behind its "older" and "newer" links.
RUNS_PAGE = 50
#: The shortest search the Runs page also takes as the start of a run's id (as git takes 4).
MIN_ID_PREFIX = 4


def runs_context(request: Request) -> dict[str, Any]:
    """The Runs page's values for the query string of ``request``: the filters (kind, status,
    node, created since and until), the search, the cursor (``after``: older than a run,
    ``before``: newer than one, written as the inbox's "CREATED_AT~ID"), the page and the counts
    by status under the same filters."""
    q = request.query_params
    errors: list[str] = []
    kind = q.get("kind", "") or "all"
    if kind not in _KINDS:
        errors.append(f"kind: {kind[:50]!r} is not one of {', '.join(_KINDS)}")
        kind = "all"
    status = q.get("status", "")
    if status and status not in RUN_STATUSES:
        errors.append(f"status: {status[:50]!r} is not one of {', '.join(_STATUSES)}")
        status = ""
    node = q.get("node", "").strip()[:200]
    search = q.get("q", "").strip()[:200]
    since = _parse_time(q.get("since", ""), errors, "since")
    until = _parse_time(q.get("until", ""), errors, "until")
    after = _cursor(q.get("after", ""), errors, "list of runs")
    before = None if after is not None else _cursor(q.get("before", ""), errors, "list of runs", "before")
    store = _store(request)
    page = store.console_runs(
        kind, status or None, node or None, since, until, RUNS_PAGE, search or None, after, before
    )
    counts = store.console_run_counts(kind, node or None, since, until, search or None)
    # A search that can be an id's start also finds the runs it starts, however old (an index
    # range, where the search itself reads SEARCH_WINDOW runs at a time).
    by_id: list[str] = []
    more_ids = False
    if len(search) >= MIN_ID_PREFIX and not any(c.isspace() for c in search):
        by_id, more_ids = store.ids_with_prefix("run", search)
    filters = {
        "kind": kind,
        "status": status,
        "node": node,
        "q": search,
        "since": q.get("since", ""),
        "until": q.get("until", ""),
    }
    base = {k: v for k, v in filters.items() if v and not (k == "kind" and v == "all")}
    here = {**base, **({"after": q["after"]} if after else {"before": q["before"]} if before else {})}

    def at(cursor: tuple[float, str] | None, name: str) -> str | None:
        return None if cursor is None else "/runs?" + urlencode({**base, name: f"{cursor[0]!r}~{cursor[1]}"})

    by_status, partial = counts.by_status, counts.partial
    matching = shown_count(by_status.get(engine_status(status), 0) if status else by_status.values(), partial)

    def status_url(value: str) -> str:
        """This listing with the status filter ``value`` (empty: any), from its first page."""
        chosen = {k: v for k, v in base.items() if k != "status"} | ({"status": value} if value else {})
        return "/runs?" + urlencode(chosen)

    return {
        "items": page.items,
        "kinds": _KINDS,
        "statuses": [(s, ENGINE_STATUS[s]) for s in _STATUSES],
        "counts": {
            api: shown_count(by_status.get(engine, 0), partial)
            for api, engine in ((s, ENGINE_STATUS[s]) for s in _STATUSES)
        },
        "any": shown_count(by_status.values(), partial),
        "stopped": page.stopped,
        "by_id": by_id,
        "more_ids": more_ids,
        "counted_in_window": partial,
        "search_window": SEARCH_WINDOW,
        "matching": matching,
        "filters": filters,
        "errors": errors,
        "page_size": RUNS_PAGE,
        "next_url": at(page.next, "after"),
        "previous_url": at(page.previous, "before"),
        "first_url": ("/runs?" + urlencode(base)) if (after or before) else None,
        "status_url": status_url,
        "nav": "runs",
        "live_url": "/runs/live" + (("?" + urlencode(here)) if here else ""),
        "max_workflow_name": MAX_WORKFLOW_NAME,
        "start": {
            "typed": {"kind": "traverser", "target": "", "workflow": "", "input": "", "max_attempts": ""},
            "errors": {},
        },
    }


@router.get("/runs")
async def runs(request: Request) -> Response:
    auth = await _reader(request)
    return render(request, "runs.html", auth, **runs_context(request))


@router.get("/runs/live")
async def runs_live(request: Request) -> Response:
    """The Runs page's live regions (the counts and the rows of this page), polled by console.js."""
    auth = await _reader(request, live=True)
    return render(request, "runs.html", auth, **runs_context(request))


@router.get("/workers")
async def workers(request: Request) -> Response:
    auth = await _reader(request)
    store = _store(request)
    now = time.time()
    items = []
    for w in store.list_workers(200):
        view = GraphStore._decoded(w)
        stats = view["stats"] or {}
        view["permits_in_use"] = stats.get("permits_in_use")
        view["paused"] = stats.get("paused")
        # Workers heartbeat every third of a lease: one missed lease means it is gone.
        view["connected"] = now - view["last_seen"] <= store.lease_seconds
        items.append(view)
    return render(request, "workers.html", auth, items=items, nav="workers")


@router.get("/static/{name}")
async def static(name: str) -> Response:
    body = STATIC.get(name)
    if body is None:
        return Response("not found", status_code=404, media_type="text/plain")
    media = "text/css" if name.endswith(".css") else "text/javascript"
    return Response(body, media_type=media, headers={"cache-control": "max-age=300"})


__all__ = ["INBOX_KINDS", "RUNS_PAGE", "inbox_context", "router", "runs_context"]
