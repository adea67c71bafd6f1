"""One SQL style in ``src/``: every statement is written SQLite's way (``?`` placeholders, or
``:name`` with a dict of parameters; row-lock hints as comments where SQLite runs the statement
too), and ``pyworkflow.store._pg_db.translate`` is the one place that turns it into psycopg's
(``%s``, ``%(name)s``, ``%%``, the lock clauses). The statements are found in the source with
``ast`` (string literals that are statements, or are handed to ``execute`` and its kin) and in
the modules themselves (every ``SQL_*`` constant's value, f-string parts included)."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: psycopg's placeholders: ``%s`` and ``%(name)s`` (``%%`` is an escaped ``%``, not one).
PSYCOPG_MARK = re.compile(r"(?<!%)%(?:\([A-Za-z_]\w*\))?s")
#: A string that is an SQL statement (the code writes keywords in capitals).
STATEMENT = re.compile(r"^\s*(?:SELECT|INSERT|UPDATE|DELETE|WITH|NOTIFY|LOCK)\b")
#: Calls that run a statement given as their first argument.
RUNS_SQL = {"execute", "executemany", "submit", "_fetch", "_call", "_alone", "_affected", "_rows", "_row"}
#: Logging calls: their ``%s`` are format strings, not placeholders.
LOGGING = {"debug", "info", "warning", "error", "exception", "critical", "log"}
SQL_NAME = re.compile(r"^_?SQL_\w+$")


def _text(node: ast.expr) -> str | None:
    """A string literal's text; an f-string's with each formatted value as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def statements_in_source(source: str, file: str) -> Iterator[tuple[str, str]]:
    """(where, text) for each string in ``source`` that is a statement: one that reads as one,
    one assigned to an ``SQL_*`` name, or one handed to a call that runs SQL; never a docstring
    or a logging call's argument."""
    tree = ast.parse(source, file)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and _text(body[0].value) is not None:
                skipped.add(id(body[0].value))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOGGING
            and node.args
        ):
            skipped.update(id(n) for arg in node.args for n in ast.walk(arg))
    named: set[int] = set()
    fstring_parts: set[int] = set()  # read with their f-string, as a whole
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            fstring_parts.update(id(v) for v in node.values)
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and SQL_NAME.match(t.id) for t in targets):
                named.update(id(n) for n in ast.walk(node.value))
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name in RUNS_SQL:
                named.update(id(n) for n in ast.walk(node.args[0]))
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or id(node) in skipped or id(node) in fstring_parts:
            continue
        text = _text(node)
        if text is not None and (id(node) in named or STATEMENT.match(text)):
            yield f"{file}:{node.lineno}", text


def sources() -> Iterator[tuple[str, str, str]]:
    """(file, module, source) for every module in ``src/``."""
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield str(rel), ".".join(parts), path.read_text()


def source_statements() -> list[tuple[str, str]]:
    return [found for file, _, source in sources() for found in statements_in_source(source, file)]


def module_constants() -> list[tuple[str, str]]:
    """(module.NAME, value) for every module-level ``SQL_*`` string constant, from the imported
    modules (so an f-string's interpolated fragments are read too)."""
    found: list[tuple[str, str]] = []
    for _, module, source in sources():
        tree = ast.parse(source)
        names = {
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name) and SQL_NAME.match(t.id)
        }
        if names:
            mod = importlib.import_module(module)
            found += [(f"{module}.{n}", v) for n in sorted(names) if isinstance(v := getattr(mod, n), str)]
    return found


# -- the statements in src/ ---------------------------------------------------------------------


def test_no_statement_in_src_uses_psycopg_placeholders() -> None:
    found = [
        f"{where}: {text.strip()[:90]!r}" for where, text in source_statements() if PSYCOPG_MARK.search(text)
    ]
    assert found == []


def test_no_sql_constant_uses_psycopg_placeholders() -> None:
    found = [
        f"{name}: {text.strip()[:90]!r}" for name, text in module_constants() if PSYCOPG_MARK.search(text)
    ]
    assert found == []


def test_the_scan_sees_every_face_and_flags_psycopg_placeholders() -> None:
    names = {name for name, _ in module_constants()}
    assert {
        "pyworkflow.store._pg_sql.SQL_CREATE_RUN",
        "pyworkflow.store._pg_sql.SQL_FN_SUSPEND_RUN",
        "pyworkflow.store._sqlite.SQL_APPEND_EVENT",
        "pyworkflow.store._manage.SQL_LOCK_RUN",
        "pyworkflow.store._migrations.SQL_PG_MIGRATION_LOCK",
        "atfgraph.server._graph_pg.SQL_FN_SAVE_CHECKPOINT",
        "atfgraph.server._graph_sql.SQL_CLAIM",
    } <= names
    assert len(names) > 150
    where = {w.split(":")[0] for w, _ in source_statements()}
    assert {
        "pyworkflow/store/_pg_db.py",
        "pyworkflow/store/_retention.py",
        "atfgraph/server/_console_reads.py",
    } <= where
    source = '''
"""SELECT %s in a docstring is prose."""
SQL_A = "SELECT a FROM t WHERE id = %s"
SQL_B = f"SELECT {COLUMNS} FROM t WHERE id = %(id)s"
SQL_C = "SELECT a FROM t WHERE b LIKE 'x%%' AND id = ?"
def f(conn, log):
    conn.execute("UPDATE t SET a = %(a)s", {"a": 1})
    conn.raw.execute(translate("SELECT :a::text"), {"a": 1})
    log.warning("SELECT failed: %s", "x")
    return "%s and %s" % (1, 2)
'''
    flagged = [w for w, text in statements_in_source(source, "x.py") if PSYCOPG_MARK.search(text)]
    assert flagged == ["x.py:3", "x.py:4", "x.py:7"]


# -- the translation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translate() -> Any:
    pytest.importorskip("psycopg")
    from pyworkflow.store._pg_db import translate

    return translate


def test_positional_placeholders_become_psycopgs(translate: Any) -> None:
    assert translate("SELECT a FROM t WHERE id = ? AND b = ?") == "SELECT a FROM t WHERE id = %s AND b = %s"
    # Casts stay, colons in literals (JSON, times) too: positional statements have no :name.
    assert (
        translate("SELECT f(?::text[], ?::double precision)") == "SELECT f(%s::text[], %s::double precision)"
    )
    assert translate("""SELECT '{"k": "v:w"}'::jsonb, '12:30', ?""") == (
        """SELECT '{"k": "v:w"}'::jsonb, '12:30', %s"""
    )


def test_named_placeholders_become_psycopgs(translate: Any) -> None:
    assert translate("SELECT :run, :now, :now WHERE x = :run_id", True) == (
        "SELECT %(run)s, %(now)s, %(now)s WHERE x = %(run_id)s"
    )
    assert (
        translate("SELECT :a::text, NULL::bytea, x::integer", True)
        == "SELECT %(a)s::text, NULL::bytea, x::integer"
    )
    # Never inside a string literal, a quoted name or a comment; a ? is not a named placeholder.
    assert translate("""SELECT ':x', 'it''s :y', "a:b", :z /* :c */ -- :d\n, ?""", True) == (
        """SELECT ':x', 'it''s :y', "a:b", %(z)s /* :c */ -- :d\n, ?"""
    )
    assert translate("INSERT INTO t VALUES (:a,:b)", True) == "INSERT INTO t VALUES (%(a)s,%(b)s)"


def test_percent_signs_are_escaped(translate: Any) -> None:
    assert (
        translate("SELECT a FROM t WHERE b LIKE 'x%' AND c = ?")
        == "SELECT a FROM t WHERE b LIKE 'x%%' AND c = %s"
    )
    assert (
        translate("SELECT a FROM t WHERE b LIKE '%' || :p", True)
        == "SELECT a FROM t WHERE b LIKE '%%' || %(p)s"
    )
    assert translate("SELECT 5 % 2") == "SELECT 5 %% 2"


def test_lock_hints_become_clauses(translate: Any) -> None:
    assert (
        translate("SELECT id FROM t WHERE id = ? /*FOR UPDATE*/")
        == "SELECT id FROM t WHERE id = %s FOR UPDATE"
    )
    assert translate("SELECT r.id FROM runs r LIMIT ? /*FOR UPDATE OF r SKIP LOCKED*/") == (
        "SELECT r.id FROM runs r LIMIT %s FOR UPDATE OF r SKIP LOCKED"
    )
    assert translate("SELECT id FROM t WHERE id = :id /*FOR UPDATE SKIP LOCKED*/", True) == (
        "SELECT id FROM t WHERE id = %(id)s FOR UPDATE SKIP LOCKED"
    )
    assert translate("SELECT 1 /* a comment */") == "SELECT 1 /* a comment */"
    # A statement only PostgreSQL runs may write the clause itself.
    assert (
        translate("SELECT id FROM t WHERE id = ? FOR UPDATE") == "SELECT id FROM t WHERE id = %s FOR UPDATE"
    )


def test_the_translation_is_cached(translate: Any) -> None:
    """The execution paths call ``translate(sql, named)``: after the first, one look-up."""
    sql = "SELECT a FROM t WHERE id = ? -- test_the_translation_is_cached"
    first = translate(sql, False)
    hits = translate.cache_info().hits
    assert translate(sql, False) is first and translate(sql, False) is first
    assert translate.cache_info().hits == hits + 2
    assert translate(sql, True) is not first  # the named form is cached apart


# -- on PostgreSQL: every path that sends a statement -------------------------------------------


@pytest.mark.postgres
async def test_every_postgresql_path_takes_the_one_style(pg_database: str) -> None:
    import psycopg

    from pyworkflow.store import Migration, PostgresDatabase
    from pyworkflow.store._pg_db import AsyncPgConnection

    schema = [Migration("test", 1, "t", "CREATE TABLE t (k text PRIMARY KEY, v integer);")]
    db = PostgresDatabase(pg_database, migrations=schema)
    try:
        # A write function's connection and a reader: positional, named, none (a % stays a %).
        def write(conn: Any) -> list[Any]:
            conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", ("a%", 1))
            conn.execute("INSERT INTO t (k, v) VALUES (:k, :v)", {"k": "b:c", "v": 2})
            locked = conn.execute("SELECT v FROM t WHERE k = ? /*FOR UPDATE*/", ("a%",)).fetchone()
            return [locked[0], *conn.execute("SELECT k FROM t WHERE k LIKE 'a%'").fetchone()]

        assert await db.write(write) == [1, "a%"]
        reader = db.reader()
        row = reader.execute("SELECT :k::text || ':x', '12:30', :k", {"k": "n"}).fetchone()
        assert tuple(row) == ("n:x", "12:30", "n")
        row = reader.execute("""SELECT '{"k": "v:w"}'::jsonb ->> 'k', ?::int""", (3,)).fetchone()
        assert tuple(row) == ("v:w", 3)
        # Statements through the pipelined writers (submit): the same translation.
        assert await db.submit("SELECT v FROM t WHERE k = :k AND k LIKE 'b%'", {"k": "b:c"}) == [(2,)]
        assert await db.submit("SELECT v FROM t WHERE k = ?", ("a%",), key="a%") == [(1,)]
        assert await db.submit("SELECT 'p%'", None, key=None) == [("p%",)]
    finally:
        db.close()
    # The PostgreSQL store's async pool connections.
    async with await psycopg.AsyncConnection.connect(pg_database, autocommit=True) as raw:
        conn = AsyncPgConnection(raw)
        async with raw.pipeline(), raw.transaction():
            named = await conn.execute("SELECT v FROM t WHERE k = :k /*FOR UPDATE*/", {"k": "b:c"})
            positional = await conn.execute("SELECT count(*) FROM t WHERE k LIKE ?", ("%",))
            bare = await conn.execute("SELECT '100%'")
            assert [await named.fetchone(), await positional.fetchone(), await bare.fetchone()] == [
                (2,),
                (2,),
                ("100%",),
            ]
