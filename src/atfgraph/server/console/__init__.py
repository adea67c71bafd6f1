"""The review console: server-rendered pages at ``/`` for reviewers and operators.

Policies (pending approvals, oldest first, and recent decisions), one Inbox for approvals and
pyworkflow hooks, Runs with their path and timeline, and Workers. Sign-in takes a bearer token;
only principals that may decide see or may submit the decide and resume forms. See
docs/reviewers.md.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from ._link_page import router as link_router
from ._notify_page import router as notify_router
from ._pages import ConsoleExit, router
from ._session import SecurityHeaders

__all__ = ["install_console"]


def install_console(app: FastAPI) -> None:
    """Serve the console from ``app``: its routes and the security headers (Content-Security-
    Policy and companions) on every response outside ``/api``. Sessions live in the database."""
    app.include_router(router)
    app.include_router(link_router)
    app.include_router(notify_router)

    async def console_exit(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleExit)
        return exc.response

    app.add_exception_handler(ConsoleExit, console_exit)
    app.add_middleware(SecurityHeaders)
