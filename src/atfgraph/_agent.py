"""The agent SDK: an :class:`Agent` declares a node's skills; inside a running handler its helpers
traverse child steps, save and load checkpoints, use scoped memory and request approvals.

Handlers are replayed from the top after a pause or a crash, so everything they do before a pause
must be safe to repeat: completed child steps are returned from the path instead of running
again, checkpoints hold prepared state, and approval identity is (traverser, operation_key).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, overload

from . import _tracing as tracing
from ._context import _Attempt, _attempt, _TraversalPaused
from ._errors import ApprovalConflictError, HandlerError, NotFoundError, RevisionConflictError, ServerError
from ._json import dumps, loads
from ._transport import q

P = ParamSpec("P")
R = TypeVar("R")
Handler = Callable[P, Awaitable[R]]

_CHILD_POLL_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Skill:
    """A registered handler: ``node_id.name`` is its target."""

    name: str
    fn: Callable[..., Awaitable[Any]]
    timeout_seconds: float | None
    description: str
    is_traversal: bool

    def bind(self, kwargs: dict[str, Any]) -> None:
        """Check the input fits the signature before anything runs (a bad input is not retried)."""
        try:
            inspect.signature(self.fn).bind(**kwargs)
        except TypeError as exc:
            raise HandlerError(f"input does not fit {self.name}(): {exc}", code="invalid_input") from None


class Agent:
    """A node of the graph: its id and version, the skills it serves, how many handlers one worker
    runs at once (``capacity``)."""

    def __init__(
        self, node_id: str, version: str = "0.0.0", description: str = "", capacity: int = 1
    ) -> None:
        if not node_id or "." in node_id:
            raise ValueError("node_id must be a non-empty name without '.'")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.node_id = node_id
        self.version = version
        self.description = description
        self.capacity = capacity
        self.skills: dict[str, Skill] = {}

    def __repr__(self) -> str:
        return f"Agent({self.node_id!r}, version={self.version!r}, skills={sorted(self.skills)})"

    # -- declaring skills --------------------------------------------------------------------

    def _register(
        self, fn: Callable[..., Awaitable[Any]], name: str | None, timeout: float | None, traversal: bool
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"{fn.__qualname__} must be an async function")
        skill_name = name or fn.__name__
        if skill_name in self.skills:
            raise ValueError(f"skill {self.node_id}.{skill_name} is already registered")
        doc = inspect.getdoc(fn) or ""
        self.skills[skill_name] = Skill(skill_name, fn, timeout, doc, traversal)

    @overload
    def skill(self, fn: Handler[P, R]) -> Handler[P, R]: ...
    @overload
    def skill(
        self, *, name: str | None = None, timeout_seconds: float | None = None
    ) -> Callable[[Handler[P, R]], Handler[P, R]]: ...
    def skill(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        timeout_seconds: float | None = None,
    ) -> Any:
        """Register a skill, callable as ``node_id.name`` (bare or with options)."""

        def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
            self._register(f, name, timeout_seconds, traversal=False)
            return f

        return decorate if fn is None else decorate(fn)

    @overload
    def traversal(self, fn: Handler[P, R]) -> Handler[P, R]: ...
    @overload
    def traversal(
        self, *, name: str | None = None, timeout_seconds: float | None = None
    ) -> Callable[[Handler[P, R]], Handler[P, R]]: ...
    def traversal(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        timeout_seconds: float | None = None,
    ) -> Any:
        """Register an entry-point skill. ``timeout_seconds`` bounds each active attempt; time
        spent paused for a reviewer is not charged to it."""

        def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
            self._register(f, name, timeout_seconds, traversal=True)
            return f

        return decorate if fn is None else decorate(fn)

    # -- child steps -------------------------------------------------------------------------

    async def traverse(self, target: str, **kwargs: Any) -> Any:
        """Run skill ``target`` (``node.skill``) as a child step recorded in the traverser's path.

        A step completed in an earlier attempt is returned from the path, not run again (steps
        are matched by their order in the handler, so keep it deterministic). A skill of this
        agent runs inline in the handler's task; another node's skill runs as a child traverser
        on that node's workers while this handler waits for it."""
        attempt = _attempt()
        node, dot, name = target.partition(".")
        if not dot or not node or not name:
            raise ValueError(f"target must look like 'node.skill', not {target!r}")
        seq = attempt.next_seq()
        key = f"{seq}:{target}"
        recorded = attempt.steps.get(key)
        if recorded is not None:
            return _replay(recorded)
        try:
            with tracing.step(attempt.context.traverser_id, key, target):
                if node == self.node_id and name in self.skills:
                    skill = self.skills[name]
                    skill.bind(kwargs)
                    result = await skill.fn(**kwargs)
                else:
                    result = await _run_child(attempt, target, kwargs, key)
        except HandlerError as exc:
            error = {"code": exc.code, "message": exc.message}
            _record(attempt, key, seq, target, {"status": "failed", "result": None, "error": error})
            raise
        result = loads(dumps(result, what=f"the result of {target}"))  # what replay will return
        _record(attempt, key, seq, target, {"status": "succeeded", "result": result, "error": None})
        return result

    # -- checkpoints -------------------------------------------------------------------------

    async def save_checkpoint(self, name: str, value: Any, expected_revision: int | None = None) -> int:
        """Save JSON ``value`` on the current traverser; returns the new revision. With
        ``expected_revision`` (0 = create only) a competing write raises RevisionConflictError."""
        attempt = _attempt()
        normalized = loads(dumps(value, what=f"checkpoint {name!r}", root="value"))
        path = f"/traversers/{q(attempt.context.traverser_id)}/checkpoints/{q(name)}"
        body = attempt.leased(value=normalized, expected_revision=expected_revision)

        async def settle(exc: ServerError) -> Any:
            return await _own_write(attempt, exc, path, attempt.lease(), normalized, expected_revision)

        answer = await attempt.call("PUT", path, body, settle=settle)
        revision = int(answer["revision"])
        attempt.checkpoints[name] = (normalized, revision)
        return revision

    async def load_checkpoint(self, name: str, default: Any = None) -> Any:
        """The saved value of checkpoint ``name``, or ``default``. Served from what the claim
        carried plus this attempt's own writes (only the lease holder can write)."""
        found = _attempt().checkpoints.get(name)
        return default if found is None else loads(dumps(found[0]))

    # -- scoped memory -----------------------------------------------------------------------

    async def save_memory(
        self, scope: str, key: str, value: Any, expected_revision: int | None = None
    ) -> int:
        """Write scoped memory (shared between traversers) under this task's lease; same revision
        rules as checkpoints."""
        attempt = _attempt()
        normalized = loads(dumps(value, what=f"memory {scope}/{key}", root="value"))
        path = f"/memory/{q(scope)}/{q(key)}"
        body = {"value": normalized, "expected_revision": expected_revision, **_lease(attempt)}

        async def settle(exc: ServerError) -> Any:
            return await _own_write(attempt, exc, path, _lease(attempt), normalized, expected_revision)

        answer = await attempt.call("PUT", path, body, settle=settle)
        return int(answer["revision"])

    async def load_memory(self, scope: str, key: str, default: Any = None) -> Any:
        """The current value of scoped memory ``scope``/``key``, or ``default``."""
        attempt = _attempt()
        try:
            found = await attempt.call("GET", f"/memory/{q(scope)}/{q(key)}", params=_lease(attempt))
        except NotFoundError:
            return default
        return found["value"]

    # -- approvals ---------------------------------------------------------------------------

    async def request_approval(
        self,
        prompt: Any,
        *,
        operation_key: str,
        checkpoint: Any = None,
        expires_in_seconds: float | None = None,
        pause: bool = True,
        response_schema: dict[str, Any] | None = None,
        assign_to: dict[str, list[str]] | None = None,
        escalate: dict[str, Any] | None = None,
        decision_link: bool | dict[str, Any] = False,
        on_decision_link: Callable[[dict[str, Any]], Any] | None = None,
    ) -> dict[str, Any]:
        """Ask a person to decide. The first time, the server stores a pending approval and (with
        ``pause``) the handler stops here, holding nothing; after the decision it runs again from
        the top and this call returns the decided approval record (status ``approved``,
        ``rejected`` or ``expired``). With ``pause=False`` it returns the pending record at once.
        ``response_schema`` (a JSON Schema) is what an approving response must match: the
        console shows it as a form, and a decision whose response does not match is refused.

        ``assign_to={"roles": [...], "principals": [...]}``: only those may decide (others see it
        read-only). ``escalate={"roles"|"principals": [...], "expires_in_seconds": N}``: when it
        falls due it is re-assigned to those, with N more seconds, instead of expiring (once).

        ``decision_link=True`` (or ``{"expires_in_seconds": N, "label": "..."}``) mints a
        single-use decision link with the approval, in the same transaction: a page where whoever
        holds the URL approves or rejects this one approval, without a token. The URL is handed
        out once, to ``on_decision_link({"url": ..., "link": {...}})`` (sync or async), called
        when the approval is created and before the handler pauses; with ``pause=False`` the
        returned record also carries it as ``decision_link``. Not with ``assign_to``."""
        if decision_link and pause and on_decision_link is None:
            raise ValueError(
                "decision_link with pause=True needs on_decision_link: the handler stops here, and the "
                "link's URL is handed out only once"
            )
        attempt = _attempt()
        normalized = loads(dumps(prompt, what="the approval prompt"))
        known = attempt.approvals.get(operation_key)
        if known is not None and known["status"] != "pending":
            if known["prompt"] != normalized:
                raise ApprovalConflictError(
                    f"operation key {operation_key!r} was already used with a different prompt",
                    code="approval_conflict",
                    status=409,
                )
            return dict(known)
        body = attempt.leased(
            traverser_id=attempt.context.traverser_id,
            operation_key=operation_key,
            prompt=normalized,
            checkpoint=checkpoint,
            expires_in_seconds=expires_in_seconds,
            pause=pause,
            response_schema=response_schema,
            **({} if assign_to is None else {"assign_to": assign_to}),
            **({} if escalate is None else {"escalate": escalate}),
            **({"decision_link": decision_link} if decision_link else {}),
        )
        read_timeout = attempt.ask_next(body) if pause else None
        with tracing.approval_request(attempt.context.traverser_id, operation_key):
            try:
                answer = await attempt.call("POST", "/approvals", body, read_timeout=read_timeout)
            except BaseException:
                attempt.freeing = False  # refused or unanswered: the handler has its permit
                raise
            approval: dict[str, Any] = answer["approval"]
            attempt.approvals[operation_key] = approval
            minted = answer.get("decision_link")
            if minted is not None and on_decision_link is not None:
                handed = on_decision_link(minted)
                if inspect.isawaitable(handed):
                    await handed
            if answer["paused"]:
                attempt.next_tasks = answer.get("tasks") or []
                raise _TraversalPaused(approval)
            attempt.freeing = False  # decided already: the handler goes on in its permit
        return dict(approval) if minted is None else {**approval, "decision_link": minted}

    pause = request_approval  # the retained alias of the durable mechanism


def _replay(recorded: dict[str, Any]) -> Any:
    if recorded["status"] == "failed":
        error = recorded.get("error") or {}
        raise HandlerError(error.get("message", "child step failed"), code=error.get("code", "handler_error"))
    return recorded["result"]


def _record(attempt: _Attempt, key: str, seq: int, target: str, outcome: dict[str, Any]) -> None:
    attempt.steps[key] = outcome
    attempt.pending_steps.append({"key": key, "seq": seq, "target": target, **outcome})


def _lease(attempt: _Attempt) -> dict[str, Any]:
    """The task lease with its traverser, as a request that does not name it otherwise does."""
    return {"traverser_id": attempt.context.traverser_id, **attempt.lease()}


async def _own_write(
    attempt: _Attempt,
    exc: ServerError,
    path: str,
    params: dict[str, Any],
    value: Any,
    expected_revision: int | None,
) -> Any:
    """A compare-and-set write refused on its retry: the request that got no answer may have
    been carried out (the server stopped after its commit). Then the stored value is ours at
    ``expected_revision + 1``, and that is the write's answer; anything else is the conflict."""
    if isinstance(exc, RevisionConflictError) and expected_revision is not None:
        try:
            stored = await attempt.call("GET", path, params=params)
        except NotFoundError:
            raise exc from None
        if stored["revision"] == expected_revision + 1 and stored["value"] == value:
            return stored
    raise exc


async def _run_child(attempt: _Attempt, target: str, kwargs: dict[str, Any], step_key: str) -> Any:
    """Another node's skill: submit a child traverser under this task's lease and wait for its
    outcome. The submission follows the child (a long poll); submitting again with the same key
    follows the same child, so the handler never needs to read traversers."""
    # Keyed by parent and step, so an attempt that crashed after submitting finds the same child.
    key = f"child:{attempt.context.traverser_id}:{step_key}"
    body = {
        "target": target,
        "input": kwargs,
        "idempotency_key": key,
        "parent_id": attempt.context.traverser_id,
        **attempt.lease(),
        "wait_for": "terminal",
        "wait_seconds": _CHILD_POLL_SECONDS,
    }
    while True:
        view = await attempt.call("POST", "/traversers", body, read_timeout=_CHILD_POLL_SECONDS + 10)
        if view["status"] == "succeeded":
            return view["result"]
        if view["status"] in ("failed", "cancelled"):
            error = view.get("error") or {}
            raise HandlerError(
                error.get("message", f"child {target} {view['status']}"),
                code=error.get("code", "child_failed"),
            )
        # still running after the long poll: ask again
