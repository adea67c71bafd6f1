"""The hot routes of the worker protocol and of following a traverser, dispatched without
FastAPI's router and dependency machinery.

Why: on this 2-core machine FastAPI's per-request routing and dependency solving cost about as
much CPU as the handlers themselves, and an approval cycle makes nine requests. The same route
functions (``_routes``) serve both paths, so behaviour, validation and error shapes are
identical; FastAPI still serves everything else and documents these routes in OpenAPI.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request, Response
from starlette.types import Receive, Scope, Send

from . import _routes as routes
from ._auth import caller
from ._errors import ApiError, api_error, bad_request, database_refused, database_unavailable
from ._refusals import Refusal

log = logging.getLogger("atfgraph.server")

Route = Callable[..., Awaitable[Response]]


async def _get_traverser(request: Request, traverser_id: str) -> Response:
    """GET /traversers/{id}: the query is checked here as FastAPI would check it."""
    query = dict(parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True))
    wait_for = query.get("wait_for")
    if wait_for is not None and len(wait_for) > 200:
        raise bad_request("query.wait_for must be at most 200 characters")
    try:
        timeout = float(query.get("timeout", "0"))
    except ValueError:
        raise bad_request("query.timeout must be a number") from None
    if not math.isfinite(timeout) or not 0 <= timeout <= routes.MAX_CLIENT_WAIT:
        raise bad_request(f"query.timeout must be from 0 to {routes.MAX_CLIENT_WAIT}")
    return await routes.get_traverser(request, traverser_id, wait_for, timeout)


async def _decide(request: Request, approval_id: str) -> Response:
    return await routes.decide(request, approval_id, await caller(request))


async def _submit(request: Request) -> Response:
    return await routes.submit(request, await caller(request))


async def _request_approval(request: Request) -> Response:
    return await routes.request_approval(request, await caller(request))


_SEGMENT = "([^/]+)"
_ROUTES: dict[str, list[tuple[re.Pattern[str], Route]]] = {
    "POST": [
        (re.compile(f"/api/v2/workers/{_SEGMENT}/claim"), routes.claim),
        (re.compile(f"/api/v2/traversers/{_SEGMENT}/complete"), routes.complete),
        (re.compile("/api/v2/approvals"), _request_approval),
        (re.compile("/api/v2/traversers"), _submit),
        (re.compile(f"/api/v2/approvals/{_SEGMENT}/decide"), _decide),
    ],
    "PUT": [(re.compile(f"/api/v2/traversers/{_SEGMENT}/checkpoints/{_SEGMENT}"), routes.put_checkpoint)],
    "GET": [(re.compile(f"/api/v2/traversers/{_SEGMENT}"), _get_traverser)],
}


class FastPath:
    """ASGI: serve the hot routes directly, hand everything else to the FastAPI app."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for pattern, route in _ROUTES.get(scope["method"], ()):
                match = pattern.fullmatch(scope["path"])
                if match is not None:
                    scope["app"] = self.app
                    response = await self._call(route, Request(scope, receive), match.groups())
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    @staticmethod
    async def _call(route: Route, request: Request, params: tuple[Any, ...]) -> Response:
        try:
            return await route(request, *params)
        except (ApiError, Refusal) as exc:
            error = api_error(exc)
            return routes.error_response(error.status, error.code, error.message)
        except Exception as exc:
            if (down := database_unavailable(exc)) is not None:
                log.warning("%s %s: %s", request.method, request.url.path, down.message)
                return routes.unavailable_response(down)
            if (refused := database_refused(exc)) is not None:
                log.warning("%s %s: %s", request.method, request.url.path[:300], refused.message)
                return routes.error_response(refused.status, refused.code, refused.message)
            log.exception("unhandled error on %s %s", request.method, request.url.path)
            return routes.error_response(500, "internal_error", "the server failed to handle this request")
