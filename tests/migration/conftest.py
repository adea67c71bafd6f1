"""Fixtures of the upgrade tests (see ``upgrades.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(dialect, database): a temporary SQLite file, or a new PostgreSQL database."""
    if request.param == "postgres":
        return "postgres", str(request.getfixturevalue("pg_database"))
    return "sqlite", str(tmp_path / "before.db")
