"""HTTP plumbing shared by the client, the worker and the ``atfg`` CLI: keep-alive connections
(``_http``), orjson bodies, and error responses turned into the typed exceptions of ``_errors``.
``BlockingTransport`` makes the same calls from synchronous code."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import quote

from ._credentials import load_token
from ._errors import ServerUnavailableError, error_from_response
from ._http import HttpPool
from ._json import dumps, loads

DEFAULT_SERVER = "http://127.0.0.1:7878"
_API = "/api/v2"

T = TypeVar("T")


def q(segment: object) -> str:
    """One path segment, percent-encoded (ids, checkpoint names and memory keys are user data)."""
    return quote(str(segment), safe="")


def server_url(explicit: str | None = None) -> str:
    """Flag > ``ATFGRAPH_SERVER`` > the loopback default."""
    return (explicit or os.environ.get("ATFGRAPH_SERVER") or DEFAULT_SERVER).rstrip("/")


class Transport:
    """``token``: the bearer token; default ``$ATFGRAPH_TOKEN`` or, for a local server, the
    ``kind`` credential (``owner`` for clients, ``worker`` for workers) from its credentials file."""

    def __init__(
        self,
        base_url: str | None = None,
        timeout: float = 30.0,
        *,
        token: str | None = None,
        kind: str = "owner",
    ) -> None:
        self.base_url = server_url(base_url)
        self._pool = HttpPool(self.base_url, timeout=timeout, token=token or load_token(kind))

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> Any:
        """One API call; ``read_timeout`` overrides the pool's timeout (long polls)."""
        # Refused here, naming where, before anything is sent: a number JSON would not keep.
        content = None if body is None else dumps(body, what=f"{method} {path}: the body", root="body")
        status, raw = await self._pool.request(method, _API + path, content, params, read_timeout)
        try:
            data = loads(raw) if raw else None
        except ValueError:
            data = raw
        if status == 503:  # the server is up but cannot reach its database: retry like unreachable
            error = error_from_response(status, data)
            raise ServerUnavailableError(f"{self.base_url}: {error.message}") from error
        if status >= 400:
            raise error_from_response(status, data)
        return data

    async def aclose(self) -> None:
        await self._pool.aclose()


class BlockingTransport:
    """A Transport for synchronous callers (the ``atfg`` CLI): the same calls, paths and typed
    errors, each run to completion on one private event loop that lives until ``close``, so
    keep-alive connections are reused from one call to the next. Not for use inside a running
    event loop (await ``Transport`` there)."""

    def __init__(
        self,
        base_url: str | None = None,
        timeout: float = 30.0,
        *,
        token: str | None = None,
        kind: str = "owner",
    ) -> None:
        self.transport = Transport(base_url, timeout, token=token, kind=kind)
        self._runner = asyncio.Runner()

    @property
    def base_url(self) -> str:
        return self.transport.base_url

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine on the transport's loop (Ctrl-C cancels it and raises
        KeyboardInterrupt)."""
        return self._runner.run(call)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> Any:
        """``Transport.request``, blocking."""
        return self._run(self.transport.request(method, path, body, params, read_timeout))

    def close(self) -> None:
        try:
            self._run(self.transport.aclose())
        finally:
            self._runner.close()
