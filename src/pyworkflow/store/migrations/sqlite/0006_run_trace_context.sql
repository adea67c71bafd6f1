-- The trace context a traverser keeps (OpenTelemetry, W3C Trace Context as a small JSON object:
-- {"traceparent": ..., "tracestate": ...}), written with the run when the graph server traces,
-- so that an attempt claimed hours later by another worker continues the same trace
-- (pyworkflow.store.tracing). NULL for an untraced run; a pyworkflow run keeps its context in
-- its input document instead (no column read on its turns).
ALTER TABLE runs ADD COLUMN trace_context TEXT;
