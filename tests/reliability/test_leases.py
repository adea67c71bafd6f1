"""Lease trials (issue 11 B.3): SIGSTOP a worker past its lease, SIGCONT it, oracle after each;
the graph server on both stores (the regression case of issue 11 A.4) and the Celery runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reliability.campaigns import REDIS_URL, _create_pg, _drop_pg
from tests.reliability.conftest import require
from tests.reliability.leases import celery_lease_trials, graph_lease_trials
from tests.reliability.oracle import Figures

TRIALS = 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_frozen_graph_worker_loses_its_lease_and_nothing_else(
    backend: str, tmp_path: Path, summary: list[Figures]
) -> None:
    if backend == "postgresql":
        require("postgresql")
    db = _create_pg() if backend == "postgresql" else str(tmp_path / "graph.db")
    try:
        figures = await graph_lease_trials(db, tmp_path, TRIALS, Figures("graph SIGSTOP", backend))
    finally:
        if backend == "postgresql":
            _drop_pg(db)
    summary.append(figures)
    assert figures.violations == [], "\n".join(figures.violations)
    assert figures.trials == TRIALS


@pytest.mark.timeout(300)
async def test_a_frozen_celery_worker_loses_its_turn_and_nothing_else(
    tmp_path: Path, summary: list[Figures]
) -> None:
    require("postgresql", "redis")
    db = _create_pg()
    try:
        figures = await celery_lease_trials(
            db, REDIS_URL, tmp_path, TRIALS, Figures("celery SIGSTOP", "postgresql")
        )
    finally:
        _drop_pg(db)
    summary.append(figures)
    assert figures.violations == [], "\n".join(figures.violations)
    assert figures.trials == TRIALS
