"""One entry point per (face, backend) campaign, shared by the fast tests and the command line:
it makes the campaign's database (a SQLite file, or a new PostgreSQL database dropped
afterwards) and runs the trials; the caller reads the :class:`~tests.reliability.oracle.Figures`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.reliability.celery_trials import WORKER_POINTS, run_celery_campaign
from tests.reliability.graph_trials import run_graph_campaign
from tests.reliability.local_trials import run_local_campaign
from tests.reliability.oracle import Figures

from pyworkflow._crashpoints import POINTS, SERVER_POINTS

__all__ = ["CAMPAIGNS", "FAST", "FULL", "expected_points", "run_campaign"]

PG_ADMIN_URL = os.environ.get("PYWORKFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("PYWORKFLOW_TEST_REDIS", "redis://127.0.0.1:6379/0")

#: (face, backend) pairs: the local runtime and the graph server on both stores, Celery on
#: PostgreSQL with Redis (its supported deployment).
CAMPAIGNS = (
    ("local", "sqlite"),
    ("local", "postgresql"),
    ("celery", "postgresql"),
    ("graph", "sqlite"),
    ("graph", "postgresql"),
)
#: Trials per campaign in ``make test`` (200 in all, the cheap ones weighted up: a local trial
#: takes about half a second, a Celery one ten; Celery's 12 still hit each of its crash points,
#: and each graph campaign's 10 each of the server's, six of them at its points) and in the full
#: run
#: (2,000 per backend: local + graph on SQLite, local + Celery + graph on PostgreSQL).
FAST = {
    ("local", "sqlite"): 112,
    ("local", "postgresql"): 56,
    ("celery", "postgresql"): 12,
    ("graph", "sqlite"): 10,
    ("graph", "postgresql"): 10,
}
FULL = {
    ("local", "sqlite"): 1400,
    ("local", "postgresql"): 1000,
    ("celery", "postgresql"): 400,
    ("graph", "sqlite"): 600,
    ("graph", "postgresql"): 600,
}


def expected_points(face: str) -> set[str]:
    """The crash points a campaign of ``face`` must hit: the engine's on the local runtime,
    those a worker and the deciding client pass on Celery, the graph server's own on graph."""
    if face == "local":
        return set(POINTS)
    if face == "celery":
        return {*WORKER_POINTS, "after_hook_resumed"}
    return set(SERVER_POINTS)


def _create_pg() -> str:
    import psycopg

    name = f"reltest_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(PG_ADMIN_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _drop_pg(url: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path.lstrip("/")}" WITH (FORCE)')


def run_campaign(face: str, backend: str, trials: int, workdir: Path, seed: int = 0) -> Figures:
    """Run one campaign of ``trials`` trials in ``workdir`` (created) and return its figures."""
    workdir.mkdir(parents=True, exist_ok=True)
    figures = Figures(face, backend)
    pg = _create_pg() if backend == "postgresql" else None
    try:
        if face == "local":
            storage = pg or f"sqlite:///{workdir / 'local.db'}"
            return run_local_campaign(storage, workdir, trials, figures, seed=seed)
        if face == "celery":
            assert pg is not None, "the Celery runtime runs on PostgreSQL"
            return run_celery_campaign(pg, REDIS_URL, workdir, trials, figures, seed=seed)
        db = pg or str(workdir / "graph.db")
        return asyncio.run(run_graph_campaign(db, workdir, trials, figures, seed=seed))
    finally:
        if pg is not None:
            _drop_pg(pg)
