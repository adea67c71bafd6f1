"""The console's plumbing: the template environment and its filters, rendering, sign-in state
(session cookie or bearer token), form reading with CSRF and permission checks, and the parsing
of a typed JSON answer. The pages (``_pages``, ``_run_pages``) and forms (``_forms``) build on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.datastructures import FormData

from ..._json import MAX_BODY_BYTES
from .._assign import Assignees, read_assignment
from .._console_reads import COUNT_CAP
from .._identity import Identity, Permission, Principal, Role
from .._service import Service
from .._store import GraphStore
from ._answers import MAX_FIELDS, headline
from ._markdown import question_html
from ._session import SESSION_COOKIE, Session, Sessions, same_secret

STATIC = {
    name: resources.files(__package__).joinpath("static", name).read_bytes()
    for name in ("console.css", "console.js")
}
#: A form's fields at most: a schema form's generated fields and the few fixed ones.
MAX_FORM_FIELDS = MAX_FIELDS + 10

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


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def shown_count(counts: int | Iterable[int], partial: bool = False) -> str:
    """A count the store capped at COUNT_CAP (``console_inbox_counts``, ``console_run_counts``),
    or the sum of several, as shown: "1,234", or "10,000+" when the count stopped at its cap (a
    sum ends in "+" when any of its counts did) or, ``partial``, a search's count stopped at the
    end of its window (SEARCH_WINDOW): "12+"."""
    parts = [counts] if isinstance(counts, int) else list(counts)
    total = sum(min(n, COUNT_CAP) for n in parts)
    return f"{total:,}+" if partial or any(n > COUNT_CAP for n in parts) else f"{total:,}"


_env.filters.update(pretty=_pretty, when=_when, iso=_iso, ago=_ago, duration=_duration)


def may_decide(assigned: dict[str, Any] | None, principal: Principal) -> bool:
    """Whether ``principal`` may decide an approval assigned so (None: anyone allowed to decide
    may): the rule the decision itself enforces (``Assignees.allows``)."""
    if assigned is None:
        return True
    return Assignees(tuple(assigned["roles"]), tuple(assigned["principals"])).allows(principal)


def assignments(store: GraphStore, approval_ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each approval's assignment (None: not assigned), in one read."""
    if not approval_ids:
        return {}
    return store.db.read(lambda conn: {i: read_assignment(conn, i) for i in approval_ids})


_env.globals.update(headline=headline, may_decide=may_decide, question_html=question_html)


@dataclass(frozen=True, slots=True)
class Draft:
    """A refused answer shown again: the card it belongs to (the approval's or hook's id), what
    the reviewer typed (by form field) and the errors beside the fields."""

    target: str
    typed: dict[str, str]
    errors: dict[str, str]


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
    context.setdefault("draft", None)
    context.setdefault("nav", "")
    context.setdefault("live_url", None)
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
    """A console cookie: ``Secure`` when the original request was https (the server's own TLS, or
    a trusted proxy's ``X-Forwarded-Proto``/``Forwarded``: ``_proxy.ForwardedHeaders`` sets the
    scheme), so a browser never sends it over plain HTTP."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _clear_cookie(request: Request, response: Response, name: str) -> None:
    """Remove a console cookie, with the attributes it was set with."""
    response.delete_cookie(
        name, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )


def _redirect(location: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=303)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


async def _authenticate(request: Request, *, live: bool = False) -> Auth | None:
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
        await sessions.touch(session, take_flashes=request.method == "GET" and not live)
        return Auth(principal, session)
    raw = _bearer(request)
    if raw:
        principal = _identity(request).verify(raw)
        if principal is not None:
            return Auth(principal, None)
    return None


async def _reader(request: Request, *, live: bool = False) -> Auth:
    """A page view: signed-in principals who may read; everyone else goes to the sign-in page.
    A ``live`` read (a page's update) leaves the session's messages for the next page."""
    auth = await _authenticate(request, live=live)
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
    return await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_BODY_BYTES)


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


def _back(form: FormData, default: str) -> str:
    """Where to send the browser after a form: a console path, never another site."""
    back = _text(form, "back")
    if back.startswith("/") and not back.startswith("//") and "\\" not in back and len(back) < 300:
        return back
    return default


async def _flash(request: Request, auth: Auth, kind: str, text: str) -> None:
    if auth.session is not None:
        await sessions_of(request).flash(auth.session, kind, text)
