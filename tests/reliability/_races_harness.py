"""Races between real processes, and the invariants each race is checked against. Small on
purpose: the crash suite's oracle (tests/reliability/oracle.py) states the same rules for crash
trials, and the two are meant to merge.

:func:`race` starts one ``_racer.py`` process per spec, waits until every one is ready, says go
to all of them at once and returns each one's outcomes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def scale() -> int:
    """``RELIABILITY_SCALE``: how many times bigger than in ``make test`` (default 1)."""
    raw = os.environ.get("RELIABILITY_SCALE", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"RELIABILITY_SCALE must be an int >= 1, not {raw!r}")
    return int(raw)


def race(specs: list[dict[str, Any]], workdir: Path, timeout: float = 120) -> list[list[Any]]:
    """Run the specs in as many processes, released together; each one's outcomes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    procs: list[subprocess.Popen[str]] = []
    try:
        for n, spec in enumerate(specs):
            path = workdir / f"racer-{os.getpid()}-{n}.json"
            path.write_text(json.dumps(spec))
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(HERE / "_racer.py"), str(path)],
                    cwd=REPO,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:  # every racer connected and waiting
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise AssertionError(f"a racer did not start: {line!r} {proc.communicate(timeout=10)[1]}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        return outcomes
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def flat(outcomes: list[list[Any]]) -> list[Any]:
    return [item for one in outcomes for item in one]


# -- invariants -----------------------------------------------------------------------------------


def assert_no_exceptions(items: list[Any]) -> None:
    broken = [item for item in items if "exception" in item]
    assert not broken, broken[:3]


def assert_one_decision(answers: list[dict[str, Any]], winner: dict[str, Any]) -> dict[str, int]:
    """Racing decisions on one approval, each with its own ``response`` (``{"racer": i}``):
    exactly one is the recorded one; a racer with the winner's decision sees the winner's record
    (the same decision again is idempotent), every other is ``409 approval_decided``; no other
    status, no 5xx. Returns the counts of the outcomes."""
    assert_no_exceptions(answers)
    statuses = Counter(a["status"] for a in answers)
    assert set(statuses) <= {200, 409}, statuses
    accepted = [a for a in answers if a["status"] == 200 and a["body"]["response"] == a["racer"]]
    assert len(accepted) == 1, accepted
    for a in answers:
        if a["decision"] == winner["status"]:
            assert a["status"] == 200, a
            assert a["body"]["response"] == winner["response"], a
        else:
            assert a["status"] == 409 and a["body"]["error"]["code"] == "approval_decided", a
            assert set(a["body"]["error"]) >= {"code", "message"}, a
    return {"accepted": len(accepted), "idempotent": statuses[200] - 1, "conflicts": statuses[409]}


def assert_one_resume(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Racing ``resume_hook`` calls on one token: one succeeds, every other is refused with
    ``HookAlreadyReceivedError``. Returns the winner."""
    assert_no_exceptions(results)
    won = [r for r in results if r["ok"]]
    assert len(won) == 1, won
    refused = Counter(r["error"] for r in results if not r["ok"])
    assert refused == Counter({"HookAlreadyReceivedError": len(results) - 1}), refused
    return dict(won[0])


def assert_no_lost_update(writers: list[dict[str, Any]], final: dict[str, Any], expected: int) -> int:
    """Compare-and-set writers that each made their share of increments: the final count is the
    number of writes (none lost), every write got its own revision, the revisions are exactly
    1..n (strictly increasing, no gap, no repeat), each writer saw its own revisions strictly
    increase, and the stored revision is the last one. Returns how many conflicts were retried."""
    assert_no_exceptions(writers)
    writes = [w for one in writers for w in one["writes"]]
    assert len(writes) == expected, len(writes)
    assert final["value"]["count"] == expected, final
    assert final["revision"] == expected, final
    revisions = sorted(w["revision"] for w in writes)
    assert revisions == list(range(1, expected + 1)), revisions
    assert all(w["count"] == w["revision"] for w in writes), writes  # each saw the one before it
    for one in writers:
        mine = [w["revision"] for w in one["writes"]]
        assert mine == sorted(set(mine)), mine
    return sum(int(one["conflicts"]) for one in writers)
