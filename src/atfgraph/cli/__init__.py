"""``atfg``: the command line, ``atfg <noun> <verb>`` with short aliases.

    atfg ps                                   runs that are running or waiting, and on what
    atfg runs start|list|show|watch           (run, r; submit, ls, get, follow)
    atfg runs cancel ID [--reason]|retry ID   either kind of run: traversers and pyworkflow runs
    atfg workers list                         (worker; ls)
    atfg approvals list|show|decide           (approval, ap; ls, get)
    atfg approvals link create|list|revoke    decision links and webhooks of one wait
    atfg checkpoints get TRAVERSER NAME       (checkpoint, cp)
    atfg tokens create|list|revoke            (token; new, ls, rm)
    atfg hooks list|resume|webhook            (hook)
    atfg audit list
    atfg server start
    atfg db migrate [--sql]
    atfg db backup DEST                       a live SQLite database, copied consistently
    atfg db purge --older-than AGE [--audit-older-than AGE] [--dry-run]

Data goes to stdout, logs and progress to stderr; settings and exit codes are described in
``_base``. Ids may be given by an unambiguous prefix (``_ids``); ``atfg --version``; shell
completion from click (``_ATFG_COMPLETE=bash_source atfg``, docs/cli.md). ``python -m
atfgraph.cli`` is the same command (``__main__``).
"""

from __future__ import annotations

import click

from . import (
    _backup,  # noqa: F401  (registers ``db backup``)
    _links,  # noqa: F401  (registers ``approvals link`` and ``hooks webhook``)
    _manage,  # noqa: F401  (registers ``runs cancel`` and ``runs retry``)
    _purge,  # noqa: F401  (registers ``db purge``)
)
from ._admin import audit, tokens
from ._approvals import approvals, hooks
from ._base import RootGroup, global_options
from ._db import db
from ._runs import checkpoints, ps, runs
from ._server import server
from ._workers import workers

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
        "worker": "workers",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="pyworkflow-atfgraph", prog_name="atfg", message="%(prog)s %(version)s")
@global_options
def main() -> None:
    """atfgraph command line: runs, approvals, checkpoints, tokens, hooks and the server.

    Options --server, --token and -o go before or after the command (the later one wins)."""


for command in (ps, runs, approvals, checkpoints, tokens, hooks, audit, workers, server, db):
    main.add_command(command)
