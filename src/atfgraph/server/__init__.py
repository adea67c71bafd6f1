"""The graph server: ``atfg server start`` or ``python -m atfgraph.server``."""

from __future__ import annotations

from ._app import DEFAULT_PORT, Settings, create_app, default_db_path, wrap
from ._serve import serve

__all__ = ["DEFAULT_PORT", "Settings", "create_app", "default_db_path", "serve", "wrap"]
