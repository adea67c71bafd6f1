"""Storage behind one small protocol; ``open_store(url)`` picks the backend from the URL."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from .._errors import ConfigurationError
from ._protocol import (
    CheckpointRecord,
    Claim,
    Event,
    Fence,
    NewWait,
    RunRecord,
    RunState,
    RunStatus,
    StepRecord,
    StepStatus,
    Store,
    WaitKind,
    WaitRecord,
    WaitStatus,
)
from ._rows import check_revision, write_checkpoint

__all__ = [
    "CheckpointRecord",
    "Claim",
    "Event",
    "Fence",
    "NewWait",
    "RunRecord",
    "RunState",
    "RunStatus",
    "StepRecord",
    "StepStatus",
    "Store",
    "WaitKind",
    "WaitRecord",
    "WaitStatus",
    "check_revision",
    "open_store",
    "sqlite_path",
    "write_checkpoint",
]


def sqlite_path(url: str) -> str:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or a bare path -> a file path."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigurationError(f"not a SQLite URL: {url!r}")
    path = unquote(url[len("sqlite://") :])
    if path.startswith("/"):
        path = path[1:]  # sqlite:///x.db -> x.db ; sqlite:////abs -> /abs
    if not path:
        raise ConfigurationError(f"SQLite URL has no path: {url!r}")
    return path


def open_store(url: str, *, synchronous: str = "FULL") -> Store:
    """Open the store a URL names: ``sqlite:///path.db`` (or a bare path) or ``postgresql://...``."""
    scheme = url.split("://", 1)[0] if "://" in url else "sqlite"
    if scheme == "sqlite":
        from ._sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(url), synchronous=synchronous)
    if scheme in ("postgresql", "postgres"):
        try:
            from ._postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # pragma: no cover - depends on the installed extra
            raise ConfigurationError(
                f"PostgreSQL storage needs the postgres extra and its backend: {exc}"
            ) from exc
        store: Store = PostgresStore(url)
        return store
    raise ConfigurationError(f"unknown storage scheme {scheme!r} in {url!r}; use sqlite:/// or postgresql://")
