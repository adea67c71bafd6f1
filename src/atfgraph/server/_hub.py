"""In-process wake-ups for long polls: a claim waits on its node, a client on its traverser.

A transition that can end a wait notifies here after its transaction commits. One server process
owns a SQLite file, so that is all there is to it. Servers sharing a PostgreSQL database also
forward each notification to the others (``forward``, sent with NOTIFY) and wake their own
waiters for the others' (``wake``, fed by LISTEN). A waiter subscribes *before* it checks the
store, so a notification between the check and the wait is not lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Hub:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}
        #: set when the server begins to shut down: long polls answer at once from then on
        self.closing = False
        #: passes each notification on to the other servers sharing the database (PostgreSQL)
        self.forward: Callable[[str], None] | None = None
        # Per key: how many notifications it has had, and that count when a claim last found
        # nothing (see may_have_work).
        self._generation: dict[str, int] = {}
        self._empty_at: dict[str, int] = {}

    def close(self) -> None:
        """Wake every waiter and make later waits return at once (graceful shutdown: a long
        poll must not hold the server past its shutdown timeout)."""
        self.closing = True
        for key in list(self._waiters):
            self.wake(key)

    def subscribe(self, key: str) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(fut)
        return fut

    def unsubscribe(self, key: str, fut: asyncio.Future[bool]) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(fut)
            if not waiters:
                del self._waiters[key]

    def notify(self, key: str) -> None:
        """A transition committed: wake this server's waiters on ``key``, and the other servers'."""
        self.wake(key)
        if self.forward is not None:
            self.forward(key)

    def wake(self, key: str) -> None:
        """Wake this server's waiters on ``key``."""
        if key.startswith(_NODE):
            self._generation[key] = self._generation.get(key, 0) + 1
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(True)

    def generation(self, key: str) -> int:
        return self._generation.get(key, 0)

    def found_nothing(self, key: str, generation: int) -> None:
        """A claim on node ``key`` that began at ``generation`` found nothing queued."""
        self._empty_at[key] = generation

    def may_have_work(self, key: str) -> bool:
        """Whether node ``key`` may have queued work: False only when a claim found nothing and
        no notification on it (here or, on PostgreSQL, from another server) came since. A hint
        for the claims that ride on reports (a wrong False only means the worker long-polls);
        long polls themselves never skip a claim on it."""
        return self._empty_at.get(key) != self._generation.get(key, 0)

    async def wait(self, fut: asyncio.Future[bool], timeout: float) -> bool:
        """Wait for a notification on ``fut`` (the caller's own, from :meth:`subscribe`); False on
        timeout. The timeout settles ``fut`` with False itself: no shield and no ``wait_for``
        task per wait (those were 2 % of the graph server's GIL under ``bench.atfgraph_cycles``)."""
        if timeout <= 0 or self.closing or fut.done():
            return fut.done()
        timer = asyncio.get_running_loop().call_later(timeout, _time_up, fut)
        try:
            return await fut
        finally:
            timer.cancel()


def _time_up(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


_NODE = "node:"


def node_key(node_id: str) -> str:
    return _NODE + node_id


def traverser_key(traverser_id: str) -> str:
    return f"traverser:{traverser_id}"
