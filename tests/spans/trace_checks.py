"""What every traced run of ``traced_flow`` shows, whichever runtime ran it."""

from __future__ import annotations

from typing import Any

import spanfile


def check_one_trace(spans: list[dict[str, Any]], run_id: str) -> dict[str, Any]:
    """The checks every traced run passes; returns its start span."""
    (start,) = spanfile.named(spans, "pyworkflow.start")
    assert start["attributes"]["pyworkflow.run_id"] == run_id
    assert start["attributes"]["pyworkflow.workflow"] == "traced_flow:traced"
    assert {s["trace_id"] for s in spans} == {start["trace_id"]}, "the run is one trace"
    turns = spanfile.named(spans, "pyworkflow.turn")
    assert [t["attributes"]["pyworkflow.status"] for t in turns] == ["suspended", "completed"]
    assert all(t["parent_id"] == start["span_id"] for t in turns), "turns continue the stored context"
    assert all(t["attributes"]["pyworkflow.run_id"] == run_id for t in turns)
    assert [t["attributes"]["pyworkflow.resumed"] for t in turns] == [False, True]
    assert turns[0]["pid"] != turns[1]["pid"], "the resumed turn ran in another process"
    steps = spanfile.named(spans, "pyworkflow.step")
    by_turn = {t["span_id"]: [] for t in turns}
    for s in steps:
        by_turn[s["parent_id"]].append(
            (s["attributes"]["pyworkflow.step"], s["attributes"]["pyworkflow.status"])
        )
    first, second = (by_turn[t["span_id"]] for t in turns)
    assert first == [("prepare#1", "completed"), ("review#1", "suspended")]
    # prepare is replayed (no span); review runs again and finds the decision
    assert second == [("review#1", "completed"), ("publish#1", "completed")]
    (wait,) = spanfile.named(spans, "pyworkflow.wait")
    assert wait["parent_id"] == start["span_id"]
    assert wait["attributes"]["pyworkflow.wait.kind"] == "step_hook"
    assert wait["attributes"]["pyworkflow.wait.name"] == "review"
    assert wait["attributes"]["pyworkflow.status"] == "received"
    (decision,) = spanfile.named(spans, "pyworkflow.decision")
    assert decision["parent_id"] == start["span_id"]
    assert decision["attributes"]["pyworkflow.wait_id"] == wait["attributes"]["pyworkflow.wait_id"]
    assert decision["pid"] not in (turns[0]["pid"], turns[1]["pid"]), "decided from another process"
    assert wait["start"] < decision["end"] <= wait["end"] + 10**9, "the wait lasts until its decision"
    return start
