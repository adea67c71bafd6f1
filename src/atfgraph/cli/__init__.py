"""``atfg``: the command line, ``atfg <noun> <verb>`` with short aliases.

    atfg ps                                   runs that are running or waiting, and on what
    atfg runs start|list|show|watch           (run, r; submit, ls, get, follow)
    atfg approvals list|show|decide           (approval, ap; ls, get)
    atfg approvals link create|list|revoke    decision links and webhooks of one wait
    atfg checkpoints get TRAVERSER NAME       (checkpoint, cp)
    atfg tokens create|list|revoke            (token; new, ls, rm)
    atfg hooks list|resume|webhook            (hook)
    atfg audit list
    atfg server start
    atfg db migrate [--sql]
    atfg db backup DEST                       a live SQLite database, copied consistently

Data goes to stdout, logs and progress to stderr; settings and exit codes are described in
``_base``. ``python -m atfgraph.cli`` is the same command (``__main__``).
"""

from __future__ import annotations

import click

from . import _backup, _links  # noqa: F401  (register ``db backup``, ``approvals link``, ``hooks webhook``)
from ._admin import audit, tokens
from ._approvals import approvals, hooks
from ._base import RootGroup, global_options
from ._db import db
from ._runs import checkpoints, ps, runs
from ._server import server

__all__ = ["main"]


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


for command in (ps, runs, approvals, checkpoints, tokens, hooks, audit, server, db):
    main.add_command(command)
