"""``@step``: a unit of work whose outcome is recorded once and replayed afterwards.

Inside a workflow a step call looks up its deterministic key (``name#n``): a recorded result is
returned without running the function; otherwise the function runs (with retries, back-off and a
timeout) and its result is recorded, durably, before the workflow continues. A failed attempt
with retries left suspends the run on a back-off timer, so the retry is durable too. Outside a
workflow a step is a plain async function call.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from . import _serde, _tracing
from ._context import StepContext, WorkflowContext, _step, current_step, current_workflow, recorded
from ._crashpoints import crashpoint
from ._errors import (
    CancellationError,
    ConfigurationError,
    FatalError,
    HookError,
    LeaseLostError,
    RetryableError,
    StepTimeoutError,
    SuspensionSignal,
    WorkflowError,
)
from ._ids import new_id
from .store import NewWait, StepRecord, StepStatus, WaitKind, WaitStatus
from .store import metrics as _metrics

P = ParamSpec("P")
R = TypeVar("R")

#: Exceptions that end a step at once: retrying cannot change them (an expired or cancelled hook
#: stays so, misuse of the API stays misuse; a lost lease or a cancelled run belongs to someone
#: else now).
_NOT_RETRIED = (FatalError, CancellationError, LeaseLostError, HookError, ConfigurationError)


@dataclass(frozen=True, slots=True)
class StepOptions:
    name: str
    max_retries: int = 3
    retry_delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 3600.0
    timeout: float | None = None
    is_generator: bool = False

    def delay_for(self, attempt: int, exc: BaseException) -> float:
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            return max(0.0, float(exc.retry_after))
        return min(self.max_delay, self.retry_delay * self.backoff ** (attempt - 1))


class _StepDecorator(Protocol):
    """What ``@step(...)`` with options returns: keeps the decorated function's signature."""

    @overload
    def __call__(self, fn: Callable[P, AsyncIterator[R]], /) -> Callable[P, AsyncIterator[R]]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...


@overload
def step(fn: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...
@overload
def step(fn: Callable[P, AsyncIterator[R]], /) -> Callable[P, AsyncIterator[R]]: ...
@overload
def step(
    *,
    name: str | None = None,
    max_retries: int = 3,
    retry_delay: float | str | timedelta = 1.0,
    backoff: float = 2.0,
    max_delay: float | str | timedelta = 3600.0,
    timeout: float | str | timedelta | None = None,
    is_generator: bool | None = None,
) -> _StepDecorator: ...


def step(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    max_retries: int = 3,
    retry_delay: float | str | timedelta = 1.0,
    backoff: float = 2.0,
    max_delay: float | str | timedelta = 3600.0,
    timeout: float | str | timedelta | None = None,
    is_generator: bool | None = None,
) -> Any:
    """Declare a step: bare (``@step``) or with options. ``max_retries`` counts retries after the
    first attempt; the delay before retry *n* is ``retry_delay * backoff**(n-1)`` (capped by
    ``max_delay``, overridden by ``RetryableError(retry_after=...)``). ``FatalError`` is never
    retried. ``timeout`` bounds each attempt. ``is_generator`` (detected from ``async def ...
    yield`` when not given) makes the step stream chunks to its caller."""
    if name is not None and not isinstance(name, str):
        raise ConfigurationError(f"a step name must be a string, not {name!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigurationError(f"max_retries must be an int >= 0, not {max_retries!r}")
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or backoff < 1:
        raise ConfigurationError(f"backoff must be a number >= 1, not {backoff!r}")
    try:
        delay = _serde.parse_duration(retry_delay, what="retry_delay")
        cap = _serde.parse_duration(max_delay, what="max_delay")
        limit = _serde.parse_duration(timeout, what="timeout") if timeout is not None else None
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    if limit is not None and limit <= 0:
        raise ConfigurationError("timeout must be > 0 seconds")

    def decorate(func: Callable[P, Any]) -> Callable[P, Any]:
        generator = inspect.isasyncgenfunction(func) if is_generator is None else is_generator
        if generator and not inspect.isasyncgenfunction(func):
            raise ConfigurationError(
                f"@step(is_generator=True) needs an async generator function, got {func!r}"
            )
        if not generator and not inspect.iscoroutinefunction(func):
            raise ConfigurationError(f"@step needs an async function, got {func!r}")
        opts = StepOptions(
            name or func.__qualname__, max_retries, delay, float(backoff), cap, limit, generator
        )
        wrapper: Callable[P, Any]
        if generator:

            @functools.wraps(func)
            def gen_wrapper(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[Any]:
                return _run_generator_step(opts, func, args, kwargs)

            wrapper = gen_wrapper
        else:

            @functools.wraps(func)
            async def coro_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await _run_step(opts, func, args, kwargs)

            wrapper = coro_wrapper
        setattr(wrapper, "__pyworkflow_step__", opts)  # noqa: B010 - read back by is_step()
        return wrapper

    if fn is not None:
        if not callable(fn):
            raise ConfigurationError("use @step or @step(...) with keyword options")
        return decorate(fn)
    return decorate


def _forget_checkpoints(wctx: WorkflowContext, key: str) -> None:
    """The store deleted the step's checkpoints with its result (they serve only its
    re-execution): forget them in this turn's state too."""
    for scope_name in [k for k in wctx.state.checkpoints if k[0] == key]:
        del wctx.state.checkpoints[scope_name]


def _replayed_error(data: bytes | None) -> BaseException:
    """Rebuild a recorded final failure so the workflow sees the same exception type on replay."""
    info = _serde.loads(data) or {}
    message = str(info.get("message", "step failed"))
    type_name = str(info.get("type", ""))
    module, _, qualname = type_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), qualname) if module else None
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(message)
    except Exception:
        pass
    return FatalError(f"{type_name}: {message}")


def _start(opts: StepOptions, wctx: WorkflowContext) -> tuple[str, StepRecord | None, int]:
    """Resolve this call's key and recorded state; raise to suspend while a back-off is pending."""
    key = wctx.next_step_key(opts.name)
    record = wctx.state.steps.get(key)
    attempt = 1
    if record is not None and record.status == StepStatus.RETRYING:
        backoff = wctx.state.waits.get(f"{key}/retry:{opts.name}#{record.attempt}")
        if backoff is not None and backoff.status == WaitStatus.PENDING:
            raise SuspensionSignal("retry", backoff.wait_key)
        attempt = record.attempt + 1
    return key, record, attempt


async def _record_failure(
    opts: StepOptions, wctx: WorkflowContext, key: str, attempt: int, exc: BaseException, delivered: int
) -> None:
    """Record a failed attempt; suspend on a back-off timer when retries remain."""
    error = _serde.encode_error(exc)
    now = wctx.now()
    retryable = not isinstance(exc, _NOT_RETRIED) and attempt <= opts.max_retries
    retry = None
    if retryable:
        wait_key = f"{key}/retry:{opts.name}#{attempt}"
        retry = NewWait(
            new_id(),
            wait_key,
            WaitKind.RETRY,
            opts.name,
            key,
            None,
            now + opts.delay_for(attempt, exc),
            None,
        )
    await recorded(
        wctx.store.fail_step(
            wctx.fence, key, attempt=attempt, error=error, retry=retry, delivered=delivered, now=now
        )
    )
    if retry is None:
        _forget_checkpoints(wctx, key)
    wctx.state.steps[key] = StepRecord(
        key, StepStatus.RETRYING if retry else StepStatus.FAILED, attempt, None, error, delivered
    )
    if retry is not None:
        _metrics.labelled(_metrics.RETRIES, "step").inc()
        raise SuspensionSignal("retry", retry.wait_key) from exc


async def _run_step(opts: StepOptions, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    wctx = current_workflow()
    if wctx is None or current_step() is not None:
        return await func(*args, **kwargs)  # plain call: outside a workflow, or nested in a step
    key, record, attempt = _start(opts, wctx)
    if record is not None and record.status == StepStatus.COMPLETED:
        return _serde.loads(record.result)
    if record is not None and record.status == StepStatus.FAILED:
        raise _replayed_error(record.error)
    with _tracing.step(wctx.run_id, key, attempt):
        return await _execute_step(opts, func, args, kwargs, wctx, key, attempt)


async def _execute_step(
    opts: StepOptions, func: Callable[..., Any], args: Any, kwargs: Any, wctx: WorkflowContext, key: str,
    attempt: int,
) -> Any:  # fmt: skip
    """Run a step that has no recorded outcome, and record it."""
    token = _step.set(StepContext(wctx, key, opts.name, attempt))
    started = time.perf_counter()
    try:
        if opts.timeout is not None:
            async with asyncio.timeout(opts.timeout):
                result = await func(*args, **kwargs)
        else:
            result = await func(*args, **kwargs)
    except SuspensionSignal:
        raise
    except TimeoutError as exc:
        _metrics.labelled(_metrics.STEP_SECONDS, "failed").observe(time.perf_counter() - started)
        failure: BaseException = StepTimeoutError(
            f"step {opts.name!r} attempt {attempt} timed out after {opts.timeout} s"
        )
        failure.__cause__ = exc
        await _record_failure(opts, wctx, key, attempt, failure, 0)
        raise failure from exc
    except Exception as exc:
        _metrics.labelled(_metrics.STEP_SECONDS, "failed").observe(time.perf_counter() - started)
        await _record_failure(opts, wctx, key, attempt, exc, 0)
        raise
    finally:
        _step.reset(token)
    _metrics.labelled(_metrics.STEP_SECONDS, "completed").observe(time.perf_counter() - started)
    # Serialized once, decoded once: this first pass returns what replay will return (the JSON
    # form: a tuple is a list, a dataclass a dict), so the workflow goes the same way on both.
    data, decoded = _serde.dumps_loads(result, what=f"result of step {opts.name!r}")
    await recorded(wctx.store.complete_step(wctx.fence, key, data, now=wctx.now()))
    _forget_checkpoints(wctx, key)
    wctx.state.steps[key] = StepRecord(key, StepStatus.COMPLETED, attempt, data, None, 0)
    crashpoint("after_step_completed")
    return decoded


async def _run_generator_step(
    opts: StepOptions, func: Callable[..., AsyncGenerator[Any, None]], args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    wctx = current_workflow()
    if wctx is None or current_step() is not None:
        async for chunk in func(*args, **kwargs):
            yield chunk
        return
    key, record, attempt = _start(opts, wctx)
    if record is not None and record.status == StepStatus.COMPLETED:
        return  # every chunk was delivered before; nothing is delivered twice
    if record is not None and record.status == StepStatus.FAILED:
        raise _replayed_error(record.error)
    already = record.delivered if record is not None else 0
    produced = 0
    ctx = StepContext(wctx, key, opts.name, attempt)
    agen = func(*args, **kwargs)
    try:
        while True:
            token = _step.set(ctx)  # the step's context only while its own code runs
            try:
                if opts.timeout is not None:
                    async with asyncio.timeout(opts.timeout):
                        chunk = await agen.__anext__()
                else:
                    chunk = await agen.__anext__()
            except StopAsyncIteration:
                break
            except SuspensionSignal:
                wctx.delivered[key] = max(already, produced)
                raise
            except TimeoutError as exc:
                failure = StepTimeoutError(
                    f"step {opts.name!r} attempt {attempt} timed out after {opts.timeout} s"
                )
                await _record_failure(opts, wctx, key, attempt, failure, max(already, produced))
                raise failure from exc
            except Exception as exc:
                await _record_failure(opts, wctx, key, attempt, exc, max(already, produced))
                raise
            finally:
                _step.reset(token)
            produced += 1
            if produced > already:
                yield chunk
    finally:
        await agen.aclose()
    await recorded(wctx.store.complete_step(wctx.fence, key, _serde.dumps(None), now=wctx.now()))
    _forget_checkpoints(wctx, key)
    wctx.state.steps[key] = StepRecord(key, StepStatus.COMPLETED, attempt, b"null", None, produced)


def is_step(fn: Any) -> bool:
    return isinstance(getattr(fn, "__pyworkflow_step__", None), StepOptions)


__all__ = ["StepOptions", "WorkflowError", "is_step", "step"]
