"""``atfg``: the command line, ``atfg <noun> <verb>`` with short aliases.

    atfg ps                                   runs that are running or waiting, and on what
    atfg runs list|show|watch                 (run, r; ls, get, follow)
    atfg approvals list|show|decide           (approval, ap; ls, get)
    atfg checkpoints get TRAVERSER NAME       (checkpoint, cp)
    atfg tokens create|list|revoke            (token; new, ls, rm)
    atfg hooks list|resume                    (hook)
    atfg audit list
    atfg server start
    atfg db migrate [--sql]

Data goes to stdout, logs and progress to stderr; settings and exit codes are described in
``_cli_base``. ``python -m atfgraph.cli`` is the same command.
"""

from __future__ import annotations

import click

from ._cli_admin import audit, db, tokens
from ._cli_approvals import approvals, hooks
from ._cli_base import AliasGroup, RootGroup, global_options
from ._cli_runs import checkpoints, ps, runs

#: The server's port; the server package itself is imported only by ``server start`` (FastAPI).
DEFAULT_PORT = 7878


@click.group(
    cls=RootGroup,
    aliases={
        "run": "runs",
        "r": "runs",
        "approval": "approvals",
        "ap": "approvals",
        "checkpoint": "checkpoints",
        "cp": "checkpoints",
        "token": "tokens",
        "hook": "hooks",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@global_options
def main() -> None:
    """atfgraph command line: runs, approvals, checkpoints, tokens, hooks and the server.

    Options --server, --token and -o go before or after the command (the later one wins)."""


@main.group("server", cls=AliasGroup)
def server() -> None:
    """Run the graph server."""


@server.command("start")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int)
@click.option(
    "--db",
    default=None,
    help="SQLite file, sqlite:///file.db or postgresql:// URL"
    " (default: $ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db).",
)
@click.option("--lease-seconds", default=None, type=float, help="Task lease length (default 30).")
@click.option("--log-level", default="warning", show_default=True)
def start(host: str, port: int, db: str | None, lease_seconds: float | None, log_level: str) -> None:
    """Start the graph server in the foreground."""
    from .server import serve

    serve(host, port, db, lease_seconds, log_level)


for command in (ps, runs, approvals, checkpoints, tokens, hooks, audit, db):
    main.add_command(command)


if __name__ == "__main__":
    main()
