"""Where the server's database is (a SQLite file path, the default, or a PostgreSQL URL), and how
to name it and its failures in one line."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def is_postgres_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (psycopg's run to several), or its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def redact(location: str) -> str:
    """The location without a password (for logs and messages)."""
    if not is_postgres_url(location):
        return location
    parts = urlsplit(location)
    if parts.password is None:
        return location
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
