"""docs/operations.md's metrics reference lists every metric the registry of both faces serves
(``pyworkflow.store.metrics.REGISTRY``: the event metrics, and the state gauges a real store's
collector reports), each with its type and exactly its label names, and nothing else: a metric
added, renamed or relabelled without the page fails here."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from pyworkflow.store import apply_migrations, metrics, pyworkflow_migrations

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented() -> dict[str, tuple[str, set[str]]]:
    """name -> (type, label names) from the table under "### Metrics reference"."""
    text = PAGE.read_text()
    section = text[text.index("### Metrics reference") :]
    section = section[: section.index("\n## ")]
    rows: dict[str, tuple[str, set[str]]] = {}
    for line in section.splitlines():
        found = re.match(r"\| `([a-z_]+)` \| ([a-z]+)[^|]*\|([^|]*)\|", line)
        if found:
            name, kind, labels = found.groups()
            assert name not in rows, f"{name} is listed twice"
            rows[name] = (kind, set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", labels))))
    return rows


def registered(tmp_path: Path) -> dict[str, tuple[str, set[str]]]:
    """name (as scraped: counters with ``_total``) -> (type, label names), from the registry
    with a real store's state collector on it."""
    conn = sqlite3.connect(tmp_path / "m.db", check_same_thread=False, isolation_level=None)
    apply_migrations(conn, pyworkflow_migrations("sqlite"))

    def read(fn: Any) -> Any:
        return fn(conn)

    stop = metrics.collect_store(read, conn)
    wrappers = {
        m._name: m
        for m in vars(metrics).values()
        if isinstance(m, Counter | Gauge | Histogram)  # the module's event metrics
    }
    try:
        found: dict[str, tuple[str, set[str]]] = {}
        for family in metrics.REGISTRY.collect():
            wrapper = wrappers.get(family.name)
            labels = wrapper._labelnames if wrapper is not None else family._labelnames  # type: ignore[attr-defined]
            name = f"{family.name}_total" if family.type == "counter" else family.name
            found[name] = (family.type, set(labels))
        return found
    finally:
        stop()
        conn.close()


def test_every_registered_metric_is_documented_with_its_type_and_labels(tmp_path: Path) -> None:
    served, page = registered(tmp_path), documented()
    assert "pyworkflow_runs" in served and "atfgraph_http_request_duration_seconds" in served
    assert sorted(set(served) - set(page)) == [], "registered but not in docs/operations.md"
    assert sorted(set(page) - set(served)) == [], "in docs/operations.md but not registered"
    for name, (kind, labels) in served.items():
        assert page[name] == (kind, labels), (name, page[name], (kind, labels))
