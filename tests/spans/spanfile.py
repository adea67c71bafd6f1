"""Collecting the spans of the processes a tracing test starts.

Each process installs the OpenTelemetry SDK's tracer provider (``sitecustomize``, when
``TEST_SPAN_DIR`` is set). ``file`` mode: a ``SimpleSpanProcessor`` writes each span as it ends to
``<dir>/<pid>.jsonl`` (one line, flushed: a process killed with SIGKILL keeps what it exported).
``memory`` mode: the SDK's ``InMemorySpanExporter`` holds them, and the process writes them out
with :func:`dump` when its work is done. The test reads every process's spans with :func:`read`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_memory: InMemorySpanExporter | None = None
_dir: Path | None = None


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    assert ctx is not None
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "links": [format(link.context.span_id, "016x") for link in span.links],
        "attributes": dict(span.attributes or {}),
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "start": span.start_time,
        "end": span.end_time,
        "pid": os.getpid(),
    }


class FileSpanExporter(SpanExporter):
    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as f:
            for span in spans:
                f.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def install(directory: str, mode: str = "file") -> None:
    global _memory, _dir
    _dir = Path(directory)
    provider = TracerProvider()
    if mode == "memory":
        _memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(_memory))
    else:
        provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(_dir / f"{os.getpid()}.jsonl")))
    trace.set_tracer_provider(provider)


def dump() -> None:
    """Write what the in-memory exporter holds (``memory`` mode) to this process's file."""
    assert _memory is not None and _dir is not None, "TEST_SPAN_MODE=memory was not set"
    with open(_dir / f"{os.getpid()}.jsonl", "a") as f:
        for span in _memory.get_finished_spans():
            f.write(json.dumps(as_dict(span)) + "\n")


def read(directory: Path) -> list[dict[str, Any]]:
    """Every span the processes wrote to ``directory``, in the order they ended."""
    spans = [json.loads(line) for p in directory.glob("*.jsonl") for line in p.read_text().splitlines()]
    return sorted(spans, key=lambda s: s["end"])


def named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]
