"""The review console: server-rendered pages at ``/`` for reviewers and operators.

One Inbox for every kind of wait (approvals, pyworkflow hooks and step hooks; Approvals is its
filter, with recent decisions), Runs with their path and timeline, and Workers. Sign-in takes a bearer token;
only principals that may decide see or may submit the decide and resume forms. See
docs/reviewers.md.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from ._common import ConsoleExit
from ._forms import router as forms
from ._link_page import router as link_router
from ._notify_page import router as notify_router
from ._pages import router as pages
from ._run_pages import router as run_pages
from ._session import SecurityHeaders

__all__ = ["install_console"]


def install_console(app: FastAPI) -> None:
    """Serve the console from ``app``: its routes and the security headers (Content-Security-
    Policy and companions) on every response outside ``/api``. Sessions live in the database."""
    for router in (pages, run_pages, forms, link_router, notify_router):
        app.include_router(router)

    async def console_exit(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleExit)
        return exc.response

    app.add_exception_handler(ConsoleExit, console_exit)
    app.add_middleware(SecurityHeaders)
