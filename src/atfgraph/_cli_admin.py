"""``atfg tokens create|list|revoke``, ``atfg audit list`` and ``atfg db migrate``."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from ._cli_base import (
    EXIT_ERROR,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    AliasGroup,
    CliError,
    api,
    compact,
    emit_list,
    emit_record,
    field,
    global_options,
    output_format,
    output_option,
    progress,
    when,
)
from ._transport import q

ROLES = ["owner", "administrator", "reviewer", "worker"]


@click.group("tokens", cls=AliasGroup, aliases={"ls": "list", "new": "create", "rm": "revoke"})
def tokens() -> None:
    """Bearer tokens: mint one for a person or a worker, list them, revoke one."""


def _token_rows(info: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ("id", info.get("id")),
        ("name", info.get("name")),
        ("role", info.get("role")),
        ("created", when(info.get("created_at"))),
        ("created by", info.get("created_by")),
        ("last used", when(info.get("last_used_at"))),
        ("revoked", when(info.get("revoked_at"))),
    ]


@tokens.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(ROLES), help="What the token may do.")
@global_options
@click.pass_context
def tokens_create(ctx: click.Context, name: str, role: str) -> None:
    """Mint a token. With -o table only the raw token goes to stdout (TOKEN=$(atfg tokens create
    ...)); it is shown once and never stored by the server."""
    answer = api(ctx).post("/tokens", {"name": name, "role": role})
    info = answer["info"]
    progress(f"created token {info['id']} ({info['name']}, {info['role']}); it is shown once, store it now")
    if output_format(ctx) == "table":
        click.echo(answer["token"])
    else:
        emit_record(ctx, answer, [])


@tokens.command("list")
@global_options
@click.pass_context
def tokens_list(ctx: click.Context) -> None:
    """Every token, revoked ones too (never the secrets)."""
    items = api(ctx).get("/tokens")["items"]
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("NAME", field("name")),
            ("ROLE", field("role")),
            ("CREATED", lambda t: when(t.get("created_at"))),
            ("CREATED BY", field("created_by")),
            ("LAST USED", lambda t: when(t.get("last_used_at"))),
            ("REVOKED", lambda t: when(t.get("revoked_at"))),
        ],
    )


@tokens.command("revoke")
@click.argument("token_id", metavar="ID")
@global_options
@click.pass_context
def tokens_revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a token; requests carrying it are refused from now on."""
    answer = api(ctx).post(f"/tokens/{q(token_id)}/revoke", {})
    info = answer["info"]
    progress(
        f"revoked token {info['id']}" if answer["revoked"] else f"token {info['id']} was already revoked"
    )
    emit_record(ctx, answer, _token_rows(info))


# -- audit -----------------------------------------------------------------------------------------


@click.group("audit", cls=AliasGroup, aliases={"ls": "list"})
def audit() -> None:
    """The audit trail: decisions, denied attempts and token administration."""


@audit.command("list")
@click.option("--target", default=None, help="Only entries about this object (an approval id, ...).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@global_options
@click.pass_context
def audit_list(ctx: click.Context, target: str | None, limit: int) -> None:
    """Audit entries, newest first."""
    params: dict[str, Any] = {"limit": limit}
    if target is not None:
        params["target"] = target
    items = api(ctx).get("/audit", params)["items"]
    emit_list(
        ctx,
        items,
        [
            ("AT", lambda e: when(e.get("at"))),
            ("PRINCIPAL", field("principal")),
            ("ROLE", field("role")),
            ("ACTION", field("action")),
            ("TARGET", field("target")),
            ("OUTCOME", field("outcome")),
            ("DETAIL", lambda e: compact(e.get("detail")) if e.get("detail") is not None else None),
        ],
    )


# -- db --------------------------------------------------------------------------------------------


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

    from .server._dburl import parse_location, redact

    try:
        location = parse_location(db_path or os.environ.get("ATFGRAPH_DB") or _default_db_path())
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", EXIT_USAGE) from None
    path, postgres = location.location, location.is_postgres
    shown = redact(path)
    migrations = server_migrations("postgres" if postgres else "sqlite")
    if sql_only:
        applied = _applied_postgres(path) if postgres else _applied(path)
        pending = [m for m in migrations if (m.component, m.version) not in applied]
        for m in pending:
            click.echo(f"-- {m.component} {m.version:04d}_{m.name}\n{m.sql.strip()}\n")
        if not pending:
            progress(f"{shown}: up to date")
        return
    if postgres:
        done = _migrate_postgres(path, migrations)
    else:
        done = _migrate_sqlite(path, migrations)
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
            from pyworkflow.store._migrations import apply_migrations

            return apply_migrations(conn, migrations)
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot migrate {path}: {exc}", EXIT_ERROR) from None


def _migrate_postgres(url: str, migrations: list[Any]) -> list[Any]:
    psycopg = _psycopg()
    from pyworkflow.store._migrations import apply_postgres_migrations

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
    from .server._dburl import first_line, redact

    code = EXIT_UNAVAILABLE if isinstance(exc, psycopg.OperationalError) else EXIT_ERROR
    return CliError(f"cannot {action} {redact(url)}: {first_line(exc)}", code)


def server_migrations(dialect: str = "sqlite") -> list[Any]:
    """The server's version tracks, in the order its store applies them: pyworkflow's runs and
    waits (the hooks inbox), atfgraph's graph state, identity."""
    # Imported here: the server package pulls in FastAPI, which only this command needs.
    from .server._store import server_migrations as store_migrations

    return store_migrations(dialect)


def _default_db_path() -> str:
    from .server import default_db_path

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
