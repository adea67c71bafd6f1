"""The approval-cycle benchmark runs end to end against real servers and workers (a handful of
cycles and parked traversers): this checks the harness and its noise-free counts, not speed.
On PostgreSQL it runs two servers on one database, as the scaling figures do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_approval_cycle_benchmark_runs_and_counts(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "bench.atfgraph_cycles",
        "-n",
        "12",
        "-c",
        "2",
        "--capacity",
        "3",
        "--park",
        "4",
    ]
    on_postgres = os.environ.get("PYWORKFLOW_TEST_STORE") == "postgresql"
    if on_postgres:
        pg = os.environ.get("PYWORKFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
        argv += ["--db", pg, "--servers", "2"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["servers"] == (2 if on_postgres else 1)
    # --capacity reached each worker process: the server registered them with it
    assert report["settings"]["worker_capacity"] == [3] * report["servers"]
    run = report["throughput"]
    assert run["cycles"] == 12 and run["cycles_per_s"] > 0
    # About six requests per cycle at steady state (bench/README.md); a dozen cycles, two in
    # flight, miss some ride-along claims and polls: bounded loosely, from both sides, so that a
    # broken counter or a protocol that went back to a request per step still fails.
    assert 5.0 <= run["requests_per_cycle"] <= 9.0, run
    # The requests by route add up to the count (the server's /metrics against its own counter),
    # and the client's three are one each per cycle whatever the claims did.
    routes = run["requests_per_cycle_by_route"]
    assert abs(sum(routes.values()) - run["requests_per_cycle"]) < 0.05, run
    for route in (
        "POST /api/v2/traversers",
        "POST /api/v2/approvals/{id}/decide",
        "GET /api/v2/traversers/{id}",
    ):
        assert routes[route] == 1.0, routes
    assert report["machine"]["cpus"] == os.cpu_count() and report["machine"]["python_probe_ms"] > 0
    # The server's collector, counted from its /metrics: three generations, none negative.
    walks = run["server_gc_collections_per_1000_cycles"]
    assert len(walks) == 3 and all(w >= 0 for w in walks), walks
    assert set(run["cpu_ms_per_cycle"]) == {"servers", "workers", "client", "postgres"}
    assert (run["cpu_ms_per_cycle"]["postgres"] > 0) == on_postgres
    assert report["parking"]["parked"] == 4 and report["parking"]["worker_permits_in_use"] == 0
