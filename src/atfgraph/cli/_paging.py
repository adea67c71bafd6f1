"""The paging flags of every ``atfg ... list`` command, written once: ``--limit N`` (a page of at
most N, 1 to 1000), ``--after CURSOR`` (the page after the one that printed it) and ``--all``
(every page, following ``next_cursor`` until the last). A page that is not the last says so on
stderr with the ``--after`` to pass next: no list is cut off silently. Data stays on stdout.

Use :func:`paging_options` on the command and :func:`fetch` for its request::

    @paging_options()
    def things_list(ctx, limit, after, every): items = fetch(api(ctx), "/things", {}, limit, after, every)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._api import Api

#: The most items the API answers in one page.
MAX_PAGE = 1000

F = TypeVar("F", bound=Callable[..., Any])


def paging_options(default_limit: int = 100) -> Callable[[F], F]:
    """Add ``--limit``, ``--after`` and ``--all`` (as ``limit``, ``after``, ``every``)."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--all",
            "every",
            is_flag=True,
            help="Every page, not only the first (--limit is then the page size).",
        )(fn)
        fn = click.option(
            "--after",
            default=None,
            metavar="CURSOR",
            help="The page after the one that printed this cursor.",
        )(fn)
        return click.option(
            "--limit",
            default=default_limit,
            show_default=True,
            type=click.IntRange(1, MAX_PAGE),
            help="At most this many (one page).",
        )(fn)

    return decorate


def fetch(
    client: Api, path: str, params: dict[str, Any], limit: int, after: str | None, every: bool
) -> list[dict[str, Any]]:
    """The items of one page of the list at ``path`` (or of every page, with ``every``). When
    more remain, stderr says how to get them."""
    items: list[dict[str, Any]] = []
    cursor = after
    while True:
        query = {**params, "limit": limit}
        if cursor is not None:
            query["after"] = cursor
        answer = client.get(path, query)
        items += answer["items"]
        cursor = answer.get("next_cursor")
        if cursor is None:
            return items
        if not every:
            click.echo(f"atfg: more after these {len(items)}: --after {cursor} (or --all)", err=True)
            return items


__all__ = ["MAX_PAGE", "fetch", "paging_options"]
