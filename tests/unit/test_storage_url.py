"""The one grammar of storage locations (``pyworkflow.store.parse_storage_url``), and the places
that use it: ``open_store``, ``configure``, the graph server's ``--db``/``ATFGRAPH_DB``, ``atfg db
migrate --db`` and ``pyworkflow worker --storage``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

import pyworkflow
from pyworkflow import ConfigurationError
from pyworkflow.store import (
    SQLiteStore,
    StorageURL,
    open_store,
    parse_storage_url,
    redact_url,
    sqlite_path,
    sqlite_url,
)

GOOD: list[tuple[str, StorageURL]] = [
    ("sqlite:///relative.db", StorageURL("sqlite", path="relative.db")),
    ("sqlite:///dir/relative.db", StorageURL("sqlite", path="dir/relative.db")),
    ("sqlite:////abs/path.db", StorageURL("sqlite", path="/abs/path.db")),
    ("sqlite:///my%20runs.db", StorageURL("sqlite", path="my runs.db")),
    ("sqlite:///what%3F%23.db", StorageURL("sqlite", path="what?#.db")),
    ("what?#.db", StorageURL("sqlite", path="what?#.db")),  # a bare path is taken literally
    ("sqlite:///:memory:", StorageURL("sqlite", path=":memory:")),
    ("relative.db", StorageURL("sqlite", path="relative.db")),
    ("/abs/path.db", StorageURL("sqlite", path="/abs/path.db")),
    ("./dir/with:colon.db", StorageURL("sqlite", path="./dir/with:colon.db")),
    (":memory:", StorageURL("sqlite", path=":memory:")),
    ("C:\\runs\\x.db", StorageURL("sqlite", path="C:\\runs\\x.db")),
    ("postgresql://u:pw@db.example:5432/app", StorageURL("postgres", url="postgresql://u:pw@db.example:5432/app")),
    ("postgres://db.example/app", StorageURL("postgres", url="postgres://db.example/app")),
    ("postgresql://", StorageURL("postgres", url="postgresql://")),  # libpq's defaults
    ("postgresql:///app?host=/run/postgresql", StorageURL("postgres", url="postgresql:///app?host=/run/postgresql")),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), GOOD, ids=[t for t, _ in GOOD])
def test_good_locations(text: str, expected: StorageURL) -> None:
    parsed = parse_storage_url(text)
    assert parsed == expected
    assert parsed.location == (expected.path if expected.dialect == "sqlite" else expected.url)
    assert parsed.is_postgres == (expected.dialect == "postgres")


BAD: list[tuple[object, str]] = [
    ("", "empty"),
    ("   ", "empty"),
    ("\t\n", "empty"),
    (None, "must be a string, not NoneType"),
    (123, "must be a string, not int"),
    (b"sqlite:///x.db", "must be a string, not bytes"),
    (Path("x.db"), "must be a string, not PosixPath"),
    ("mysql://db.example/x", "unknown storage scheme 'mysql'"),
    ("sqlit:///x.db", "unknown storage scheme 'sqlit'"),
    ("SQLITE:///x.db", "unknown storage scheme 'SQLITE'"),
    ("Postgresql://h/db", "unknown storage scheme 'Postgresql'"),
    ("postgresq://h/db", "unknown storage scheme 'postgresq'"),
    ("file:///x.db", "unknown storage scheme 'file'"),
    ("http://example.com/x.db", "unknown storage scheme 'http'"),
    ("sqlite://", "has no path"),
    ("sqlite:///", "has no path"),
    ("sqlite://x.db", "names a host ('x.db')"),
    ("sqlite://host/x.db", "names a host ('host')"),
    ("sqlite:///x.db?synchronous=OFF", "has a query string ('?synchronous=OFF')"),
    ("sqlite:///x.db?mode=ro#frag", "has a query string ('?mode=ro#frag')"),
    ("sqlite:////abs/x.db?", "has a query string ('?')"),
    ("sqlite:///x.db#frag", "has a fragment ('#frag')"),
    ("sqlite:x.db", "no '//'"),
    ("sqlite:/x.db", "no '//'"),
    ("postgresql:db.example/app", "no '//'"),
    ("postgres:", "no '//'"),
    ("x\x00.db", "NUL"),
    ("sqlite:///x\x00.db", "NUL"),
    ("sqlite:///x%00.db", "NUL"),
    ("postgresql://h/db\x00", "NUL"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD, ids=[repr(t) for t, _ in BAD])
def test_bad_locations_are_one_clear_configuration_error(text: object, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_storage_url(text)
    message = str(raised.value)
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "text",
    ["mysql://user:s3cret@db.example/x", "postgresql://user:s3cret@h/db\x00", "mysql://u:s3cret@[::1/x"],
)
def test_messages_never_show_a_password(text: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_storage_url(text)
    assert "s3cret" not in str(raised.value)


def test_redact_url() -> None:
    assert redact_url("postgresql://u:pw@h:5432/db?x=1") == "postgresql://u:***@h:5432/db?x=1"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact_url("postgresql://h/db") == "postgresql://h/db"
    assert redact_url("/var/lib/a@b.db") == "/var/lib/a@b.db"
    assert redact_url("mysql://u:pw@[::1/x") == "mysql://***@[::1/x"
    assert parse_storage_url("postgres://u:pw@h/db").redacted() == "postgres://u:***@h/db"
    assert parse_storage_url("sqlite:///x.db").redacted() == "x.db"


def test_storage_url_is_frozen() -> None:
    parsed = parse_storage_url("x.db")
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.path = "y.db"  # type: ignore[misc]


def test_sqlite_path_and_open_store_use_the_grammar(tmp_path: Path) -> None:
    assert sqlite_path(f"sqlite:///{tmp_path}/a.db") == f"{tmp_path}/a.db"
    with pytest.raises(ConfigurationError, match="not a SQLite URL"):
        sqlite_path("postgresql://u:pw@h/db")
    with pytest.raises(ConfigurationError, match="unknown storage scheme"):
        open_store("mysql://h/x")
    store = open_store(parse_storage_url(str(tmp_path / "b.db")))
    try:
        assert isinstance(store, SQLiteStore) and (tmp_path / "b.db").exists()
    finally:
        store.close()


ODD_NAMES = [
    "/abs/x.db",
    "rel/x y.db",
    "/h/#work/a?b%20c.db",
    "/tmp/ünï:code.db",
    "C:\\runs\\x.db",
    ":memory:",
]


@pytest.mark.parametrize("path", ODD_NAMES)
def test_sqlite_url_reads_back_as_its_path(path: str) -> None:
    url = sqlite_url(path)
    assert url.startswith("sqlite:///") and not {"?", "#", " "} & set(url)
    assert parse_storage_url(url) == StorageURL("sqlite", path=path)
    assert sqlite_url(Path(path)) == url


def test_the_default_store_and_a_stores_url_keep_a_folder_with_odd_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default (``$PYWORKFLOW_HOME/pyworkflow.db``) and a store's ``url`` are URLs built from
    a path: a ``#``, ``?`` or ``%`` in the folder stays in the file name, not refused or decoded."""
    home = tmp_path / "a #b?c%20d"
    home.mkdir()
    monkeypatch.setenv("PYWORKFLOW_HOME", str(home))
    monkeypatch.delenv("PYWORKFLOW_STORAGE", raising=False)
    pyworkflow.configure()
    store = pyworkflow.get_store()
    try:
        assert isinstance(store, SQLiteStore)
        assert store.db.path == str(home / "pyworkflow.db") and (home / "pyworkflow.db").exists()
        assert sqlite_path(store.url) == store.db.path
    finally:
        pyworkflow.configure(storage=str(tmp_path / "other.db"))  # closes the default store
    assert [p.name for p in tmp_path.iterdir()] == [home.name]


def test_configure_refuses_what_the_grammar_refuses() -> None:
    for text, _ in BAD:
        if text is None:  # configure's default: $PYWORKFLOW_STORAGE or ~/.pyworkflow
            continue
        with pytest.raises(ConfigurationError):
            pyworkflow.configure(storage=text)  # type: ignore[arg-type]


def test_the_graph_store_opens_a_sqlite_url_as_its_file(tmp_path: Path) -> None:
    from atfgraph.server._store import GraphStore

    store = GraphStore(f"sqlite:///{tmp_path}/graph.db")
    try:
        assert store.db.path == f"{tmp_path}/graph.db"
        assert (tmp_path / "graph.db").exists()
    finally:
        store.close()
    with pytest.raises(ConfigurationError, match="unknown storage scheme 'mysql'"):
        GraphStore("mysql://h/x")


def test_the_server_refuses_a_bad_db_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atfgraph.server._serve import serve

    monkeypatch.setenv("ATFGRAPH_HOME", str(tmp_path))
    for flag, env in (("sqlite:x.db", None), (None, "mysql://u:s3cret@h/x")):
        if env is not None:
            monkeypatch.setenv("ATFGRAPH_DB", env)
        with pytest.raises(SystemExit) as raised:
            serve(port=1, db_path=flag)
        assert raised.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("atfgraph: bad database location: "), err
        assert "s3cret" not in err[0]
    assert not list(tmp_path.iterdir())  # nothing was created


def test_atfg_db_migrate_refuses_a_bad_db_and_takes_a_sqlite_url(tmp_path: Path) -> None:
    from atfgraph.cli import main

    runner = CliRunner()
    bad = runner.invoke(main, ["db", "migrate", "--db", "sqlite://host/x.db"])
    assert bad.exit_code == 2, bad.output
    assert "--db: SQLite URL 'sqlite://host/x.db' names a host" in bad.output
    good = runner.invoke(main, ["db", "migrate", "--db", f"sqlite:///{tmp_path}/m.db"])
    assert good.exit_code == 0, good.output
    assert (tmp_path / "m.db").exists()


def test_pyworkflow_worker_refuses_a_bad_storage() -> None:
    from pyworkflow.cli import main

    result = CliRunner().invoke(main, ["worker", "--storage", "postgresq://h/db"])
    assert result.exit_code == 2, result.output
    assert "unknown storage scheme 'postgresq'" in result.output
