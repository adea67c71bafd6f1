"""``pyworkflow``: run Celery workers and the sweeper for the Celery runtime.

Options take precedence over the environment: ``--storage`` over ``PYWORKFLOW_STORAGE``,
``--broker`` over ``CELERY_BROKER_URL`` (default ``redis://127.0.0.1:6379/0``). Logs go to stderr,
as text or JSON lines (``--log-format``, ``PYWORKFLOW_LOG_FORMAT``); ``worker --metrics-port``
serves Prometheus metrics.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import click

from ._errors import ConfigurationError
from .runtime._celery import (
    DEFAULT_DISPATCH_GRACE,
    DEFAULT_QUEUE,
    DEFAULT_VISIBILITY_TIMEOUT,
    MAX_DISPATCH_GRACE,
    MIN_DISPATCH_GRACE,
    CeleryOptions,
)

if TYPE_CHECKING:  # the worker module imports Celery; load it only when a command runs
    from .runtime._celery_worker import WorkerSettings


def _settings(
    storage: str,
    broker: str | None,
    queue: str,
    visibility_timeout: float,
    lease_ttl: float,
    max_crashes: int,
    sweep_interval: float,
    imports: tuple[str, ...],
    retention: float | None = None,
    dispatch_grace: float = DEFAULT_DISPATCH_GRACE,
) -> WorkerSettings:
    from .runtime._celery_worker import WorkerSettings

    options = CeleryOptions.from_extra(
        {"broker": broker, "queue": queue, "visibility_timeout": visibility_timeout}
    )
    return WorkerSettings(
        storage=storage,
        celery=options,
        lease_ttl=lease_ttl,
        max_crashes=max_crashes,
        sweep_interval=sweep_interval,
        dispatch_grace=dispatch_grace,
        imports=imports,
        retention=retention,
    )


def _storage(value: str) -> str:
    """Refuse a storage location that is not one (pyworkflow's grammar) before anything starts."""
    from .store import parse_storage_url

    try:
        parse_storage_url(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _age(value: str | None) -> float | None:
    from .store import parse_age

    if value is None:
        return None
    try:
        return parse_age(value, what="--retention")
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def _seconds(value: float) -> float:
    """A duration option: a positive, finite number of seconds (as ``configure`` asks)."""
    if not 0 < value < math.inf:  # NaN fails too
        raise click.BadParameter(f"{value} is not a positive number of seconds.")
    return value


def _duration(name: str, default: float, help: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    return click.option(
        name, type=float, callback=lambda _ctx, _param, value: _seconds(value), default=default,
        show_default=True, help=help,
    )  # fmt: skip


def _finite(value: float) -> float:
    """A --dispatch-grace: click's FloatRange lets NaN through."""
    if not math.isfinite(value):
        raise click.BadParameter(
            f"{value} is not in the range {MIN_DISPATCH_GRACE}<=x<={MAX_DISPATCH_GRACE}."
        )
    return value


_common = [
    click.option(
        "--storage",
        envvar="PYWORKFLOW_STORAGE",
        required=True,
        callback=lambda _ctx, _param, value: _storage(value),
        help="postgresql://... [$PYWORKFLOW_STORAGE]",
    ),
    click.option("--broker", envvar="CELERY_BROKER_URL", default=None, help="[$CELERY_BROKER_URL]"),
    click.option("--queue", default=DEFAULT_QUEUE, show_default=True, help="Celery queue of turns."),
    _duration(
        "--visibility-timeout",
        DEFAULT_VISIBILITY_TIMEOUT,
        "Seconds before Redis redelivers an unacknowledged turn; longer than your longest step.",
    ),
    _duration("--lease-ttl", 30.0, "Turn lease, heartbeated."),
    click.option(
        "--max-crashes",
        type=click.IntRange(min=1),
        default=5,
        show_default=True,
        help="Turns a run may lose to dead workers before it is failed.",
    ),
    _duration("--sweep-interval", 1.0, "Seconds between the sweeper's passes, at most."),
    click.option(
        "--dispatch-grace",
        type=click.FloatRange(min=MIN_DISPATCH_GRACE, max=MAX_DISPATCH_GRACE),
        callback=lambda _ctx, _param, value: _finite(value),
        envvar="PYWORKFLOW_DISPATCH_GRACE",
        default=DEFAULT_DISPATCH_GRACE,
        show_default=True,
        help="Seconds a due run may wait for its turn's message before the sweeper publishes it "
        "again (a message lost between the database and the broker) [$PYWORKFLOW_DISPATCH_GRACE].",
    ),
    click.option(
        "--retention",
        envvar="PYWORKFLOW_RETENTION",
        default=None,
        metavar="AGE",
        callback=lambda _ctx, _param, value: _age(value),
        help="The sweeper purges runs that finished longer ago than AGE (30d, 12h, 90m) with their "
        "events, steps, waits and checkpoints [$PYWORKFLOW_RETENTION; default: keep every run].",
    ),
    click.option(
        "--import",
        "-I",
        "imports",
        multiple=True,
        help="Module defining workflows (repeatable); runs also import their workflow's module.",
    ),
]


def common(fn: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(_common):
        fn = option(fn)
    return fn


@click.group()
def main() -> None:
    """pyworkflow: durable workflows. Commands for the Celery runtime."""


@main.command()
@common
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1, max=1024),
    default=None,
    help="Turns run at once [default: 32 threads (they only wait for the shared loop), one prefork "
    "child per CPU, 1 for solo].",
)
@click.option(
    "--pool", type=click.Choice(["threads", "prefork", "solo"]), default="threads", show_default=True
)
@click.option("--sweeper/--no-sweeper", default=True, show_default=True, help="Run the sweeper here too.")
@click.option("--loglevel", default="INFO", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    envvar="PYWORKFLOW_LOG_FORMAT",
    default="text",
    show_default=True,
    help="text, or one JSON object per line [$PYWORKFLOW_LOG_FORMAT].",
)
@click.option("--hostname", "-n", default=None, help="Celery node name (default pyworkflow-PID@host).")
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (no authentication).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Interface of --metrics-port.")
def worker(
    storage: str,
    broker: str | None,
    queue: str,
    visibility_timeout: float,
    lease_ttl: float,
    max_crashes: int,
    sweep_interval: float,
    dispatch_grace: float,
    retention: float | None,
    imports: tuple[str, ...],
    concurrency: int | None,
    pool: str,
    sweeper: bool,
    loglevel: str,
    log_format: str,
    hostname: str | None,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run a Celery worker that executes workflow turns (and, by default, the sweeper)."""
    from .runtime._celery_worker import run_worker

    _logging(loglevel, log_format)
    settings = _settings(storage, broker, queue, visibility_timeout, lease_ttl, max_crashes,
                         sweep_interval, imports, retention, dispatch_grace)  # fmt: skip
    with _one_line():
        run_worker(settings, concurrency=concurrency, pool=pool, sweeper=sweeper, loglevel=loglevel,
                   hostname=hostname, metrics_port=metrics_port, metrics_host=metrics_host)  # fmt: skip


@main.command()
@common
@click.option("--loglevel", default="INFO", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    envvar="PYWORKFLOW_LOG_FORMAT",
    default="text",
    show_default=True,
    help="text, or one JSON object per line [$PYWORKFLOW_LOG_FORMAT].",
)
def sweeper(
    storage: str,
    broker: str | None,
    queue: str,
    visibility_timeout: float,
    lease_ttl: float,
    max_crashes: int,
    sweep_interval: float,
    dispatch_grace: float,
    retention: float | None,
    imports: tuple[str, ...],
    loglevel: str,
    log_format: str,
) -> None:
    """Run only the sweeper: expire due hooks and timers, recover runs of dead workers, and with
    --retention purge finished runs."""
    from .runtime._celery_worker import run_sweeper

    _logging(loglevel, log_format)
    settings = _settings(storage, broker, queue, visibility_timeout, lease_ttl, max_crashes,
                         sweep_interval, imports, retention, dispatch_grace)  # fmt: skip
    try:
        with _one_line():
            run_sweeper(settings)
    except KeyboardInterrupt:
        sys.exit(0)


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """A setting the store refuses (the postgres extra missing included), or a database that cannot
    be reached, ends the command with one line (exit 2 and 1) instead of a traceback."""
    try:
        yield
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    except Exception as exc:
        psycopg = sys.modules.get("psycopg")  # imported if it raised this; not imported here
        if psycopg is None or not isinstance(exc, psycopg.OperationalError):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise click.ClickException(f"cannot use the database: {first}") from None


def _logging(level: str, fmt: str) -> None:
    from ._errors import ConfigurationError
    from .store import setup_logging, tracing

    try:
        setup_logging(level, fmt)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--loglevel") from None
    try:  # OTEL_TRACES_EXPORTER: spans to a collector (docs/operations.md, Tracing)
        tracing.setup_from_env()
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None


if __name__ == "__main__":  # pragma: no cover
    main()
