"""Moved to :mod:`pyworkflow.store` (``PostgresDatabase``); this name stays until the graph store
imports it from there."""

from pyworkflow.store._pg_db import PostgresDatabase

__all__ = ["PostgresDatabase"]
