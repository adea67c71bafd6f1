"""The one grammar of a storage location, for pyworkflow and atfgraph alike.

============================  =========================================================
``sqlite:///relative.db``     the SQLite file ``relative.db`` (relative to the working dir)
``sqlite:////abs/path.db``    the SQLite file ``/abs/path.db``
``path/to/file.db``           a bare path: a SQLite file (``:memory:`` included)
``postgresql://...``          a PostgreSQL database, the URL handed to libpq as written
``postgres://...``            the same
============================  =========================================================

A SQLite URL's path is percent-decoded (``sqlite:///my%20runs.db``) and takes no query string
or fragment: ``sqlite:///x.db?synchronous=OFF`` is refused, not opened as a file of that name
(settings go to ``configure()`` or the command's options; a file name with ``?`` or ``#`` is
written ``%3F`` / ``%23`` in a URL, or as a bare path, which is taken literally). Anything else
is refused with a :class:`~pyworkflow.ConfigurationError` saying why: an empty location, a NUL
character, an unknown or misspelt scheme, a SQLite URL without a path or with a host
(``sqlite://x.db``), or a scheme without its ``//`` (``sqlite:x.db``). Messages never show a
password.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from os import PathLike, fspath
from typing import Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from .._errors import ConfigurationError

Dialect = Literal["sqlite", "postgres"]

_SQLITE = "sqlite://"
_POSTGRES = ("postgresql://", "postgres://")
#: What reads as a URL scheme (RFC 3986), so ``mysql://`` is an unknown scheme, not a file name.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: Our schemes written without ``//`` (``sqlite:x.db``): a mistake, not a file named so.
_NO_SLASHES = re.compile(r"^(sqlite|postgres|postgresql):(?!//)", re.IGNORECASE)
#: What a SQLite URL's path must not hold: a query string or a fragment, from the first ? or #.
_EXTRA = re.compile(r"[?#].*", re.DOTALL)
_HINT = "use sqlite:///relative.db, sqlite:////absolute.db, a file path, or postgresql://..."


@dataclass(frozen=True, slots=True)
class StorageURL:
    """Where a store lives: ``dialect`` ``"sqlite"`` with the file ``path``, or ``"postgres"``
    with the libpq ``url``. Build it with :func:`parse_storage_url`."""

    dialect: Dialect
    #: The SQLite file (``None`` on PostgreSQL).
    path: str | None = None
    #: The PostgreSQL URL as given (``None`` on SQLite).
    url: str | None = None

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgres"

    @property
    def location(self) -> str:
        """The file path (SQLite) or the URL (PostgreSQL): what the database classes open."""
        location = self.url if self.dialect == "postgres" else self.path
        assert location is not None
        return location

    def redacted(self) -> str:
        """The location without a password, for logs and messages."""
        return redact_url(self.location)


def parse_storage_url(text: object) -> StorageURL:
    """Parse a storage location (see the module's grammar); raise ``ConfigurationError``."""
    if not isinstance(text, str):
        raise ConfigurationError(f"a storage location must be a string, not {type(text).__name__}; {_HINT}")
    if not text.strip():
        raise ConfigurationError(f"the storage location is empty; {_HINT}")
    if "\x00" in text:
        raise ConfigurationError(f"the storage location {redact_url(text)!r} contains a NUL character")
    if text.startswith(_POSTGRES):
        return StorageURL("postgres", url=text)
    if text.startswith(_SQLITE):
        return StorageURL("sqlite", path=_sqlite_file(text))
    scheme = _SCHEME.match(text)
    if scheme is not None:
        raise ConfigurationError(
            f"unknown storage scheme {scheme.group(1)!r} in {redact_url(text)!r}; {_HINT}"
        )
    if _NO_SLASHES.match(text):
        raise ConfigurationError(f"malformed storage URL {redact_url(text)!r} (no '//'); {_HINT}")
    return StorageURL("sqlite", path=text)


def _sqlite_file(url: str) -> str:
    rest = url[len(_SQLITE) :]
    if not rest.startswith("/"):
        what = "has no path" if not rest else f"names a host ({rest.split('/', 1)[0]!r})"
        raise ConfigurationError(f"SQLite URL {url!r} {what}; {_HINT}")
    extra = _EXTRA.search(rest)
    if extra is not None:
        # Read elsewhere as driver options (SQLAlchemy's sqlite:///x.db?mode=ro): opening a file
        # named "x.db?mode=ro" instead would silently ignore them.
        what = "a query string" if extra.group(0).startswith("?") else "a fragment"
        raise ConfigurationError(
            f"SQLite URL {url!r} has {what} ({extra.group(0)!r}); a SQLite URL takes none: give "
            "settings to configure() or the command's options, and write a '?' or '#' in a file "
            "name as %3F or %23"
        )
    path = unquote(rest[1:])  # sqlite:///x.db -> x.db ; sqlite:////abs -> /abs
    if not path:
        raise ConfigurationError(f"SQLite URL {url!r} has no path; {_HINT}")
    if "\x00" in path:
        raise ConfigurationError(f"SQLite URL {url!r} decodes to a path with a NUL character")
    return path


def sqlite_url(path: str | PathLike[str]) -> str:
    """The SQLite URL of the file ``path``, which :func:`parse_storage_url` reads back as that
    path whatever its characters (``%``, ``?``, ``#``, spaces are percent-encoded)."""
    return _SQLITE + "/" + quote(fspath(path), safe="/:")


def redact_url(text: str) -> str:
    """``text`` with the password of a ``scheme://user:password@host`` URL masked (anything
    else unchanged); never raises, so it can print what failed to parse."""
    if "://" not in text or "@" not in text:
        return text
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:  # an unparsable netloc: mask all of the user part
        head, _, tail = text.partition("://")
        return f"{head}://***@{tail.rsplit('@', 1)[1]}" if "@" in tail else text
    if password is None:
        return text
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
