"""``atfg db backup``'s refusals, in process on temporary SQLite files: a DEST that exists (the
database itself included), a missing source, a file that is not a database and a PostgreSQL URL
are refused with one line and leave no file behind. The copy under a live server's write load:
tests/acceptance/atfgraph/test_atfg_backup.py."""

from __future__ import annotations

import json
import shlex
import sqlite3
from pathlib import Path

from click.testing import CliRunner, Result

from atfgraph.cli import main
from doc_snippets import code_blocks, shell_lines


class Done:
    def __init__(self, result: Result) -> None:
        self.returncode = result.exit_code
        self.stderr = result.stderr


def atfg(*args: str) -> Done:
    return Done(CliRunner().invoke(main, list(args)))


def test_bad_backups_are_refused_and_change_nothing(tmp_path: Path) -> None:
    source = tmp_path / "graph.db"
    conn = sqlite3.connect(source)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"keep me")
    done = atfg("db", "backup", str(taken), "--db", str(source))
    assert done.returncode == 2 and "never overwrites" in done.stderr, done.stderr
    assert taken.read_bytes() == b"keep me"
    done = atfg("db", "backup", str(tmp_path / "no" / "x.db"), "--db", str(source))
    assert done.returncode == 2 and "is not a directory" in done.stderr, done.stderr
    done = atfg("db", "backup", str(source), "--db", str(source))
    assert done.returncode == 2 and "exists" in done.stderr
    done = atfg("db", "backup", str(tmp_path / "a.db"), "--db", str(tmp_path / "missing.db"))
    assert done.returncode == 2 and "no database file" in done.stderr
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    done = atfg("db", "backup", str(tmp_path / "b.db"), "--db", str(junk))
    assert done.returncode == 1 and "cannot back up" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.db", "junk.db", "taken.db"]
    done = atfg("db", "backup", str(tmp_path / "c.db"), "--db", "postgresql://app:s3cret@db.example/atfg")
    assert done.returncode == 2 and "pg_dump --format=custom" in done.stderr, done.stderr
    assert "s3cret" not in done.stderr and not (tmp_path / "c.db").exists()
    # And the copy of the small file is whole, with the source's permissions.
    source.chmod(0o640)
    assert atfg("db", "backup", str(tmp_path / "ok.db"), "--db", str(source)).returncode == 0
    assert (tmp_path / "ok.db").stat().st_mode & 0o777 == 0o640
    copy = sqlite3.connect(tmp_path / "ok.db")
    try:
        assert copy.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # one file to carry
    finally:
        copy.close()


def test_the_documented_backup_commands_run_as_written(tmp_path: Path) -> None:
    """docs/operations.md's SQLite backup commands, with its paths moved under tmp_path."""
    live, folder = tmp_path / "srv" / "atfgraph.db", tmp_path / "backups"
    live.parent.mkdir()
    folder.mkdir()
    conn = sqlite3.connect(live)
    conn.execute("PRAGMA journal_mode = WAL")  # as the server keeps it
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    block = code_blocks("docs/operations.md", "SQLite: online, with `atfg db backup`", "sh")[0]
    lines = shell_lines(
        block.replace("/var/backups/atfgraph/", f"{folder}/").replace("/srv/atfgraph/", f"{live.parent}/")
    )
    assert len(lines) == 2 and all(line.startswith("atfg db backup ") for line in lines), lines
    for line in lines:
        result = CliRunner().invoke(main, shlex.split(line)[1:])
        assert result.exit_code == 0, result.stderr
    conn.close()
    made = sorted(folder.iterdir())
    assert [p.name for p in made][-1] == "nightly.db" and len(made) == 2, made
    assert json.loads(result.stdout)["backup"] == str(folder / "nightly.db")
