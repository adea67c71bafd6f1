"""The answers of HTTP API v2 as pydantic models: the OpenAPI document's response schemas.

Routes build their answers as dicts of stored bytes (orjson fragments, see ``_routes.ok``) and
return them as ``Response`` objects, so FastAPI documents these models without validating or
re-serializing anything: the hot routes cost what they did. That the answers match the models is
checked against a live server (tests/acceptance/atfgraph/test_atfg_api_contract.py, Schemathesis'
response-schema conformance, and a test that validates real answers with these models).

Timestamps are Unix seconds (UTC) as JSON numbers, each with the same instant in ISO 8601 UTC
beside it (``created_at`` and ``created_at_iso``: ``_stamps``; docs/atfgraph.md, "Timestamps").
A JSON value a user stored (an input, a result, a checkpoint, a prompt) is any JSON value.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from .._models import ApprovalStatus, TraverserStatus

#: Unix seconds, UTC, as a JSON number (fractions of a second kept).
Timestamp = Annotated[float, Field(description="Unix seconds (UTC)")]
#: The same instant in ISO 8601 UTC (``_stamps``), beside each timestamp.
Iso = Annotated[str | None, Field(description="the instant beside it in ISO 8601 UTC (null when it is)")]
#: A list's next page: pass it as ``after`` (null: this page is the last).
Cursor = Annotated[
    str | None, Field(description="the opaque cursor of the next page (pass it as `after`); null: no more")
]


class _Model(BaseModel):
    """Answers may gain fields; a client ignores those it does not know."""


# -- errors ---------------------------------------------------------------------------------


class ErrorDetail(_Model):
    code: str = Field(description="stable, documented in docs/atfgraph.md (Errors)")
    message: str


class ErrorBody(_Model):
    """The one error shape of every 4xx and 5xx answer."""

    error: ErrorDetail


# -- traversers -----------------------------------------------------------------------------


class Traverser(_Model):
    id: str
    target: str
    node_id: str | None
    version: str | None
    status: TraverserStatus
    attempt: int
    max_attempts: int
    input: Any = Field(description="the JSON object it was submitted with")
    result: Any = Field(description="the handler's result (null until it succeeds)")
    error: Any = Field(description="{code, message, ...} once it failed, else null")
    waiting_on: str | None = Field(description="the approval it waits on")
    created_at: Timestamp
    created_at_iso: Iso
    updated_at: Timestamp
    updated_at_iso: Iso
    finished_at: Timestamp | None
    finished_at_iso: Iso


class TraverserList(_Model):
    items: list[Traverser]
    next_cursor: Cursor = None


class Step(_Model):
    key: str
    seq: int | None
    target: str | None
    status: str = Field(description="succeeded or failed")
    attempt: int | None
    result: Any
    error: Any


class TraverserPath(_Model):
    traverser: Traverser
    steps: list[Step]


class Approval(_Model):
    id: str
    traverser_id: str
    operation_key: str
    status: ApprovalStatus
    prompt: Any
    checkpoint: Any
    decided_by: str | None
    response: Any
    created_at: Timestamp
    created_at_iso: Iso
    expires_at: Timestamp | None
    expires_at_iso: Iso
    decided_at: Timestamp | None
    decided_at_iso: Iso
    response_schema: Any = Field(description="the JSON Schema an approving response must match")
    assignment: dict[str, Any] | None = Field(
        None, description="who may decide it and its escalation (GET /approvals/{id} only, when assigned)"
    )


class CheckpointValue(_Model):
    value: Any
    revision: int


class Task(_Model):
    """A leased attempt: the traverser and what it resumes from."""

    traverser: Traverser
    epoch: int = Field(description="the lease's fence: every write of the attempt carries it")
    lease_expires_at: Timestamp
    lease_expires_at_iso: Iso
    checkpoints: dict[str, CheckpointValue]
    steps: list[Step]
    approvals: list[Approval]


class Reported(_Model):
    """A worker's report: the traverser's new status, and the next tasks when it asked (claim)."""

    status: TraverserStatus
    tasks: list[Task] = Field(default_factory=list)


class Checkpoint(_Model):
    traverser_id: str
    name: str
    value: Any
    revision: int


class CheckpointSaved(_Model):
    traverser_id: str
    name: str
    revision: int


# -- approvals ------------------------------------------------------------------------------


class ApprovalRequested(_Model):
    approval: Approval
    paused: bool
    tasks: list[Task]


class ApprovalList(_Model):
    items: list[Approval]
    next_cursor: Cursor = None


# -- workers ----------------------------------------------------------------------------------


class Worker(_Model):
    id: str
    node_id: str
    version: str
    capacity: int
    stats: Any = Field(description="the counters of its last heartbeat")
    registered_at: Timestamp
    registered_at_iso: Iso
    last_seen: Timestamp
    last_seen_iso: Iso


class WorkerRegistered(Worker):
    lease_seconds: float


class WorkerList(_Model):
    items: list[Worker]
    next_cursor: Cursor = None


class Claimed(_Model):
    tasks: list[Task]
    lease_seconds: float


class WorkerReleased(_Model):
    released_nodes: list[str]


class Heartbeat(_Model):
    lost: list[str] = Field(description="the traversers whose leases this worker no longer holds")


# -- memory and the server ------------------------------------------------------------------


class Memory(_Model):
    scope: str
    key: str
    value: Any
    revision: int


class MemorySaved(_Model):
    scope: str
    key: str
    revision: int


class Stats(_Model):
    requests: int
    commits: int
    groups: int
    statements: int


class Health(_Model):
    status: str


# -- tokens, audit, notifications -------------------------------------------------------------


class Token(_Model):
    id: str
    name: str
    role: Literal["owner", "administrator", "reviewer", "worker"]
    created_at: Timestamp
    created_at_iso: Iso
    created_by: str | None
    last_used_at: Timestamp | None
    last_used_at_iso: Iso
    revoked_at: Timestamp | None
    revoked_at_iso: Iso


class TokenCreated(_Model):
    token: str = Field(description="the bearer token: in this answer only")
    info: Token


class TokenList(_Model):
    items: list[Token]
    next_cursor: Cursor = None


class TokenRevoked(_Model):
    revoked: bool
    info: Token


class AuditRecord(_Model):
    id: int
    at: Timestamp
    at_iso: Iso
    principal: str | None
    role: str | None
    action: str
    target: str | None
    outcome: str = Field(description="allowed or denied")
    detail: Any


class AuditList(_Model):
    items: list[AuditRecord]
    next_cursor: Cursor = None


class Delivery(_Model):
    id: str
    wait_id: str
    endpoint: str
    status: Literal["pending", "delivered", "dead"]
    attempts: int
    next_at: Timestamp | None
    next_at_iso: Iso
    last_error: str | None
    created_at: Timestamp
    created_at_iso: Iso
    delivered_at: Timestamp | None
    delivered_at_iso: Iso


class DeliveryList(_Model):
    items: list[Delivery]
    next_cursor: Cursor = None


# -- pyworkflow hooks -------------------------------------------------------------------------


class Hook(_Model):
    id: str
    run_id: str
    kind: Literal["hook", "step_hook"]
    name: str | None
    step_key: str | None
    created_at: Timestamp
    created_at_iso: Iso
    expires_at: Timestamp | None
    expires_at_iso: Iso


class HookList(_Model):
    items: list[Hook]
    next_cursor: Cursor = None


class HookResumed(_Model):
    run_id: str
    hook_id: str
    hook_name: str | None
    status: str


# -- runs of either kind, and the inbox --------------------------------------------------------


class RunSummary(_Model):
    """A run as listings show it; a traverser (``kind: traverser``) adds the fields marked so."""

    id: str
    kind: Literal["workflow", "traverser"]
    workflow: str
    status: str = Field(description="the engine's status")
    error: Any
    created_at: Timestamp
    created_at_iso: Iso
    updated_at: Timestamp
    updated_at_iso: Iso
    finished_at: Timestamp | None
    finished_at_iso: Iso
    target: str | None = Field(None, description="traverser")
    node_id: str | None = Field(None, description="traverser")
    version: str | None = Field(None, description="traverser")
    attempt: int | None = Field(None, description="traverser")
    max_attempts: int | None = Field(None, description="traverser")
    waiting_on: str | None = Field(None, description="traverser")
    traverser_status: TraverserStatus | None = Field(None, description="traverser: the API's status")


class RunList(_Model):
    items: list[RunSummary]
    next_cursor: Cursor = None


class IdList(_Model):
    """The ids that start with a prefix (at most 10, in id order)."""

    items: list[str]
    more: bool = Field(description="other ids start with the prefix too")


class Run(RunSummary):
    input: Any
    result: Any


class RunStep(_Model):
    key: str
    status: str
    attempt: int | None
    seq: int | None
    target: str | None
    result: Any
    error: Any
    delivered: Any
    updated_at: Timestamp | None
    updated_at_iso: Iso


class RunWait(_Model):
    id: str
    kind: str
    key: str
    name: str | None
    step_key: str | None
    status: str
    created_at: Timestamp
    created_at_iso: Iso
    expires_at: Timestamp | None
    expires_at_iso: Iso
    resolved_at: Timestamp | None
    resolved_at_iso: Iso
    payload: Any
    prompt: Any = Field(None, description="approval")
    checkpoint: Any = Field(None, description="approval")
    decision: str | None = Field(None, description="approval")
    decided_by: str | None = Field(None, description="approval")
    payload_schema: Any = Field(None, description="hook and step hook")


class RunCheckpoint(_Model):
    scope: str
    name: str
    value: Any
    revision: int
    updated_at: Timestamp | None
    updated_at_iso: Iso


class RunEvent(_Model):
    seq: int
    at: Timestamp
    at_iso: Iso
    type: str
    key: str | None
    data: Any


class RunRecord(_Model):
    run: Run
    steps: list[RunStep]
    waits: list[RunWait]
    checkpoints: list[RunCheckpoint]
    events: list[RunEvent]
    truncated: list[str] = Field(description="the parts that had more than 1000 entries")


class InboxRun(_Model):
    id: str
    kind: Literal["workflow", "traverser"]
    workflow: str
    status: str
    target: str | None = None
    node_id: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    traverser_status: TraverserStatus | None = None


class InboxItem(_Model):
    id: str
    kind: Literal["approval", "hook", "step_hook"]
    key: str
    name: str | None
    step_key: str | None
    created_at: Timestamp
    created_at_iso: Iso
    expires_at: Timestamp | None
    expires_at_iso: Iso
    run: InboxRun
    prompt: Any = Field(None, description="approval")
    checkpoint: Any = Field(None, description="approval")
    response_schema: Any = Field(None, description="approval")
    payload_schema: Any = Field(None, description="hook and step hook")


class Inbox(_Model):
    items: list[InboxItem]
    next_cursor: Cursor = None


# -- decision links and webhooks --------------------------------------------------------------


class Link(_Model):
    id: str
    kind: Literal["page", "webhook"]
    wait_id: str
    label: str | None
    state: Literal["live", "used", "revoked", "expired"]
    created_at: Timestamp
    created_at_iso: Iso
    created_by: str | None
    expires_at: Timestamp | None
    expires_at_iso: Iso
    used_at: Timestamp | None
    used_at_iso: Iso
    decision: str | None
    revoked_at: Timestamp | None
    revoked_at_iso: Iso


class LinkCreated(_Model):
    link: Link
    url: str = Field(description="in this answer only")


class WebhookCreated(LinkCreated):
    secret: str = Field(description="signs the deliveries; in this answer only")


class LinkList(_Model):
    items: list[Link]


class LinkRevoked(_Model):
    link: Link


class WebhookDelivered(_Model):
    kind: Literal["approval", "hook", "step_hook"]
    approval: Approval | None = Field(None, description="an approval's webhook")
    hook_id: str | None = Field(None, description="a hook's webhook")
    run_id: str | None = Field(None, description="a hook's webhook")
    status: str | None = Field(None, description="a hook's webhook")


__all__ = [
    "Approval",
    "ApprovalList",
    "ApprovalRequested",
    "AuditList",
    "Checkpoint",
    "CheckpointSaved",
    "Claimed",
    "DeliveryList",
    "ErrorBody",
    "Health",
    "Heartbeat",
    "HookList",
    "HookResumed",
    "IdList",
    "Inbox",
    "LinkCreated",
    "LinkList",
    "LinkRevoked",
    "Memory",
    "MemorySaved",
    "Reported",
    "RunList",
    "RunRecord",
    "Stats",
    "TokenCreated",
    "TokenList",
    "TokenRevoked",
    "Traverser",
    "TraverserList",
    "TraverserPath",
    "WebhookCreated",
    "WebhookDelivered",
    "Worker",
    "WorkerList",
    "WorkerRegistered",
    "WorkerReleased",
]
