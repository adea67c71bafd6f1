"""Storage behind one small protocol; ``open_store(url)`` picks the backend from the URL (one
grammar for every storage location: :func:`parse_storage_url`)."""

from __future__ import annotations

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
from ._url import StorageURL, parse_storage_url, redact_url

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
    "StorageURL",
    "Store",
    "WaitKind",
    "WaitRecord",
    "WaitStatus",
    "open_store",
    "parse_storage_url",
    "redact_url",
    "sqlite_path",
]


def sqlite_path(url: str) -> str:
    """The SQLite file a storage URL names (``sqlite:///relative.db``, ``sqlite:////abs.db`` or a
    bare path); ``ConfigurationError`` for anything else (see :func:`parse_storage_url`)."""
    parsed = parse_storage_url(url)
    if parsed.path is None:
        raise ConfigurationError(f"not a SQLite URL: {parsed.redacted()!r}")
    return parsed.path


def open_store(url: str | StorageURL, *, synchronous: str = "FULL") -> Store:
    """Open the store a URL names: ``sqlite:///path.db`` (or a bare path) or ``postgresql://...``."""
    parsed = url if isinstance(url, StorageURL) else parse_storage_url(url)
    if parsed.path is not None:
        from ._sqlite import SQLiteStore

        return SQLiteStore(parsed.path, synchronous=synchronous)
    try:
        from ._postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise ConfigurationError(
            f"PostgreSQL storage needs the postgres extra and its backend: {exc}"
        ) from exc
    store: Store = PostgresStore(parsed.location)
    return store
