"""Where the server's database is, in pyworkflow's one grammar of storage locations (a SQLite file
path, the default, ``sqlite:///...``, or a PostgreSQL URL: :func:`pyworkflow.store.parse_storage_url`),
and how to name it and its failures in one line."""

from __future__ import annotations

from pyworkflow.store import StorageURL, parse_storage_url, redact_url


def parse_location(location: str) -> StorageURL:
    """The server's database location, parsed; ``ConfigurationError`` says what is wrong with it."""
    return parse_storage_url(location)


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (psycopg's run to several), or its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def redact(location: str) -> str:
    """The location without a password (for logs and messages)."""
    return redact_url(location)
