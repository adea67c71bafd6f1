"""The HITL benchmark harness runs end to end (``--quick``, both modes); this checks the harness, not
speed: every phase of both modes ran, its counts add up, and fsyncs are counted where strace can."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from bench._fsyncs import strace_available
from tests.conftest import PG_ADMIN_URL, require_service

ROOT = Path(__file__).resolve().parents[2]
N = 40


def test_hitl_benchmark_quick_runs_both_modes(tmp_path: Path) -> None:
    out = tmp_path / "hitl.json"
    cmd = [sys.executable, "-m", "bench.hitl", "--quick", "--n", str(N), "--reps", "2",
           "--poll-interval", "0.02", "--dir", str(tmp_path / "db"), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = (
        "all at once",
        "one at a time",
        "phase A start+suspend",
        "phase B resume+complete",
        "phase C plain",
        "resume+complete, suspended runs",
        "poll_interval=0.02 (non-default)",
        "this disk: a bare SQLite commit of 6 pages",
        "the disk's ceiling at that many commits",
        "this processor: ",
    )
    for line in expected:
        assert line in proc.stdout, proc.stdout
    result = json.loads(out.read_text())
    assert set(result["modes"]) == {"all_at_once", "one_at_a_time"}
    assert result["prepare_calls"] == result["config"]["n"] == N
    assert result["config"]["machine"]["python_probe_ms"] > 0
    counted = strace_available()
    for mode in result["modes"].values():
        assert set(mode["phases"]) == {"A", "B", "C"}
        assert mode["while_suspended"]["suspended_runs"] == N
        for db_key in ("bytes_per_waiting_hitl_run", "bytes_per_completed_hitl_run", "bytes_per_plain_run"):
            assert mode["db"][db_key] > 0
        for phase in mode["phases"].values():
            assert phase["commits_per_run"] > 0
            assert (phase["fsyncs_per_run"] is not None) == counted
    # One at a time, no commit is shared between runs: the commits per run are whole transitions.
    one = result["modes"]["one_at_a_time"]["phases"]
    assert all(p["commits_per_run"] >= 2 for p in one.values()), one
    if counted:
        assert all(p["fsyncs_per_run"] >= 1 for p in one.values()), one
        # The traced pass commits what the timed ones do (strace's slowdown does not make the end
        # of a suspended turn commit alone: that would be one more commit a run), so its fsyncs
        # are the timed passes' commits'. A stray commit of the runtime's own periodic work in
        # either pass (one in 40 runs, seen on a slow machine) is not that: up to 0.1 a run.
        assert all(abs(p["commits_per_run_traced"] - p["commits_per_run"]) <= 0.1 for p in one.values()), one
        assert "WAL checkpoints" in proc.stdout, proc.stdout
    floor = result["commit_floor"]
    assert floor["pages_per_commit"] == 6 and floor["synchronous"] == "FULL"
    assert 0 < floor["median_ms"] <= floor["p90_ms"] and floor["commits_per_s"] > 0
    # The collector's pace is the runtime's default, and each phase counts the collector's walks.
    assert "gc_threshold=50000" in proc.stdout and "gc_threshold=50000 (non-default)" not in proc.stdout
    assert "garbage collections in the phase (generations 0 / 1 / 2)" in proc.stdout, proc.stdout
    for mode in result["modes"].values():
        assert all(len(p["gc_collections"]) == 3 for p in mode["phases"].values()), mode


def test_disk_benchmark_times_commits_by_pages(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "bench._disk",
        "--pages",
        "1",
        "3",
        "--commits",
        "30",
        "--dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "3"], lines
    assert all(
        "pages a commit: median" in line and "(30 commits, synchronous=FULL)" in line for line in lines
    )
    assert list(tmp_path.iterdir()) == []  # its file went with its temporary folder
    bad = subprocess.run([*cmd[:3], "--pages", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "at least 1" in bad.stderr, bad.stderr


def test_statements_benchmark_times_each_transition_in_each_form(tmp_path: Path) -> None:
    """``bench.sqlite_statements``: every transition in both forms (and a wait's creation, a
    checkpoint's save and a lease from Python too), a positive time each, the same figures in its
    JSON file; bad counts refused."""
    out = tmp_path / "statements.json"
    cmd = [sys.executable, "-m", "bench.sqlite_statements", "--n", "50", "--rounds", "2", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())["us"]
    assert list(figures) == [
        "create_run", "complete_step", "create_wait (suspending)", "save_checkpoint", "lease (a resume)",
        "end_run (fenced)",
    ]  # fmt: skip
    assert all(set(forms) >= {"or_fail", "abort"} and min(forms.values()) > 0 for forms in figures.values())
    assert [name for name, forms in figures.items() if "python" in forms] == [
        "create_wait (suspending)", "save_checkpoint", "lease (a resume)",
    ]  # fmt: skip
    assert len(proc.stdout.splitlines()) == 7 and proc.stdout.count("or_fail/abort") == 6, proc.stdout
    bad = subprocess.run([*cmd[:3], "--n", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "at least 1" in bad.stderr, bad.stderr


def test_processes_benchmark_shares_the_runs_among_processes(tmp_path: Path) -> None:
    """``bench.processes``: one and two processes on one SQLite file, each count's figures (a
    positive rate, one rate a process, CPU a run), the same in its JSON file and on stdout; every
    run completed once (the benchmark checks it itself and fails otherwise); bad counts refused."""
    out = tmp_path / "processes.json"
    cmd = [sys.executable, "-m", "bench.processes", "--n", "60", "--repeat", "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())["processes"]
    assert list(figures) == ["1", "2"]
    for count, f in figures.items():
        assert f["runs_per_s"] > 0 and len(f["samples"]) == 1 and f["cpu_ms_per_run"] > 0, f
        assert len(f["each_runs_per_s"]) == int(count) and min(f["each_runs_per_s"]) > 0, f
        assert f"{f['runs_per_s']:,} runs/s" in proc.stdout, proc.stdout
    for bad in (["--processes", "0"], ["--n", "1", "--processes", "2"], ["--repeat", "0"]):
        refused = subprocess.run([*cmd[:3], *bad], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "at least" in refused.stderr, refused.stderr


def test_streams_benchmark_measures_each_k_with_both_engines(tmp_path: Path) -> None:
    """``bench.streams``: K streams each taking its runs one at a time, with the waves and with
    the writer thread alone: every phase's figures, and the commits split by who made them."""
    out = tmp_path / "streams.json"
    cmd = [sys.executable, "-m", "bench.streams", "--n", "40", "--streams", "1", "4", "--repeat", "1",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    streams = json.loads(out.read_text())["streams"]
    assert set(streams) == {"1", "4"} and all(set(e) == {"waves", "thread"} for e in streams.values())
    for k, engines in streams.items():
        for engine, phases in engines.items():
            assert set(phases) == {"A", "B", "C"}
            for f in phases.values():
                assert f["runs_per_s"] > 0 and 0 < f["latency_ms_p50"] <= f["latency_ms_p99"], f
                # the writer thread's share is the rest of the commits: never below zero
                assert f["thread_commits_per_run"] >= 0, f
                if engine == "thread":  # no waves without them
                    assert f["wave_commits_per_run"] == 0, f
                elif k == "4":  # four callers at once share their commits in waves
                    assert f["wave_commits_per_run"] > 0, f
            if k == "1":  # one at a time, every transition is a commit of its own, made inline (a
                # stray commit of the runtime's periodic work: up to 0.1 a run, as in the HITL test)
                got = [phases[p]["commits_per_run"] for p in "ABC"]
                assert all(abs(a - b) <= 0.1 for a, b in zip(got, [4, 3, 5], strict=True)), phases
                assert all(p["commits_per_run"] - p["inline_commits_per_run"] <= 0.1 for p in phases.values())
            elif engine == "thread":  # without waves, callers at once hand their writes to the thread
                assert all(p["thread_commits_per_run"] > 0 for p in phases.values()), phases
    assert "K=4" in proc.stdout and "the writer thread only (no waves)" in proc.stdout, proc.stdout
    for bad in (["--streams", "0"], ["--n", "3", "--streams", "4"], ["--engines", "fast"]):
        wrong = subprocess.run([*cmd[:3], *bad], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert wrong.returncode == 2, wrong.stderr


def test_frames_benchmark_counts_each_transitions_pages(tmp_path: Path) -> None:
    """``bench.wal_frames``: each transition's commit wrote at least one frame (a checkpoint's save
    two: its row and the event), in its output and JSON; bad counts refused."""
    out = tmp_path / "frames.json"
    cmd = [sys.executable, "-m", "bench.wal_frames", "--n", "60", "--warm", "10", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    frames = json.loads(out.read_text())["frames"]
    assert len(frames) == 7 and all(f["mean"] >= 1 for f in frames.values()), frames
    assert frames["a checkpoint's save"]["median"] >= 2
    assert len(proc.stdout.splitlines()) == 8, proc.stdout
    bad = subprocess.run(
        [*cmd[:3], "--n", "5", "--warm", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "more than --warm" in bad.stderr, bad.stderr


def test_instructions_benchmark_counts_each_phase_under_callgrind(tmp_path: Path) -> None:
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    assert not missing, f"valgrind is not installed (scripts/system-deps.sh installs it): {missing}"
    out = tmp_path / "instructions.json"
    cmd = [sys.executable, "-m", "bench.instructions", "--n", "5", "--mode", "all_at_once", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "phase A start+suspend" in proc.stdout and "instructions/run" in proc.stdout, proc.stdout
    result = json.loads(out.read_text())
    phases = result["modes"]["all_at_once"]["instructions_per_run"]
    assert set(phases) == {"A", "B", "C"}
    # A run is hundreds of thousands of instructions at least (a commit, a step, JSON): a count of
    # a few would mean the dumps did not cover the phase.
    assert all(count > 100_000 for count in phases.values()), phases
    wrong = subprocess.run(
        [*cmd[:3], "--without", "nothing"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr, wrong.stderr
    # Without valgrind: one line naming it, exit 2.
    bare = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    refused = subprocess.run(cmd[:3], cwd=ROOT, capture_output=True, text=True, timeout=60, env=bare)
    assert refused.returncode == 2 and "valgrind" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_parked_benchmark_small_runs_every_part(tmp_path: Path) -> None:
    out = tmp_path / "parked.json"
    cmd = [sys.executable, "-m", "bench.parked", "--n", "300", "--probes", "20", "--blocks", "2",
           "--deadlines", "20", "--deadline-margin", "2",
           "--dir", str(tmp_path / "db"), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["parking"]["big"]["runs"] == 300
    assert result["parking"]["big"]["bytes_per_waiting_run"] > 0
    assert result["resume_ms"]["big"]["count"] == result["resume_ms"]["small"]["count"] == 20
    assert result["deadlines"]["lateness_s"]["count"] == 20
    assert result["restart"]["big"]["status"] == "completed"
    assert result["inbox"]["big"]["first_page_items"] == 50
    assert result["inbox"]["big"]["counts"]["step_hook"] > 0
    for line in ("bytes per waiting run", "deadlines falling due together", "restart on", "inbox on"):
        assert line in proc.stdout, proc.stdout


def test_parked_benchmark_small_runs_on_postgresql(tmp_path: Path) -> None:
    """The same on a PostgreSQL server: two new databases, sized by their tables, dropped after."""
    parts = urlsplit(PG_ADMIN_URL)
    require_service("PostgreSQL", parts.hostname or "127.0.0.1", parts.port or 5432)
    out = tmp_path / "parked-pg.json"
    cmd = [sys.executable, "-m", "bench.parked", "--store", "postgresql", "--url", PG_ADMIN_URL,
           "--n", "300", "--probes", "20", "--blocks", "2", "--deadlines", "20", "--deadline-margin", "2",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["config"]["store"] == "postgresql" and result["config"]["postgresql"]
    assert result["parking"]["big"]["runs"] == 300
    assert result["parking"]["big"]["bytes_per_waiting_run"] > 0
    assert result["resume_ms"]["big"]["count"] == 20 and result["deadlines"]["lateness_s"]["count"] == 20
    assert result["restart"]["big"]["status"] == "completed"
    assert result["inbox"]["big"]["counts"]["step_hook"] > 0
    assert "PostgreSQL" in proc.stdout and "synchronous_commit=on" in proc.stdout, proc.stdout
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:  # its databases are gone
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'pwbench_parked%'").fetchall()
    assert left == [], left


def test_idle_benchmark_watches_both_faces(tmp_path: Path) -> None:
    """``bench.idle`` on SQLite and PostgreSQL: each figure is there; the local runtime polled
    (at its 50 ms on SQLite, about once a second on PostgreSQL, whose notifications wake it)."""
    parts = urlsplit(PG_ADMIN_URL)
    require_service("PostgreSQL", parts.hostname or "127.0.0.1", parts.port or 5432)
    for store in ("sqlite", "postgresql"):
        out = tmp_path / f"idle-{store}.json"
        cmd = [sys.executable, "-m", "bench.idle", "--seconds", "2", "--store", store, "--url", PG_ADMIN_URL,
               "--out", str(out)]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "local runtime (poll_interval 0.05 s)" in proc.stdout, proc.stdout
        result = json.loads(out.read_text())
        local, server = result["local_runtime"], result["graph_server"]
        if store == "sqlite":
            assert 5 <= local["polls_per_s"] <= 21 and local["postgresql_cpu_percent"] is None, local
        else:
            assert 0 < local["polls_per_s"] <= 2 and local["postgresql_cpu_percent"] is not None, local
        assert server["server_cpu_percent"] >= 0 and server["worker_cpu_percent"] >= 0, server
        # An idle server's sweep (4 a second) and webhook pass (2) are a read each: what is left
        # is the worker's heartbeat and claims (it was 10 transactions a second).
        assert 0 <= server["writer_transactions_per_s"] < 4, server
        assert (server["postgresql_commits_per_s"] is None) == (store == "sqlite"), server


def test_escalations_benchmark_drops_each_escalation_once(tmp_path: Path) -> None:
    """``bench.escalations`` with 300 approvals decided before their escalation: the first sweep
    after their time drops all of them and reaps (two transactions), the next ones write nothing
    (the code before wrote two transactions every sweep)."""
    out = tmp_path / "escalations.json"
    cmd = [sys.executable, "-m", "bench.escalations", "--n", "300", "--sweeps", "3", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert (result["decided_approvals"], result["sweeps"], result["writer_transactions"]) == (300, 3, 2), (
        result
    )
    assert result["first_sweep_ms"] > 0 and result["later_sweeps_median_ms"] > 0, result
    assert "300 approvals decided before their escalation, on sqlite" in proc.stdout, proc.stdout


def test_console_search_benchmark_reads_a_window_at_a_time(tmp_path: Path) -> None:
    """``bench.console_search`` with a window of 100 over 300 parked runs: a term that matches
    nothing stops at the window on each read, and the oldest run is reached by its id through
    the pages' cursors (100, 100, 100)."""
    out = tmp_path / "search.json"
    cmd = [sys.executable, "-m", "bench.console_search", "--n", "300", "--window", "100", "--repeat", "1",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["search_window"] == 100
    none, every, nothing = (result["searches"][k] for k in ("none", "every_run", "no_run"))
    assert none["runs_shown"] == 50 and not none["runs_page_stopped"] and not none["run_counts_partial"]
    assert every["runs_shown"] == every["inbox_shown"] == 50 and not every["runs_page_stopped"]
    assert every["run_counts"]["suspended"] == 100 and every["run_counts_partial"]
    assert nothing["runs_shown"] == nothing["inbox_shown"] == 0
    assert nothing["runs_page_stopped"] and nothing["inbox_page_stopped"] and nothing["run_counts_partial"]
    assert result["walk_to_the_oldest_run_by_id"] == {
        **result["walk_to_the_oldest_run_by_id"],
        "pages": 3,
        "found": True,
    }
    assert "the oldest run by its id: 3 pages" in proc.stdout, proc.stdout
