"""The console's pages and forms: Policies (the landing page), Inbox, Runs (traversers and
pyworkflow runs), one run of either kind, Workers, sign-in and sign-out. Plain HTML forms with
POST-redirect-GET; no script at all.

Decisions and hook resumptions call the service functions the API calls (``_service``:
``decide``, ``resume_hook``), so the console records exactly what
``POST /api/v2/approvals/{id}/decide`` and ``POST /api/v2/hooks/{id}/resume`` record: the same
validation, store transition, wake-ups and audit entry, with the signed-in principal as
``decided_by``.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.datastructures import FormData

from pyworkflow.store import RunStatus, WaitKind

from ..._json import MAX_BODY_BYTES, MAX_DEPTH, InexactNumberError, JSONTooDeepError, dumps, loads_exact
from ..._models import TraverserStatus
from .._graph_sql import ENGINE_STATUS
from .._identity import Identity, Permission, Principal, Role
from .._refusals import NotFound, Refusal
from .._runs_reads import RUN_STATUSES
from .._service import Service
from .._store import GraphStore
from ._session import LOGIN_COOKIE, SESSION_COOKIE, Session, Sessions, same_secret

router = APIRouter(include_in_schema=False)

_STYLESHEET = resources.files(__package__).joinpath("static", "console.css").read_bytes()

_env = Environment(
    loader=PackageLoader(__package__, "templates"),
    autoescape=True,  # every value is untrusted text (agent output above all) unless proven otherwise
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _pretty(value: Any) -> str:
    """JSON as indented text; the template escapes it like any other text."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _ago(ts: float | None) -> str:
    if ts is None:
        return ""
    delta = time.time() - ts
    future = delta < 0
    delta = abs(delta)
    if delta < 60:
        text = f"{int(delta)} s"
    elif delta < 3600:
        text = f"{int(delta // 60)} min"
    elif delta < 86400:
        text = f"{int(delta // 3600)} h"
    else:
        text = f"{int(delta // 86400)} d"
    return f"in {text}" if future else f"{text} ago"


_env.filters.update(pretty=_pretty, when=_when, iso=_iso, ago=_ago)


# -- plumbing ---------------------------------------------------------------------------------


class ConsoleExit(Exception):
    """Stop handling a console request and answer with ``response`` (a redirect or an error page)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


@dataclass(frozen=True, slots=True)
class Auth:
    principal: Principal
    #: None when the request carried ``Authorization: Bearer`` instead of a session cookie.
    session: Session | None

    @property
    def can_decide(self) -> bool:
        return self.principal.can(Permission.DECIDE)


def _store(request: Request) -> GraphStore:
    store: GraphStore = request.app.state.store
    return store


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _identity(request: Request) -> Identity:
    identity: Identity = request.app.state.identity
    return identity


def sessions_of(request: Request) -> Sessions:
    return Sessions(_store(request).db)


def render(
    request: Request, template: str, auth: Auth | None, status: int = 200, **context: Any
) -> HTMLResponse:
    body = _env.get_template(template).render(
        auth=auth,
        flashes=auth.session.flashes if auth and auth.session else [],
        csrf=auth.session.csrf if auth and auth.session else "",
        path=request.url.path,
        **context,
    )
    response = HTMLResponse(body, status_code=status)
    response.headers["cache-control"] = "no-store"
    return response


def error_page(request: Request, status: int, title: str, message: str, auth: Auth | None = None) -> Response:
    return render(request, "error.html", auth, status, title=title, message=message)


def _set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _redirect(location: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=303)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


async def _authenticate(request: Request) -> Auth | None:
    """The signed-in principal: the session cookie's (its token re-verified by id, so a revoked
    token ends the session) or, for scripts, a bearer token's. A page view (GET) takes the
    session's messages for the page it shows."""
    sessions = sessions_of(request)
    session = sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is not None:
        principal = _identity(request).principal_of(session.token_id)
        if principal is None:
            await sessions.close(session)
            return None
        await sessions.touch(session, take_flashes=request.method == "GET")
        return Auth(principal, session)
    raw = _bearer(request)
    if raw:
        principal = _identity(request).verify(raw)
        if principal is not None:
            return Auth(principal, None)
    return None


async def _reader(request: Request) -> Auth:
    """A page view: signed-in principals who may read; everyone else goes to the sign-in page."""
    auth = await _authenticate(request)
    if auth is None:
        raise ConsoleExit(_redirect("/login"))
    if not auth.principal.can(Permission.READ):
        raise ConsoleExit(error_page(request, 403, "Not allowed", _WORKER_REFUSED))
    return auth


async def _form(request: Request) -> FormData:
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > 2 * MAX_BODY_BYTES:
        raise ConsoleExit(
            error_page(request, 413, "Too large", "The form is larger than the server accepts.")
        )
    return await request.form(max_files=0, max_fields=20, max_part_size=MAX_BODY_BYTES)


def _client(request: Request) -> str | None:
    """The caller's address, by which anonymous attempts are counted (Identity.anonymous)."""
    return request.client.host if request.client else None


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


async def _writer(
    request: Request, form: FormData, permission: Permission, action: str, target: str | None
) -> Auth:
    """A form POST: a live session with its CSRF token (or a bearer token), and the permission.
    Refusals are 403 pages; refusals of decisions are audited as denied."""
    identity = _identity(request)
    auth = await _authenticate(request)
    if auth is None:
        await identity.audit(
            None,
            action,
            target=target,
            outcome="denied",
            detail="console: not signed in",
            client=_client(request),
        )
        raise ConsoleExit(error_page(request, 403, "Not signed in", "Sign in before submitting this form."))
    if auth.session is not None and not same_secret(auth.session.csrf, form.get("csrf")):
        await identity.audit(
            auth.principal, action, target=target, outcome="denied", detail="console: bad CSRF token"
        )
        raise ConsoleExit(
            error_page(
                request,
                403,
                "Form refused",
                "The form's CSRF token is missing or stale. Reload the page and try again.",
                auth,
            )
        )
    if not auth.principal.can(permission):
        await identity.audit(
            auth.principal, action, target=target, outcome="denied", detail="console: forbidden"
        )
        if auth.principal.role is Role.WORKER:
            message = _WORKER_REFUSED
        else:
            message = f"The role {auth.principal.role.value!r} may not {action}."
        raise ConsoleExit(error_page(request, 403, "Not allowed", message, auth))
    return auth


_WORKER_REFUSED = (
    "This is a worker-only credential. Workers run handlers; they cannot sign in to the console, "
    "decide approvals or resume hooks. Sign in with an owner, administrator or reviewer token."
)


def parse_json_field(text: str, *, note_key: str | None) -> Any:
    """A form's JSON answer. Empty is null. With ``note_key``, text that does not start like a
    JSON object or array is a note: ``{note_key: text}``. Raises ValueError with a reason."""
    stripped = text.strip()
    if not stripped:
        return None
    if note_key is not None and stripped[0] not in "{[":
        return {note_key: stripped}
    try:
        return loads_exact(stripped, root="$", max_depth=MAX_DEPTH)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except JSONTooDeepError as exc:
        raise ValueError(str(exc)) from None
    except InexactNumberError as exc:
        raise ValueError(f"not JSON the server keeps exactly: {exc}") from None


def _back(form: FormData, default: str) -> str:
    """Where to send the browser after a form: a console path, never another site."""
    back = _text(form, "back")
    if back.startswith("/") and not back.startswith("//") and "\\" not in back and len(back) < 300:
        return back
    return default


async def _flash(request: Request, auth: Auth, kind: str, text: str) -> None:
    if auth.session is not None:
        await sessions_of(request).flash(auth.session, kind, text)


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
    response.delete_cookie(LOGIN_COOKIE, path="/", httponly=True, samesite="strict")
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
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


# -- pages ------------------------------------------------------------------------------------


@router.get("/")
async def policies(request: Request) -> Response:
    auth = await _reader(request)
    store = _store(request)
    return render(
        request,
        "policies.html",
        auth,
        pending=store.console_approvals(True, 200),
        decided=store.console_approvals(False, 50),
    )


@router.get("/inbox")
async def inbox(request: Request) -> Response:
    """Pending approvals and pyworkflow hooks and step hooks: one query over the waits table
    (``GraphStore.inbox``), oldest first, shown in two sections."""
    auth = await _reader(request)
    approvals, hooks = [], []
    for item in GraphStore._decoded({"items": _store(request).inbox(_INBOX_LIMIT)})["items"]:
        run = item["run"]
        if item["kind"] == WaitKind.APPROVAL:
            approvals.append(
                {
                    "id": item["id"],
                    "traverser_id": run["id"],
                    "operation_key": item["key"],
                    "status": "pending",
                    "prompt": item["prompt"],
                    "checkpoint": item["checkpoint"],
                    "created_at": item["created_at"],
                    "expires_at": item["expires_at"],
                    "target": run.get("target"),
                    "node_id": run.get("node_id"),
                    "traverser_status": run.get("traverser_status", run["status"]),
                    "attempt": run.get("attempt"),
                }
            )
        else:
            hooks.append(
                {
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
                }
            )
    return render(request, "inbox.html", auth, pending=approvals, hooks=hooks)


#: The inbox page's one read: at most this many waits (the two reads it replaced took 200 each).
_INBOX_LIMIT = 400


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


@router.get("/runs")
async def runs(request: Request) -> Response:
    auth = await _reader(request)
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
    since = _parse_time(q.get("since", ""), errors, "since")
    until = _parse_time(q.get("until", ""), errors, "until")
    items = _store(request).console_runs(kind, status or None, node or None, since, until, 200)
    filters = {
        "kind": kind,
        "status": status,
        "node": node,
        "since": q.get("since", ""),
        "until": q.get("until", ""),
    }
    return render(
        request,
        "runs.html",
        auth,
        items=items,
        kinds=_KINDS,
        statuses=[(s, ENGINE_STATUS[s]) for s in _STATUSES],
        filters=filters,
        errors=errors,
    )


@router.get("/runs/{run_id}")
async def run_detail(request: Request, run_id: str) -> Response:
    auth = await _reader(request)
    store = _store(request)
    try:
        run = store.console_run(run_id)
    except NotFound:
        try:
            record = GraphStore._decoded(await store.get_run(run_id))
        except NotFound:
            return error_page(request, 404, "Not found", f"There is no run {run_id!r}.", auth)
        return render(
            request,
            "workflow_run.html",
            auth,
            r=record["run"],
            record=record,
            terminal=RunStatus(record["run"]["status"]).is_terminal,
            refresh_url=f"/runs/{quote(run_id, safe='')}",
        )
    identity = _identity(request)
    audit = await identity.list_audit(target=run_id, limit=100)
    for approval in run["approvals"]:
        audit += await identity.list_audit(target=approval["id"], limit=100)
    return render(
        request,
        "run.html",
        auth,
        run=run,
        t=run["traverser"],
        timeline=_timeline(run, audit),
        terminal=TraverserStatus(run["traverser"]["status"]).is_terminal,
        refresh_url=f"/runs/{quote(run_id, safe='')}",
    )


def _timeline(run: dict[str, Any], audit: list[dict[str, Any]]) -> list[tuple[float, str, str]]:
    """What the store recorded about one run, in time order: (when, what, detail)."""
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
    return events


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
    return render(request, "workers.html", auth, items=items)


@router.get("/static/console.css")
async def stylesheet() -> Response:
    return Response(_STYLESHEET, media_type="text/css", headers={"cache-control": "max-age=300"})


# -- forms that change things -----------------------------------------------------------------


@router.post("/approvals/{approval_id}/decide")
async def decide(request: Request, approval_id: str) -> Response:
    form = await _form(request)
    auth = await _writer(request, form, Permission.DECIDE, "approval.decide", approval_id)
    back = _back(form, "/")
    decision = _text(form, "decision")
    try:
        response = parse_json_field(_text(form, "response"), note_key="note")
    except ValueError as exc:
        await _flash(request, auth, "error", f"The response was not recorded: {exc}")
        return _redirect(back)
    stored = None if response is None else dumps(response)
    try:
        await _service(request).decide(auth.principal, approval_id, decision, stored)
    except Refusal as exc:
        await _flash(
            request, auth, "error", f"Approval {approval_id} was not decided: {exc.message} ({exc.code})"
        )
        return _redirect(back)
    await _flash(request, auth, "ok", f"Approval {approval_id} {decision} by {auth.principal.name}.")
    return _redirect(back)


@router.post("/hooks/{hook_id}/resume")
async def resume(request: Request, hook_id: str) -> Response:
    form = await _form(request)
    auth = await _writer(request, form, Permission.DECIDE, "hook.resume", hook_id)
    back = _back(form, "/inbox")
    try:
        payload = parse_json_field(_text(form, "payload"), note_key=None)
    except ValueError as exc:
        await _flash(request, auth, "error", f"The hook was not resumed: the payload is {exc}")
        return _redirect(back)
    try:
        await _service(request).resume_hook(auth.principal, hook_id, payload)
    except Refusal as exc:
        await _flash(request, auth, "error", f"Hook {hook_id} was not resumed: {exc.message} ({exc.code})")
        return _redirect(back)
    await _flash(request, auth, "ok", f"Hook {hook_id} resumed by {auth.principal.name}; its run continues.")
    return _redirect(back)
