"""A PostgreSQL cluster of a test's own, which the test may restart (the shared server on
127.0.0.1:5432 serves every other test at the same time and must not be). Made with the
machine's ``initdb`` and ``pg_ctl`` (Debian keeps them under /usr/lib/postgresql/<major>/bin), on
a free port, in a temporary directory; as the ``postgres`` user when the tests run as root,
since PostgreSQL refuses to run as root. A missing ``initdb`` fails the test in one line."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _major(bindir: str) -> int:
    name = Path(bindir).parent.name
    return int(name) if name.isdigit() else 0


def _binaries() -> tuple[str, str]:
    """initdb and pg_ctl of the newest PostgreSQL installed, else those on PATH."""
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True):
        initdb, pg_ctl = Path(bindir, "initdb"), Path(bindir, "pg_ctl")
        if initdb.exists() and pg_ctl.exists():
            return str(initdb), str(pg_ctl)
    on_path = shutil.which("initdb"), shutil.which("pg_ctl")
    if on_path[0] is None or on_path[1] is None:
        pytest.fail("PostgreSQL's initdb and pg_ctl are missing (Debian package: postgresql)", pytrace=False)
    return on_path[0], on_path[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class OwnPostgres:
    """A running cluster: ``url`` (its ``postgres`` database), :meth:`database` to add one,
    :meth:`restart` as an operator restarts it."""

    def __init__(self, data: Path, pg_ctl: str, as_owner: list[str], port: int) -> None:
        self._data, self._pg_ctl, self._as_owner = data, pg_ctl, as_owner
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def run(self, *argv: str) -> None:
        proc = subprocess.run([*self._as_owner, *argv], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"

    def pg_ctl(self, *argv: str) -> None:
        self.run(self._pg_ctl, "-D", str(self._data / "db"), "-l", str(self._data / "log"), *argv)

    def restart(self) -> None:
        """A fast shutdown (every session ended with a goodbye), then a start; returns once it
        accepts connections again."""
        self.pg_ctl("-m", "fast", "-w", "restart")

    def database(self, name: str) -> str:
        """Create database ``name``; its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name


@contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """A new cluster (trust authentication, fsync off: it holds nothing worth keeping), stopped
    and deleted afterwards."""
    initdb, pg_ctl = _binaries()
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = Path(tempfile.mkdtemp(prefix="pyworkflow-own-pg-"))
    if as_owner:
        shutil.chown(data, "postgres", "postgres")
    port = _free_port()
    cluster = OwnPostgres(data, pg_ctl, as_owner, port)
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=off -c full_page_writes=off"
    try:
        cluster.run(
            initdb, "-D", str(data / "db"), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"
        )
        cluster.pg_ctl("-o", options, "-w", "start")
        yield cluster
    finally:
        subprocess.run([*as_owner, pg_ctl, "-D", str(data / "db"), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(data, ignore_errors=True)
