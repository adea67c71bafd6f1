"""In-process wake-ups for long polls: a claim waits on its node, a client on its traverser.

One server process owns a SQLite file, so every transition that can end a wait happens in this
process and notifies here after its transaction commits. (Replicas sharing PostgreSQL would feed
this hub from LISTEN/NOTIFY instead.) A waiter subscribes *before* it checks the store, so a
notification between the check and the wait is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib


class Hub:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        #: set when the server begins to shut down: long polls answer at once from then on
        self.closing = False

    def close(self) -> None:
        """Wake every waiter and make later waits return at once (graceful shutdown: a long
        poll must not hold the server past its shutdown timeout)."""
        self.closing = True
        for key in list(self._waiters):
            self.notify(key)

    def subscribe(self, key: str) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(fut)
        return fut

    def unsubscribe(self, key: str, fut: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(fut)
            if not waiters:
                del self._waiters[key]

    def notify(self, key: str) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, fut: asyncio.Future[None], timeout: float) -> bool:
        """Wait for a notification; False on timeout."""
        if timeout <= 0 or self.closing:
            return fut.done()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        return False


def node_key(node_id: str) -> str:
    return f"node:{node_id}"


def traverser_key(traverser_id: str) -> str:
    return f"traverser:{traverser_id}"
