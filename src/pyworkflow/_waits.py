"""Waiting durably: ``hook()`` (workflow level), ``step_hook()`` (inside a step), ``sleep()`` and
``resume_hook()``.

A wait's identity is deterministic: (run, scope, kind, name, per-scope call counter), so a step
that re-executes from the top finds its own wait again, and two steps (or two calls in one step)
that use the same name never see each other's payload. The token handed to ``on_created`` is
random (192 bits) and only its SHA-256 digest is stored.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

import jsonschema

from . import _serde
from ._context import WorkflowContext, current_step, current_workflow, recorded, require_workflow
from ._crashpoints import crashpoint
from ._errors import (
    CancellationError,
    ConfigurationError,
    HookExpiredError,
    InvalidTokenError,
    PayloadValidationError,
    SuspensionSignal,
)
from ._ids import new_id
from .store import NewWait, WaitKind, WaitRecord, WaitStatus

TOKEN_PREFIX = "pwh_"
_TOKEN_RE = re.compile(r"^pwh_[A-Za-z0-9_-]{32}$")
#: Largest payload ``resume_hook`` accepts, serialized.
MAX_PAYLOAD_BYTES = 1024 * 1024


class _StepHookTimeout:
    """The value ``step_hook``/``hook`` return when the deadline passed and ``on_timeout="return"``."""

    _instance: _StepHookTimeout | None = None

    def __new__(cls) -> _StepHookTimeout:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "STEP_HOOK_TIMEOUT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "STEP_HOOK_TIMEOUT"


STEP_HOOK_TIMEOUT: Final = _StepHookTimeout()

OnCreated = Callable[[str], Awaitable[None] | None]
Duration = str | float | int | timedelta


def new_token() -> tuple[str, bytes]:
    token = TOKEN_PREFIX + secrets.token_urlsafe(24)
    return token, digest_token(token)


def digest_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True, slots=True)
class _Schema:
    json_schema: dict[str, Any] | None
    model: Any  # a pydantic model class, when one was given


def _schema_of(payload_schema: Any) -> _Schema:
    if payload_schema is None:
        return _Schema(None, None)
    if isinstance(payload_schema, Mapping):
        schema = dict(payload_schema)
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(f"payload_schema is not a valid JSON Schema: {exc.message}") from None
        return _Schema(schema, None)
    if isinstance(payload_schema, type) and hasattr(payload_schema, "model_json_schema"):
        return _Schema(payload_schema.model_json_schema(), payload_schema)
    raise ConfigurationError("payload_schema must be a JSON Schema dict or a pydantic model class")


async def _call_on_created(on_created: OnCreated, token: str) -> None:
    result = on_created(token)
    if inspect.isawaitable(result):
        await result


def _duration(value: Any, what: str) -> float:
    try:
        return _serde.parse_duration(value, what=what)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def _check_on_timeout(on_timeout: str) -> None:
    if on_timeout not in ("raise", "return"):
        raise ConfigurationError(f"on_timeout must be 'raise' or 'return', not {on_timeout!r}")


async def _wait_for(
    ctx: WorkflowContext,
    *,
    scope: str,
    kind: WaitKind,
    name: str,
    timeout: Duration | None,
    on_created: OnCreated | None,
    on_timeout: Literal["raise", "return"],
    payload_schema: Any,
) -> Any:
    """The shared mechanics of hook() and step_hook(): find this call's wait or create it."""
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ConfigurationError("a hook name must be a non-empty string of at most 200 characters")
    _check_on_timeout(on_timeout)
    if on_created is not None and not callable(on_created):
        raise ConfigurationError(f"on_created must be a callable taking the token, not {on_created!r}")
    seconds = _duration(timeout, "timeout") if timeout is not None else None
    schema = _schema_of(payload_schema)
    wait_key = ctx.next_wait_key(scope, kind.value, name)
    wait = ctx.state.waits.get(wait_key)
    if wait is not None:
        if wait.status == WaitStatus.RECEIVED:
            value = _serde.loads(wait.payload)
            return schema.model.model_validate(value) if schema.model is not None else value
        if wait.status == WaitStatus.EXPIRED:
            if on_timeout == "return":
                return STEP_HOOK_TIMEOUT
            raise HookExpiredError(f"hook {name!r} expired before a payload arrived", wait_id=wait.id)
        if wait.status == WaitStatus.CANCELLED:
            raise CancellationError(f"hook {name!r} was cancelled")
        if not wait.notified and on_created is not None:
            # The previous turn created the wait but died before recording that on_created ran:
            # deliver again (at least once) with a fresh token; every token handed out stays valid.
            token, digest = new_token()
            await recorded(ctx.store.add_wait_token(ctx.fence, wait.id, digest))
            await _call_on_created(on_created, token)
            ctx.notified.append(wait.id)
        raise SuspensionSignal("hook", wait_key)
    token, digest = new_token()
    now = ctx.now()
    new = NewWait(
        id=new_id(),
        wait_key=wait_key,
        kind=kind,
        name=name,
        step_key=scope,
        token_digest=digest,
        expires_at=now + seconds if seconds is not None else None,
        payload_schema=_serde.dumps(schema.json_schema) if schema.json_schema is not None else None,
    )
    # The turn suspends on this wait next: its suspension (status, event) commits with it, so
    # on_created still runs only after the wait is durable and the suspension costs no commit
    # of its own (only the lease's release is left, written without waiting).
    wait = await recorded(ctx.store.create_wait(ctx.fence, new, now=now, suspend=not ctx.suspension_recorded))
    ctx.suspension_recorded = True
    ctx.state.waits[wait_key] = wait
    crashpoint("after_wait_created")
    if on_created is not None:
        try:
            await _call_on_created(on_created, token)
        except BaseException:
            ctx.suspension_recorded = False  # the turn goes on: a later suspension records itself
            raise
        crashpoint("after_on_created")
        # Marked with the end of the turn, so a turn run again does not call it again. A wait
        # nobody was told of needs no mark (an update of its row that PostgreSQL would keep as a
        # dead row version with an entry in each of the wait's indexes until a vacuum).
        ctx.notified.append(wait.id)
    raise SuspensionSignal("hook", wait_key)


async def step_hook(
    name: str,
    *,
    timeout: Duration | None = None,
    on_created: OnCreated | None = None,
    on_timeout: Literal["raise", "return"] = "raise",
    payload_schema: Any = None,
) -> Any:
    """Suspend the current step until ``resume_hook(token, payload)`` delivers a payload.

    The first call creates the hook, calls ``on_created(token)`` (at least once: again only if
    the process died before the suspension was recorded) and suspends the run, freeing the worker.
    When resumed, the step re-executes from the top and this call returns the payload. With a
    ``timeout`` the deadline is durable: ``on_timeout="return"`` gives ``STEP_HOOK_TIMEOUT``,
    the default raises ``HookExpiredError``."""
    step = current_step()
    if step is None:
        raise ConfigurationError(
            "step_hook() must be called inside a @step running in a workflow; use hook()"
        )
    return await _wait_for(
        step.workflow,
        scope=step.step_key,
        kind=WaitKind.STEP_HOOK,
        name=name,
        timeout=timeout,
        on_created=on_created,
        on_timeout=on_timeout,
        payload_schema=payload_schema,
    )


async def hook(
    name: str,
    *,
    timeout: Duration | None = None,
    on_created: OnCreated | None = None,
    on_timeout: Literal["raise", "return"] = "raise",
    payload_schema: Any = None,
) -> Any:
    """Suspend the workflow (between steps) until ``resume_hook(token, payload)``; the same
    contract as :func:`step_hook`, at workflow level."""
    if current_step() is not None:
        raise ConfigurationError("hook() is for workflow level; inside a @step use step_hook()")
    return await _wait_for(
        require_workflow("hook"),
        scope="",
        kind=WaitKind.HOOK,
        name=name,
        timeout=timeout,
        on_created=on_created,
        on_timeout=on_timeout,
        payload_schema=payload_schema,
    )


async def sleep(duration: Duration) -> None:
    """Durable sleep: the run suspends (holding nothing) and resumes by itself after
    ``duration``, also across restarts. Outside a workflow it is ``asyncio.sleep``."""
    seconds = _duration(duration, "sleep duration")
    ctx = current_workflow()
    if ctx is None:
        import asyncio

        await asyncio.sleep(seconds)
        return
    step = current_step()
    scope = step.step_key if step is not None else ""
    wait_key = ctx.next_wait_key(scope, WaitKind.TIMER.value, "sleep")
    wait = ctx.state.waits.get(wait_key)
    if wait is not None:
        if wait.status == WaitStatus.PENDING:
            raise SuspensionSignal("sleep", wait_key)
        if wait.status == WaitStatus.CANCELLED:
            raise CancellationError("sleep was cancelled")
        return
    if seconds == 0:
        return
    now = ctx.now()
    new = NewWait(new_id(), wait_key, WaitKind.TIMER, "sleep", scope, None, now + seconds, None)
    ctx.state.waits[wait_key] = await recorded(
        ctx.store.create_wait(ctx.fence, new, now=now, suspend=not ctx.suspension_recorded)
    )
    ctx.suspension_recorded = True
    raise SuspensionSignal("sleep", wait_key)


def validate_payload(wait: WaitRecord, payload: Any) -> bytes:
    """Serialize ``payload`` and check it against the wait's schema; raises, changing nothing."""
    data = encode_payload(payload)
    check_stored_schema(wait, data)
    return data


def encode_payload(payload: Any) -> bytes:
    """Serialize a payload within the size and nesting limits; raises, changing nothing."""
    data = _serde.dumps(payload, what="payload")
    if len(data) > MAX_PAYLOAD_BYTES:
        raise PayloadValidationError(f"payload is {len(data)} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    if _serde.depth(payload) > _serde.MAX_DEPTH:
        raise PayloadValidationError(f"payload nests deeper than {_serde.MAX_DEPTH} levels")
    return data


def check_stored_schema(wait: WaitRecord, data: bytes) -> None:
    """Check serialized payload ``data`` against the wait's ``payload_schema``, in the form the
    hook will return it (decoded from what is stored: a tuple is an array there)."""
    if wait.payload_schema is not None:
        check_schema(wait, _serde.loads(data))


def check_schema(wait: WaitRecord, payload: Any) -> None:
    """Check a decoded payload against the wait's ``payload_schema`` (if it has one)."""
    if wait.payload_schema is not None:
        check_json_schema(_serde.loads(wait.payload_schema), payload, "the hook's schema")


def check_json_schema(schema: Any, value: Any, what: str) -> None:
    """Check ``value`` against the JSON Schema ``schema``; raises PayloadValidationError naming
    ``what`` and the path of the best-matching error (a missing required property included)."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        path: tuple[str | int, ...] = tuple(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [k for k in error.validator_value if k not in error.instance]
            if missing:
                path = (*path, str(missing[0]))
        where = "/".join(str(p) for p in path) or "(root)"
        raise PayloadValidationError(f"payload does not match {what} at {where}: {error.message}", path=path)


def check_token(token: Any) -> str:
    if not isinstance(token, str):
        raise InvalidTokenError(f"a hook token is a string, not {type(token).__name__}")
    if not _TOKEN_RE.fullmatch(token):
        raise InvalidTokenError("malformed hook token (expected 'pwh_' followed by 32 URL-safe characters)")
    return token
