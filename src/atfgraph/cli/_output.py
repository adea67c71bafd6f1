"""``-o table|json|jsonl``: lists and records as the server sent them (JSON, one document or one
per line) or as tables (coloured on a terminal only; piped, one row per line); progress and logs
on stderr, never mixed with the data on stdout."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from ._base import output_format


def when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compact(value: Any, limit: int = 60) -> str:
    """A JSON value on one line, cut to ``limit`` characters (strings shown without quotes)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


#: A table column: header and how to render a cell from the record.
Column = tuple[str, Callable[[dict[str, Any]], Any]]


def field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda item: item.get(name)


_STATUS_STYLES = {
    "succeeded": "green",
    "approved": "green",
    "failed": "red",
    "rejected": "red",
    "cancelled": "dim",
    "expired": "dim",
    "waiting": "yellow",
    "pending": "yellow",
    "running": "cyan",
}


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output: no colour, and no wrapping, so every row stays one line for grep and cut.
    tty = stream.isatty()
    return Console(file=stream, highlight=False, no_color=not tty, width=None if tty else 100_000)


def _cell(value: Any, header: str) -> Any:
    from rich.text import Text

    if value is None:
        return Text("")
    text = value if isinstance(value, str) else str(value)
    # Text, never markup: ids, prompts and results are user data ("[bold]" must print as is).
    style = _STATUS_STYLES.get(text, "") if header == "STATUS" else ""
    return Text(text, style=style)


def emit_list(ctx: click.Context, items: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    fmt = output_format(ctx)
    if fmt == "json":
        click.echo(json.dumps(list(items), indent=2, ensure_ascii=False))
    elif fmt == "jsonl":
        for item in items:
            click.echo(json.dumps(item, ensure_ascii=False))
    else:
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for header, _ in columns:
            table.add_column(header, no_wrap=True, overflow="ignore")
        for item in items:
            table.add_row(*(_cell(get(item), header) for header, get in columns))
        _console().print(table)


def emit_record(
    ctx: click.Context,
    record: dict[str, Any],
    rows: Iterable[tuple[str, Any]],
    after: Callable[[], None] | None = None,
) -> None:
    """One record: the record as JSON, or a two-column table of ``rows`` (then ``after``)."""
    fmt = output_format(ctx)
    if fmt == "json":
        click.echo(json.dumps(record, indent=2, ensure_ascii=False))
    elif fmt == "jsonl":
        click.echo(json.dumps(record, ensure_ascii=False))
    else:
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE, show_header=False, pad_edge=False, show_edge=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for name, value in rows:
            table.add_row(_cell(name, ""), _cell(value, "STATUS" if name == "status" else ""))
        _console().print(table)
        if after is not None:
            after()


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    """A secondary table in ``-o table`` output (a run's path, for instance)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title=title, title_justify="left")
    for header in columns:
        table.add_column(header, no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*(_cell(value, header) for header, value in zip(columns, row, strict=True)))
    _console().print(table)


def progress(message: str) -> None:
    """A progress or log line: stderr, never mixed with the data on stdout."""
    click.echo(message, err=True)
