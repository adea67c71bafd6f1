"""The ``atfg`` commands' calls to the server's API v2, through the SDK's transport (paths below
/api/v2, bodies, the typed errors of error responses); every failure becomes a CliError."""

from __future__ import annotations

from typing import Any

import click

from .._errors import ServerError, ServerUnavailableError
from .._http import NoAnswerError
from .._transport import BlockingTransport
from ._base import EXIT_AUTH, EXIT_ERROR, EXIT_UNAVAILABLE, CliError, settings


class Api:
    """Blocking calls to one server's API v2; every failure becomes a CliError."""

    def __init__(self, server: str, token: str | None, timeout: float = 30.0) -> None:
        self.server = server
        try:
            self._transport = BlockingTransport(server, timeout, token=token)
        except ValueError as exc:  # a malformed server URL or token: nothing to connect to
            raise self._unreachable(str(exc)) from None

    def close(self) -> None:
        self._transport.close()

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
        """One call; ``timeout`` overrides the client's (long polls)."""
        try:
            return self._transport.request(method, path, body, params, read_timeout=timeout)
        except ServerError as exc:
            raise _refused(exc) from None
        except ServerUnavailableError as exc:
            if isinstance(exc.__cause__, ServerError):
                # A 503: the server answered, its database did not. The SDK retries that like an
                # unreachable server; the CLI reports the server's error.
                raise _refused(exc.__cause__) from None
            if isinstance(exc, NoAnswerError) and exc.timed_out:
                raise CliError(
                    f"the atfgraph server at {self.server} did not answer in time", EXIT_UNAVAILABLE
                ) from None
            raise self._unreachable(exc.reason if isinstance(exc, NoAnswerError) else exc.message) from None

    def _unreachable(self, reason: str) -> CliError:
        return CliError(f"cannot reach the atfgraph server at {self.server}: {reason}", EXIT_UNAVAILABLE)


def _refused(error: ServerError) -> CliError:
    """The server's error response (already parsed by the SDK) as one line and an exit code."""
    if error.status == 404:
        return CliError(f"not found: {error.message.removesuffix(' not found')}", EXIT_ERROR)
    if error.status in (401, 403):
        return CliError(f"{error.code}: {error.message}", EXIT_AUTH)
    return CliError(f"{error.code}: {error.message}", EXIT_ERROR)


def api(ctx: click.Context) -> Api:
    """The command's API client, closed when the command ends."""
    s = settings(ctx)
    client = Api(s.server, s.token)
    ctx.call_on_close(client.close)
    return client
