"""What every ``atfg`` command shares: settings resolution, the HTTP calls, errors, and output.

Settings, each flag > environment > config file > default (``$ATFGRAPH_CONFIG``, else
``$ATFGRAPH_HOME/config.toml``, keys ``server`` and ``output``)::

    server  --server    $ATFGRAPH_SERVER   config server, else credentials.json server   http://127.0.0.1:7878
    token   --token     $ATFGRAPH_TOKEN    credentials.json owner token                   none
    output  -o          $ATFGRAPH_OUTPUT   config output                                  table

Errors are one line on stderr and an exit code::

    1  not found, a conflict, or any other error the server reported; a followed run that failed
    2  bad usage (click's code), bad --response/--payload, or the server cannot be reached
    3  the server refused the credential (401 unauthenticated, 403 forbidden)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx

from .._credentials import credentials_path, load_token
from .._transport import DEFAULT_SERVER

F = TypeVar("F", bound=Callable[..., Any])

OUTPUTS = ("table", "json", "jsonl")
EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_AUTH = 1, 2, 2, 3
_API = "/api/v2"
_META = "atfgraph.cli."


# -- errors ---------------------------------------------------------------------------------------


class CliError(Exception):
    """A failure reported as one line on stderr with its exit code (see ``RootGroup.main``)."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        self.message = " ".join(message.split())
        super().__init__(self.message)
        self.exit_code = exit_code


def usage_line(error: click.UsageError) -> str:
    """Click's usage error as one line, with where to find help."""
    hint = ""
    if error.ctx is not None:
        hint = f" (see '{error.ctx.command_path} --help')"
    return f"atfg: {' '.join(error.format_message().split())}{hint}"


# -- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    server: str
    token: str | None
    output: str


def config_path() -> Path:
    explicit = os.environ.get("ATFGRAPH_CONFIG")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("ATFGRAPH_HOME") or Path.home() / ".atfgraph") / "config.toml"


def _config() -> dict[str, Any]:
    path = config_path()
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CliError(f"cannot read the config file {path}: {exc}", EXIT_USAGE) from None


def _credentials_server() -> str | None:
    """The URL the local server wrote beside the credentials it created."""
    try:
        data = json.loads(credentials_path().read_text())
    except (OSError, ValueError):
        return None
    server = data.get("server") if isinstance(data, dict) else None
    return server if isinstance(server, str) else None


def settings(ctx: click.Context) -> Settings:
    """The command's settings, resolved once (flags are parsed by then)."""
    cached = ctx.meta.get(_META + "settings")
    if isinstance(cached, Settings):
        return cached
    meta = ctx.meta
    config = _config()
    server = (
        meta.get(_META + "server")
        or os.environ.get("ATFGRAPH_SERVER")
        or config.get("server")
        or _credentials_server()
        or DEFAULT_SERVER
    )
    output = (
        meta.get(_META + "output") or os.environ.get("ATFGRAPH_OUTPUT") or config.get("output") or "table"
    )
    if output not in OUTPUTS:
        raise CliError(f"output must be one of {', '.join(OUTPUTS)}, not {output!r}", EXIT_USAGE)
    token = meta.get(_META + "token") or load_token("owner")
    resolved = Settings(str(server).rstrip("/"), token, str(output))
    meta[_META + "settings"] = resolved
    return resolved


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    # ctx.meta is shared by the whole command chain; a leaf's flag is parsed after the root's, so
    # ``atfg runs list -o json`` and ``atfg -o json runs list`` both work and the leaf's wins.
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ctx.meta[_META + key] = value
        return value

    return callback


def output_option(f: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(OUTPUTS),
        default=None,
        expose_value=False,
        callback=_remember("output"),
        help="Output format [$ATFGRAPH_OUTPUT, config 'output'; default table].",
    )(f)


def global_options(f: F) -> F:
    """--server, --token and -o, accepted on the root group and on every command."""
    f = click.option(
        "--token",
        default=None,
        metavar="TOKEN",
        expose_value=False,
        callback=_remember("token"),
        help="Bearer token [$ATFGRAPH_TOKEN, else the owner token of the local credentials file].",
    )(f)
    f = click.option(
        "--server",
        default=None,
        metavar="URL",
        expose_value=False,
        callback=_remember("server"),
        help=f"Server URL [$ATFGRAPH_SERVER, config 'server'; default {DEFAULT_SERVER}].",
    )(f)
    return output_option(f)


# -- the API -------------------------------------------------------------------------------------


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


def output_format(ctx: click.Context) -> str:
    return settings(ctx).output


# -- input ---------------------------------------------------------------------------------------


def json_argument(option: str, raw: str | None) -> Any:
    """``JSON`` or ``@file`` (``@-`` reads stdin) as a JSON value; None stays None."""
    if raw is None:
        return None
    text = raw
    if raw.startswith("@"):
        name = raw[1:]
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text()
        except OSError as exc:
            raise CliError(f"{option}: cannot read {name!r}: {exc.strerror or exc}", EXIT_USAGE) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        where = f" in {raw[1:]!r}" if raw.startswith("@") else ""
        raise CliError(f"{option}: not valid JSON{where}: {exc}", EXIT_USAGE) from None


# -- output --------------------------------------------------------------------------------------


def when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compact(value: Any, limit: int = 60) -> str:
    """A JSON value on one line, cut to ``limit`` characters (strings shown without quotes)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


#: A table column: header and how to render a cell from the record.
Column = tuple[str, Callable[[dict[str, Any]], Any]]


def field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda item: item.get(name)


_STATUS_STYLES = {
    "succeeded": "green",
    "approved": "green",
    "failed": "red",
    "rejected": "red",
    "cancelled": "dim",
    "expired": "dim",
    "waiting": "yellow",
    "pending": "yellow",
    "running": "cyan",
}


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output: no colour, and no wrapping, so every row stays one line for grep and cut.
    tty = stream.isatty()
    return Console(file=stream, highlight=False, no_color=not tty, width=None if tty else 100_000)


def _cell(value: Any, header: str) -> Any:
    from rich.text import Text

    if value is None:
        return Text("")
    text = value if isinstance(value, str) else str(value)
    # Text, never markup: ids, prompts and results are user data ("[bold]" must print as is).
    style = _STATUS_STYLES.get(text, "") if header == "STATUS" else ""
    return Text(text, style=style)


def emit_list(ctx: click.Context, items: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    fmt = output_format(ctx)
    if fmt == "json":
        click.echo(json.dumps(list(items), indent=2, ensure_ascii=False))
    elif fmt == "jsonl":
        for item in items:
            click.echo(json.dumps(item, ensure_ascii=False))
    else:
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for header, _ in columns:
            table.add_column(header, no_wrap=True, overflow="ignore")
        for item in items:
            table.add_row(*(_cell(get(item), header) for header, get in columns))
        _console().print(table)


def emit_record(
    ctx: click.Context,
    record: dict[str, Any],
    rows: Iterable[tuple[str, Any]],
    after: Callable[[], None] | None = None,
) -> None:
    """One record: the record as JSON, or a two-column table of ``rows`` (then ``after``)."""
    fmt = output_format(ctx)
    if fmt == "json":
        click.echo(json.dumps(record, indent=2, ensure_ascii=False))
    elif fmt == "jsonl":
        click.echo(json.dumps(record, ensure_ascii=False))
    else:
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE, show_header=False, pad_edge=False, show_edge=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for name, value in rows:
            table.add_row(_cell(name, ""), _cell(value, "STATUS" if name == "status" else ""))
        _console().print(table)
        if after is not None:
            after()


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    """A secondary table in ``-o table`` output (a run's path, for instance)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title=title, title_justify="left")
    for header in columns:
        table.add_column(header, no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*(_cell(value, header) for header, value in zip(columns, row, strict=True)))
    _console().print(table)


def progress(message: str) -> None:
    """A progress or log line: stderr, never mixed with the data on stdout."""
    click.echo(message, err=True)


# -- command groups with short aliases ---------------------------------------------------------


class AliasGroup(click.Group):
    """A group whose commands also answer to short aliases (``ls`` for ``list``, ``run`` for
    ``runs``); aliases are listed beside each command in --help."""

    def __init__(self, *args: Any, aliases: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases: dict[str, str] = dict(aliases or {})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_command: dict[str, list[str]] = {}
        for alias, name in sorted(self.aliases.items()):
            by_command.setdefault(name, []).append(alias)
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            label = ", ".join([name, *by_command.get(name, [])])
            rows.append((label, cmd.get_short_help_str(limit=formatter.width - 6 - len(label))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class RootGroup(AliasGroup):
    """The ``atfg`` group: every error, usage errors included, ends as one line on stderr."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except CliError as exc:
            click.echo(f"atfg: {exc.message}", err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            click.echo(usage_line(exc), err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("atfg: aborted", err=True)
            sys.exit(130)
        except KeyboardInterrupt:
            click.echo("atfg: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # `atfg runs list | head`: the reader left; that is not an error of ours.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(0)
        except Exception as exc:
            # A bug of ours or an answer we did not expect: still one line, unless debugging.
            if os.environ.get("ATFGRAPH_DEBUG"):
                raise
            click.echo(
                f"atfg: unexpected {type(exc).__name__}: {exc} (ATFGRAPH_DEBUG=1 shows where)", err=True
            )
            sys.exit(EXIT_ERROR)
        sys.exit(rv if isinstance(rv, int) else 0)
