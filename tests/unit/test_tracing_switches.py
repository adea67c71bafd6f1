"""Tracing's switches and its refusals: off unless a tracer provider is installed (then a run
stores no trace context and nothing is traced), on from the standard ``OTEL_*`` variables with
the SDK, a clear error for an exporter that is not installed, and stored or received carriers
that are not trace contexts ignored. The spans themselves are checked across processes in
tests/integration/test_tracing_across_processes.py and tests/acceptance/atfgraph/test_atfg_tracing.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import pyworkflow
from pyworkflow import step, workflow
from pyworkflow.store import open_store, tracing

ROOT = Path(__file__).resolve().parents[2]


@step
async def hello(name: str) -> str:
    return f"hello {name}"


@workflow
async def greet(name: str) -> str:
    return await hello(name)


_failures: list[int] = []


@step(max_retries=1, retry_delay=0.01)
async def flaky() -> str:
    if not _failures:
        _failures.append(1)
        raise ConnectionError("the first call fails")
    return "ok"


@workflow
async def retried() -> str:
    return await flaky()


async def test_without_a_tracer_provider_a_run_is_not_traced_and_stores_no_context(engine: str) -> None:
    assert tracing.enabled() is False
    run_id = await pyworkflow.start(greet, "ada")
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.result == "hello ada"
    store = open_store(engine)
    try:
        record = await store.get_run(run_id)
        assert record is not None
        assert set(orjson.loads(record.input)) == {"args", "kwargs", "module"}
    finally:
        store.close()


def _program(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests" / "unit"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


RUN_ONE = """
import asyncio, pyworkflow, test_tracing_switches
from pyworkflow.store import tracing
async def main():
    pyworkflow.configure(storage="sqlite:///{db}")
    print("enabled", tracing.enabled(), flush=True)
    run_id = await pyworkflow.start(test_tracing_switches.{workflow}, *{args})
    await pyworkflow.wait_for_run(run_id, 10)
    await pyworkflow.shutdown()
asyncio.run(main())
"""


def test_otel_traces_exporter_turns_tracing_on_with_the_sdk(tmp_path: Path) -> None:
    done = _program(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "refund-desk"},
        RUN_ONE.format(db=tmp_path / "on.db", workflow="greet", args=("ada",)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("enabled True")
    spans = _console_spans(done.stdout)
    assert sorted(s["name"] for s in spans) == ["pyworkflow.start", "pyworkflow.step", "pyworkflow.turn"]
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"refund-desk"}
    assert len({s["context"]["trace_id"] for s in spans}) == 1


def _console_spans(stdout: str) -> list[dict[str, Any]]:
    """The console exporter's spans (one JSON document each) after the program's first line."""
    text = stdout.split("\n", 1)[1]
    return list(json.loads("[" + text.replace("}\n{", "},{") + "]"))


def test_a_step_that_failed_and_is_retried_shows_the_error_type_never_its_message(tmp_path: Path) -> None:
    done = _program(
        {"OTEL_TRACES_EXPORTER": "console"},
        RUN_ONE.format(db=tmp_path / "retry.db", workflow="retried", args=()),
    )
    assert done.returncode == 0, done.stderr
    steps = [s for s in _console_spans(done.stdout) if s["name"] == "pyworkflow.step"]
    outcomes = [(s["attributes"]["pyworkflow.status"], s["attributes"].get("error.type")) for s in steps]
    assert outcomes == [("retrying", "ConnectionError"), ("completed", None)]
    assert "the first call fails" not in done.stdout


@pytest.mark.parametrize("value", ["", "none"])
def test_no_exporter_named_means_no_tracing(tmp_path: Path, value: str) -> None:
    done = _program(
        {"OTEL_TRACES_EXPORTER": value},
        RUN_ONE.format(db=tmp_path / "off.db", workflow="greet", args=("ada",)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "enabled False\n"


def test_an_exporter_that_is_not_installed_is_refused_by_name(tmp_path: Path) -> None:
    done = _program(
        {"OTEL_TRACES_EXPORTER": "zipkin_json"},
        RUN_ONE.format(db=tmp_path / "bad.db", workflow="greet", args=("ada",)),
    )
    assert done.returncode != 0
    assert "no span exporter 'zipkin_json' is installed (OTEL_TRACES_EXPORTER)" in done.stderr


@pytest.mark.parametrize(
    "stored",
    [None, "", "not json", "[1, 2]", '{"traceparent": 7}', '{"traceparent": "00-zz-yy-01"}',
     '{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}'],
)  # fmt: skip
def test_a_stored_carrier_that_is_not_a_trace_context_names_no_parent(stored: str | None) -> None:
    assert tracing.context_of(tracing.decode_carrier(stored)) is None
    assert tracing.link_to(tracing.decode_carrier(stored)) == []


def test_a_carrier_round_trips_through_its_column_and_keeps_only_w3c_keys() -> None:
    carrier = {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": "vendor=1",
        "authorization": "Bearer secret",
    }
    text = tracing.encode_carrier(carrier)
    assert text is not None and "secret" not in text
    assert tracing.decode_carrier(text) == {k: carrier[k] for k in ("traceparent", "tracestate")}
    assert tracing.context_of(tracing.decode_carrier(text)) is not None
    assert tracing.encode_carrier({}) is None


def test_the_graph_server_refuses_an_exporter_that_is_not_installed_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "atfgraph.server", "--port", "0", "--db", str(tmp_path / "graph.db")],
        env={**os.environ, "OTEL_TRACES_EXPORTER": "zipkin_json", "ATFGRAPH_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "atfgraph: no span exporter 'zipkin_json' is installed (OTEL_TRACES_EXPORTER); "
        "for OTLP: pip install 'pyworkflow-atfgraph[tracing]'\n"
    )
    assert not (tmp_path / "graph.db").exists()  # refused before anything was opened
