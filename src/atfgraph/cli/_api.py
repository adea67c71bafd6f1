"""The ``atfg`` commands' calls to the server's API v2: blocking, every failure a CliError."""

from __future__ import annotations

from typing import Any

import click
import httpx

from ._base import EXIT_AUTH, EXIT_ERROR, EXIT_UNAVAILABLE, EXIT_USAGE, CliError, settings

_API = "/api/v2"


class Api:
    """Blocking calls to one server's API v2; every failure becomes a CliError."""

    def __init__(self, server: str, token: str | None, timeout: float = 30.0) -> None:
        self.server = server
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            self._http = httpx.Client(base_url=server + _API, headers=headers, timeout=timeout)
        except (ValueError, httpx.InvalidURL) as exc:
            raise CliError(f"bad server URL {server!r}: {exc}", EXIT_USAGE) from None

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return self.request("GET", path, params=params, timeout=timeout)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = self._http.request(method, path, json=body, params=params, **extra)
        except httpx.TimeoutException:
            raise CliError(
                f"the atfgraph server at {self.server} did not answer in time", EXIT_UNAVAILABLE
            ) from None
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise CliError(
                f"cannot reach the atfgraph server at {self.server}: {reason}", EXIT_UNAVAILABLE
            ) from None
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = None
        if response.status_code >= 400:
            raise _error(response.status_code, data)
        return data


def _error(status: int, data: Any) -> CliError:
    code, message = "http_error", f"HTTP {status}"
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        code = str(data["error"].get("code", code))
        message = str(data["error"].get("message", message))
    if status == 404:
        return CliError(f"not found: {message.removesuffix(' not found')}", EXIT_ERROR)
    if status in (401, 403):
        return CliError(f"{code}: {message}", EXIT_AUTH)
    return CliError(f"{code}: {message}", EXIT_ERROR)


def api(ctx: click.Context) -> Api:
    """The command's API client, closed when the command ends."""
    s = settings(ctx)
    client = Api(s.server, s.token)
    ctx.call_on_close(client.close)
    return client
