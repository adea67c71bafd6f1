"""Where clients and workers find their bearer token: ``$ATFGRAPH_TOKEN``, else the credentials
file a local graph server wrote on its first start (``$ATFGRAPH_HOME/credentials.json``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

CREDENTIALS_FILE = "credentials.json"


def credentials_path(home: Path | None = None) -> Path:
    return (home or Path(os.environ.get("ATFGRAPH_HOME") or Path.home() / ".atfgraph")) / CREDENTIALS_FILE


def load_token(kind: str = "owner", home: Path | None = None) -> str | None:
    """The token a client (``kind="owner"``) or a worker (``kind="worker"``) should present:
    ``$ATFGRAPH_TOKEN`` if set, else the local server's credentials file."""
    env = os.environ.get("ATFGRAPH_TOKEN")
    if env:
        return env.strip()
    base = home or Path(os.environ.get("ATFGRAPH_HOME") or Path.home() / ".atfgraph")
    try:
        data = json.loads((base / CREDENTIALS_FILE).read_text())
    except (OSError, ValueError):
        return None
    token = data.get(kind) if isinstance(data, dict) else None
    return token if isinstance(token, str) else None
