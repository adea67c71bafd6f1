"""Moved to :mod:`pyworkflow.store` (``PostgresDatabase``); this name stays until the graph store
imports it from there."""

from pyworkflow.store import PostgresDatabase

__all__ = ["PostgresDatabase"]
