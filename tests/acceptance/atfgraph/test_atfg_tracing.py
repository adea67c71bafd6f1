"""Traces of a traverser across the graph server and two workers (OpenTelemetry SDK in every
process, see tests/spans/): a submission carrying a caller's ``traceparent``, a first attempt that
pauses on an approval, its worker SIGKILLed while the traverser waits, the decision from another
process (``atfg approvals decide``), and the continuation on a second worker. All of it is the
caller's trace; the attempts are children of the submission's stored context."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from atfg_harness import REPO, ServerProcess, WorkerProcess, wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from test_atfg_cli_review import atfg, ok

from doc_snippets import code_blocks, shell_lines

SPANS = Path(__file__).resolve().parents[2] / "spans"
sys.path.insert(0, str(SPANS))

import spanfile  # noqa: E402

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def traced(tmp_path: Path) -> Any:
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    server = ServerProcess(tmp_path)
    server.env["PYTHONPATH"] = os.pathsep.join([str(SPANS), server.env["PYTHONPATH"]])
    server.env["TEST_SPAN_DIR"] = str(spans_dir)
    server.start()
    started: list[WorkerProcess] = []

    def spawn(module: str = "atfg_agents:app") -> WorkerProcess:
        started.append(WorkerProcess(server, module).start())
        return started[-1]

    yield server, spans_dir, spawn
    for worker in started:
        worker.kill()
    server.close()


def test_a_traverser_paused_decided_and_continued_elsewhere_is_the_callers_trace(traced: Any) -> None:
    server, spans_dir, spawn = traced
    first = spawn()
    response = httpx.post(
        server.url + "/api/v2/traversers",
        json={"target": "tester.pausing", "input": {"key": "trace-me"}},
        headers={**server.headers(), "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
        timeout=10,
    )
    assert response.status_code in (200, 201), response.text
    ident = response.json()["id"]
    wait_until(lambda: server.get(f"/traversers/{ident}")["status"] == "waiting", 30, "never paused")

    def attempts() -> list[dict[str, Any]]:
        return spanfile.named(spanfile.read(spans_dir), "atfgraph.attempt")

    # The pause's answer may wait up to a second for the worker's next task; the paused attempt's
    # span is exported when that answer comes, and ends when the pause went out.
    wait_until(lambda: len(attempts()) == 1, 20, "the paused attempt's span was never exported")
    first.kill()  # it holds nothing while the traverser waits
    (approval,) = server.get("/approvals", status="pending")["items"]
    ok(atfg(server, "approvals", "decide", approval["id"], "--approve"))
    second = spawn()
    wait_until(lambda: server.get(f"/traversers/{ident}")["status"] == "succeeded", 30, "never continued")
    wait_until(lambda: len(attempts()) == 2, 20, "the second attempt's span was never exported")
    spans = spanfile.read(spans_dir)
    assert {s["trace_id"] for s in spans if s["name"].startswith("atfgraph.")} == {CALLER_TRACE}
    http = [s for s in spans if s["name"] == "HTTP POST /api/v2/traversers"]
    assert len(http) == 1 and http[0]["parent_id"] == CALLER_SPAN and http[0]["kind"] == "SERVER"
    assert http[0]["attributes"]["http.response.status_code"] == response.status_code
    (submit,) = spanfile.named(spans, "atfgraph.submit")
    assert submit["parent_id"] == http[0]["span_id"]
    assert submit["attributes"] == {"atfgraph.target": "tester.pausing", "pyworkflow.run_id": ident}
    paused, continued = attempts()
    assert paused["parent_id"] == continued["parent_id"] == submit["span_id"]
    assert paused["pid"] == first.proc.pid and continued["pid"] == second.proc.pid
    assert [paused["attributes"]["pyworkflow.status"], continued["attributes"]["pyworkflow.status"]] == [
        "suspended",
        "succeeded",
    ]
    assert [paused["attributes"]["pyworkflow.attempt"], continued["attributes"]["pyworkflow.attempt"]] == [
        1,
        2,
    ]
    (asked,) = spanfile.named(spans, "atfgraph.approval.request")
    assert asked["parent_id"] == paused["span_id"]
    assert asked["attributes"]["atfgraph.operation_key"] == "trace-me"
    assert asked["attributes"]["pyworkflow.status"] == "suspended"
    # the worker's calls carry its attempt's context: the server's spans of them join the trace
    (asked_http,) = [s for s in spans if s["name"] == "HTTP POST /api/v2/approvals"]
    assert asked_http["parent_id"] == asked["span_id"] and asked_http["pid"] == server.proc.pid
    # the paused attempt ends when its pause went out, not after its answer's wait for work
    assert paused["end"] <= asked_http["end"], (paused, asked_http)
    reports = [s for s in spans if s["name"].startswith("HTTP POST /api/v2/traversers/")]
    assert [r["parent_id"] for r in reports] == [continued["span_id"]], [r["name"] for r in reports]
    (wait,) = spanfile.named(spans, "atfgraph.approval")
    (decision,) = spanfile.named(spans, "atfgraph.decision")
    for span in (wait, decision):
        assert span["parent_id"] == submit["span_id"]
        assert span["attributes"]["pyworkflow.wait_id"] == approval["id"]
        assert span["attributes"]["pyworkflow.status"] == "approved"
    # the paused attempt ends as its pause goes out; the server's wait begins with the approval
    assert paused["start"] < wait["start"] and wait["end"] <= continued["start"]
    # the decision came over HTTP without traceparent: no HTTP span, nothing to link to
    assert decision["links"] == []
    # never a credential in an attribute
    text = repr([s["attributes"] for s in spans])
    assert server.token() not in text and server.token("worker") not in text and "atfg_" not in text


def test_a_child_step_on_another_node_joins_its_parents_trace(traced: Any) -> None:
    server, spans_dir, spawn = traced
    spawn()
    spawn("atfg_agents:helper_app")
    response = httpx.post(
        server.url + "/api/v2/traversers",
        json={"target": "tester.remote_child", "input": {"x": 21}},
        headers={**server.headers(), "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
        timeout=10,
    )
    assert response.status_code in (200, 201), response.text
    ident = response.json()["id"]
    wait_until(lambda: server.get(f"/traversers/{ident}")["status"] == "waiting", 30, "never paused")

    def attempts() -> list[dict[str, Any]]:
        return spanfile.named(spanfile.read(spans_dir), "atfgraph.attempt")

    wait_until(lambda: len(attempts()) == 2, 20, "the attempts' spans were never exported")
    spans = spanfile.read(spans_dir)
    by_id = {s["span_id"]: s for s in spans}

    def ancestors(span: dict[str, Any]) -> list[str]:
        names = []
        while span["parent_id"] in by_id:
            span = by_id[span["parent_id"]]
            names.append(span["name"])
        return names

    (child,) = [a for a in attempts() if a["attributes"]["atfgraph.target"] == "helper.double"]
    assert child["trace_id"] == CALLER_TRACE
    assert child["attributes"]["pyworkflow.status"] == "succeeded"
    # the child's attempt <- its submission <- the parent's HTTP call <- the step <- the parent's
    # attempt <- the parent's submission <- the caller's request
    assert ancestors(child) == [
        "atfgraph.submit",
        "HTTP POST /api/v2/traversers",
        "atfgraph.step",
        "atfgraph.attempt",
        "atfgraph.submit",
        "HTTP POST /api/v2/traversers",
    ]
    (step,) = spanfile.named(spans, "atfgraph.step")
    assert step["attributes"]["atfgraph.target"] == "helper.double"
    assert step["attributes"]["pyworkflow.status"] == "succeeded"


#: Not trace contexts: ignored (a new trace starts at the submission), never an error.
NOT_TRACEPARENTS = [
    "garbage",
    "00-" + "0" * 32 + "-" + "0" * 16 + "-01",
    "ff-" + CALLER_TRACE + "-" + CALLER_SPAN + "-01x",
    "00-" + CALLER_TRACE + "-" + CALLER_SPAN + "-01" + "," * 5000,
]


def test_a_traceparent_that_is_not_one_is_ignored(traced: Any) -> None:
    server, spans_dir, _ = traced
    for header in NOT_TRACEPARENTS:
        response = httpx.post(
            server.url + "/api/v2/traversers",
            json={"target": "tester.quick_review"},
            headers={**server.headers(), "traceparent": header, "tracestate": "=,=;;" * 100},
            timeout=10,
        )
        assert response.status_code in (200, 201), response.text
    spans = spanfile.read(spans_dir)
    assert not [s for s in spans if s["name"].startswith("HTTP ")]
    submits = spanfile.named(spans, "atfgraph.submit")
    assert len(submits) == len(NOT_TRACEPARENTS)
    assert all(s["parent_id"] is None and s["trace_id"] != CALLER_TRACE for s in submits)


# -- docs/operations.md, "Tracing": its set-up runs as the page shows it ---------------------------


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that keeps what it receives (``POST /v1/traces``, protobuf)."""

    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            self.received.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_the_operations_pages_otlp_set_up_sends_the_servers_spans_to_a_collector(tmp_path: Path) -> None:
    (block,) = code_blocks("docs/operations.md", "Set-up with an OTLP collector", "sh")
    install, *exports, start = shell_lines(block)
    assert install == "pip install 'pyworkflow-atfgraph[tracing]'"
    assert (
        "tracing" in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    assert start == "python -m atfgraph.server --port 7878"  # the harness adds --db and its own port
    env = dict(line.removeprefix("export ").split("=", 1) for line in exports)
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{collector.server_address[1]}"
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"  # export within 0.1 s instead of 5 s
    server = ServerProcess(tmp_path)
    server.env.update(env)
    server.start()
    try:
        response = httpx.post(
            server.url + "/api/v2/traversers",
            json={"target": "tester.quick_review"},
            headers={**server.headers(), "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
            timeout=10,
        )
        assert response.status_code in (200, 201), response.text

        def exported() -> list[tuple[str, str, str]]:
            return [
                (attr.value.string_value, span.name, span.trace_id.hex())
                for request in _Collector.received
                for resource_spans in request.resource_spans
                for attr in resource_spans.resource.attributes
                if attr.key == "service.name"
                for scope in resource_spans.scope_spans
                for span in scope.spans
            ]

        wait_until(lambda: ("refund-desk", "atfgraph.submit", CALLER_TRACE) in exported(), 20, "not exported")
    finally:
        server.close()
        collector.shutdown()
        collector.server_close()
