"""What every ``atfg`` command shares: settings, options, errors and exit codes, JSON
arguments, and the command groups with short aliases.

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

import json
import os
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from .._credentials import credentials_path, load_token
from .._json import InexactNumberError, loads_exact
from .._transport import DEFAULT_SERVER

F = TypeVar("F", bound=Callable[..., Any])

OUTPUTS = ("table", "json", "jsonl")
EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_AUTH = 1, 2, 2, 3
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


def output_format(ctx: click.Context) -> str:
    return settings(ctx).output


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
        # The server's own reading: an integer beyond 64 bits or a number too large for a double
        # is refused, not rounded (and NaN/Infinity are not JSON at all).
        return loads_exact(text, root="$")
    except InexactNumberError as exc:
        raise CliError(f"{option}: not JSON the server keeps exactly: {exc}", EXIT_USAGE) from None
    except ValueError as exc:  # orjson.JSONDecodeError
        where = f" in {raw[1:]!r}" if raw.startswith("@") else ""
        raise CliError(f"{option}: not valid JSON{where}: {exc}", EXIT_USAGE) from None


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
