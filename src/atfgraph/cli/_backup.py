"""``atfg db backup DEST``: a consistent copy of a live SQLite database, made with SQLite's online
backup API while the server keeps writing (docs/operations.md, "Backup and restore").

Why one step: the backup API copies pages in steps, and a write by another connection between
two steps restarts the copy; under a steady write load a copy in small steps may never finish.
Copying every page in one step runs inside one read transaction, which in WAL mode does not block
the server's writer: the copy is the database as of that transaction's start, every transaction
in it whole (each of the server's transitions is one transaction, so the copy never holds half
of one). While it runs, the WAL is not checkpointed past the copy's snapshot and grows with what
the server writes meanwhile; it shrinks again at the next checkpoint after the copy ends.

The copy is written next to DEST under a temporary name, checked (``PRAGMA integrity_check``),
switched to the rollback journal (one self-contained file: no ``-wal`` to carry along; a server
opening it turns WAL on again) and only then renamed to DEST, so a failed or interrupted backup
leaves no DEST behind. PostgreSQL databases are refused with the command to use instead
(``pg_dump``): a copy of a PostgreSQL database is PostgreSQL's own tools' job.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from ._base import EXIT_ERROR, EXIT_USAGE, CliError, output_option
from ._db import _default_db_path, db
from ._output import emit_record, progress

#: The advice for a PostgreSQL database (docs/operations.md shows the restore too).
PG_DUMP_HINT = (
    "atfg db backup copies a SQLite database; back up PostgreSQL with pg_dump, e.g. "
    "pg_dump --format=custom --file=atfgraph.dump '{url}' (restore with pg_restore; "
    "see docs/operations.md, 'Backup and restore')"
)


@db.command("backup")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option(
    "--db",
    "db_path",
    default=None,
    help="The SQLite file to copy [$ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db].",
)
@output_option
@click.pass_context
def db_backup(ctx: click.Context, dest: Path, db_path: str | None) -> None:
    """Copy the server's SQLite database to DEST while the server runs (SQLite's online backup
    API: a consistent copy, the server's writes go on). DEST must not exist; a directory gets
    <name>-<UTC time>.db inside it. The copy passes PRAGMA integrity_check before it is renamed
    to DEST. For PostgreSQL use pg_dump."""
    from pyworkflow import ConfigurationError

    from ..server._dburl import parse_location, redact

    try:
        location = parse_location(db_path or os.environ.get("ATFGRAPH_DB") or _default_db_path())
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", EXIT_USAGE) from None
    if location.is_postgres:
        raise CliError(PG_DUMP_HINT.format(url=redact(location.location)), EXIT_USAGE)
    source = Path(location.location)
    if not source.is_file():
        raise CliError(f"--db: no database file at {source}", EXIT_USAGE)
    target = _target(dest, source)
    progress(f"backing up {source} to {target}")
    record = backup_sqlite(source, target)
    progress(
        f"{target}: {record['pages']} pages, {record['bytes']} bytes in {record['seconds']} s, integrity ok"
    )
    emit_record(ctx, record, list(record.items()))


def _target(dest: Path, source: Path) -> Path:
    """DEST itself, or a new file named after the source and the time in the directory DEST."""
    if dest.is_dir():
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = dest / f"{source.stem}-{stamp}.db"
    if dest.exists() or dest.is_symlink():
        raise CliError(
            f"{dest} exists: a backup never overwrites a file (remove it, or name another)", EXIT_USAGE
        )
    if not dest.parent.is_dir():
        raise CliError(f"{dest.parent} is not a directory", EXIT_USAGE)
    if dest.resolve() == source.resolve():
        raise CliError(f"{dest} is the database itself", EXIT_USAGE)
    return dest


def backup_sqlite(source: Path, target: Path) -> dict[str, Any]:
    """Copy ``source`` to ``target`` (which must not exist) with the backup API in one step, check
    the copy and rename it into place; what was copied. Raises :class:`CliError`; on any failure
    no ``target`` is left."""
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    started = time.monotonic()
    try:
        # mode=rw: a missing file is an error, never a new empty database.
        src = sqlite3.connect(f"file:{quote(str(source.resolve()))}?mode=rw", uri=True, timeout=30)
        try:
            src.execute("PRAGMA busy_timeout = 30000")
            # Readable by this user only while it is written (it holds token digests and the
            # webhook key); it gets the source's permissions once it is whole.
            os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            dst = sqlite3.connect(partial, isolation_level=None)
            try:
                src.backup(dst, pages=-1)  # one step: one read transaction, a consistent snapshot
                dst.execute("PRAGMA journal_mode = DELETE")
                checked = [row[0] for row in dst.execute("PRAGMA integrity_check")]
                pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
                tables = int(
                    dst.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
                )
            finally:
                dst.close()
        finally:
            src.close()
        if checked != ["ok"]:
            raise CliError(f"the copy failed PRAGMA integrity_check: {'; '.join(checked[:5])}", EXIT_ERROR)
        with open(partial, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(partial, source.stat().st_mode & 0o777)
        try:
            os.link(partial, target)  # fails if target appeared meanwhile: never overwrites
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links
            if target.exists():
                raise FileExistsError(f"{target} appeared during the backup") from None
            os.rename(partial, target)
        _fsync_dir(target.parent)
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot back up {source} to {target}: {exc}", EXIT_ERROR) from None
    finally:
        for leftover in (partial, Path(f"{partial}-journal")):
            leftover.unlink(missing_ok=True)
    return {
        "source": str(source),
        "backup": str(target),
        "pages": pages,
        "bytes": target.stat().st_size,
        "tables": tables,
        "integrity": "ok",
        "seconds": round(time.monotonic() - started, 3),
    }


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["PG_DUMP_HINT", "backup_sqlite", "db_backup"]
