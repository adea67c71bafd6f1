"""HTTP plumbing shared by the client and the worker: keep-alive connections (``_http``), orjson
bodies, and error responses turned into the typed exceptions of ``_errors``."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from ._credentials import load_token
from ._errors import ServerUnavailableError, error_from_response
from ._http import HttpPool
from ._json import dumps, loads

DEFAULT_SERVER = "http://127.0.0.1:7878"
_API = "/api/v2"


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
        content = None if body is None else dumps(body)
        status, raw = await self._pool.request(method, _API + path, content, params, read_timeout)
        try:
            data = loads(raw) if raw else None
        except ValueError:
            data = raw
        if status == 503:  # the server is up but cannot reach its database: retry like unreachable
            error = error_from_response(status, data)
            raise ServerUnavailableError(f"{self.base_url}: {error.message}")
        if status >= 400:
            raise error_from_response(status, data)
        return data

    async def aclose(self) -> None:
        await self._pool.aclose()
