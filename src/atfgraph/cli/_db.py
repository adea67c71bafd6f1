"""``atfg db migrate``: the server's migrations applied ahead of time (or shown with ``--sql``),
on a SQLite file or a PostgreSQL URL, and ``atfg tokens create --db`` (:func:`mint_offline`):
the commands that need no server."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from ._base import EXIT_ERROR, EXIT_UNAVAILABLE, EXIT_USAGE, AliasGroup, CliError, output_option
from ._output import emit_list, field, progress


@click.group("db", cls=AliasGroup)
def db() -> None:
    """The server's database (a SQLite file or a PostgreSQL URL)."""


@db.command("migrate")
@click.option(
    "--db",
    "db_path",
    default=None,
    help="SQLite file or postgresql:// URL [$ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db].",
)
@click.option("--sql", "sql_only", is_flag=True, help="Print the SQL that would be applied; apply nothing.")
@output_option
@click.pass_context
def db_migrate(ctx: click.Context, db_path: str | None, sql_only: bool) -> None:
    """Apply the server's pending migrations to the database (the server also does this when it
    starts). Safe beside a running server: migrators serialize on the database's write lock
    (SQLite) or an advisory lock (PostgreSQL)."""
    from pyworkflow import ConfigurationError
    from pyworkflow.store import refuse_newer_schema

    from ..server._dburl import parse_location, redact

    try:
        location = parse_location(db_path or os.environ.get("ATFGRAPH_DB") or _default_db_path())
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", EXIT_USAGE) from None
    path, postgres = location.location, location.is_postgres
    shown = redact(path)
    migrations = server_migrations("postgres" if postgres else "sqlite")
    if sql_only:
        applied = _applied_postgres(path) if postgres else _applied(path)
        try:
            refuse_newer_schema(applied, migrations)
        except ConfigurationError as exc:
            raise CliError(f"{shown}: {exc}", EXIT_ERROR) from None
        pending = [m for m in migrations if (m.component, m.version) not in applied]
        for m in pending:
            click.echo(f"-- {m.component} {m.version:04d}_{m.name}\n{m.sql.strip()}\n")
        if not pending:
            progress(f"{shown}: up to date")
        return
    try:
        done = _migrate_postgres(path, migrations) if postgres else _migrate_sqlite(path, migrations)
    except ConfigurationError as exc:  # a newer version upgraded it
        raise CliError(f"{shown}: {exc}", EXIT_ERROR) from None
    progress(f"{shown}: applied {len(done)} migration(s)" if done else f"{shown}: up to date")
    emit_list(
        ctx,
        [{"component": m.component, "version": m.version, "name": m.name} for m in done],
        [("COMPONENT", field("component")), ("VERSION", field("version")), ("NAME", field("name"))],
    )


def _migrate_sqlite(path: str, migrations: list[Any]) -> list[Any]:
    if Path(path).is_dir():
        raise CliError(f"--db: {path} is a directory, not a SQLite file", EXIT_USAGE)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            from pyworkflow.store import apply_migrations

            return apply_migrations(conn, migrations)
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot migrate {path}: {exc}", EXIT_ERROR) from None


def _migrate_postgres(url: str, migrations: list[Any]) -> list[Any]:
    psycopg = _psycopg()
    from pyworkflow.store import apply_postgres_migrations

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            return apply_postgres_migrations(conn, migrations)
    except psycopg.Error as exc:
        raise _pg_error("migrate", url, exc, psycopg) from None


def _applied_postgres(url: str) -> set[tuple[str, int]]:
    """(component, version) already recorded in the database; nothing when it has no schema yet."""
    psycopg = _psycopg()
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
                return set()
            rows = conn.execute("SELECT component, version FROM schema_migrations").fetchall()
            return {(str(r[0]), int(r[1])) for r in rows}
    except psycopg.Error as exc:
        raise _pg_error("read", url, exc, psycopg) from None


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise CliError(
            "a postgresql:// database needs psycopg: pip install 'pyworkflow-atfgraph[postgres]'", EXIT_ERROR
        ) from None
    return psycopg


def _pg_error(action: str, url: str, exc: BaseException, psycopg: Any) -> CliError:
    """One line, password masked; an unreachable server is exit status 2 like any other."""
    from ..server._dburl import first_line, redact

    code = EXIT_UNAVAILABLE if isinstance(exc, psycopg.OperationalError) else EXIT_ERROR
    return CliError(f"cannot {action} {redact(url)}: {first_line(exc)}", code)


def server_migrations(dialect: str = "sqlite") -> list[Any]:
    """The server's version tracks, in the order its store applies them: pyworkflow's runs and
    waits (the hooks inbox), atfgraph's graph state, identity."""
    # Imported here: the server package pulls in FastAPI, which only this command needs.
    from ..server._store import server_migrations as store_migrations

    return store_migrations(dialect)


def _default_db_path() -> str:
    from ..server import default_db_path

    return default_db_path()


def _applied(path: str) -> set[tuple[str, int]]:
    """(component, version) already recorded in the file; nothing when it does not exist yet."""
    if not Path(path).exists():
        return set()
    try:
        conn = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as exc:
        raise CliError(f"cannot read {path}: {exc}", EXIT_ERROR) from None
    try:
        table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        if table is None:
            return set()
        return {
            (str(r[0]), int(r[1])) for r in conn.execute("SELECT component, version FROM schema_migrations")
        }
    except sqlite3.Error as exc:
        raise CliError(f"cannot read {path}: {exc}", EXIT_ERROR) from None
    finally:
        conn.close()


def mint_offline(location: str, name: str, role: str) -> tuple[dict[str, Any], str]:
    """Mint a token directly in the server's database, with no server and no credential: the
    recovery of an operator locked out (credentials lost, or written for another database).
    Whoever can open the database file (or connect to PostgreSQL as its owner) may do this
    already; the audit trail records it as ``token.create`` by ``offline:<os user>``. Refuses a SQLite
    file that does not exist (it would create an empty database)."""
    import asyncio
    import getpass

    from pyworkflow import ConfigurationError

    from ..server._dburl import first_line, parse_location, redact
    from ..server._identity import AuditEntry, Identity, IdentityError, Principal, Role
    from ..server._store import GraphStore

    try:
        parsed = parse_location(location)
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", EXIT_USAGE) from None
    if not parsed.is_postgres and not Path(parsed.location).is_file():
        raise CliError(f"--db: no database file at {parsed.location}", EXIT_USAGE)
    try:
        store = GraphStore(parsed.location)
    except Exception as exc:  # any failure to open it: the message says which
        raise CliError(
            f"cannot open {redact(parsed.location)}: {first_line(exc)}", EXIT_UNAVAILABLE
        ) from None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    # Whoever can write the database holds every right already: an owner, named after the
    # operating-system user who ran the command (the token's created_by and the audit row).
    who = Principal("offline", f"offline:{user}", Role.OWNER)
    audit = AuditEntry(who, "token.create", None, "allowed", {"name": name, "role": role, "offline": True})
    try:
        info, raw = asyncio.run(Identity(store.db).create_token(name, role, created_by=who, audit=audit))
    except IdentityError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except Exception as exc:  # the database refused the write (locked past the timeout, gone)
        raise CliError(
            f"cannot write to {redact(parsed.location)}: {first_line(exc)}", EXIT_UNAVAILABLE
        ) from None
    finally:
        store.close()
    return info.as_json(), raw
