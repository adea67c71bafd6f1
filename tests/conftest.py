"""Shared fixtures. ``PYWORKFLOW_TEST_STORE=postgresql`` runs the store contract suite and the
engine tests against PostgreSQL (a fresh database per test, on ``PYWORKFLOW_TEST_PG``, default
``postgresql://postgres@127.0.0.1:5432/postgres``); the default is a fresh SQLite file."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

import pyworkflow

BACKEND = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite")
PG_ADMIN_URL = os.environ.get("PYWORKFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def require_service(name: str, host: str, port: int) -> None:
    """Fail (never skip) with one clear line when a service the test needs is down."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as exc:
        pytest.fail(
            f"{name} is not reachable on {host}:{port} ({exc}); start it (scripts/services.sh)", pytrace=False
        )


def _pg_url_for(dbname: str) -> str:
    parts = urlsplit(PG_ADMIN_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{dbname}", parts.query, parts.fragment))


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test; dropped afterwards."""
    parts = urlsplit(PG_ADMIN_URL)
    require_service("PostgreSQL", parts.hostname or "127.0.0.1", parts.port or 5432)
    import psycopg

    name = f"pwtest_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url_for(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def store_url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Storage URL for the backend under test."""
    if BACKEND in ("postgresql", "postgres"):
        return str(request.getfixturevalue("pg_database"))
    if BACKEND != "sqlite":
        pytest.fail(f"PYWORKFLOW_TEST_STORE must be sqlite or postgresql, not {BACKEND!r}", pytrace=False)
    return f"sqlite:///{tmp_path / 'pyworkflow.db'}"


@pytest.fixture
async def engine(store_url: str) -> AsyncIterator[str]:
    """pyworkflow configured on a fresh store, shut down after the test."""
    pyworkflow.configure(storage=store_url, poll_interval=0.02)
    try:
        yield store_url
    finally:
        await pyworkflow.shutdown()
