"""In-process wake-ups for long polls: a claim waits on its node, a client on its traverser.

A transition that can end a wait notifies here after its transaction commits. One server process
owns a SQLite file, so that is all there is to it. Servers sharing a PostgreSQL database also
forward each notification to the others (``forward``, sent with NOTIFY) and wake their own
waiters for the others' (``wake``, fed by LISTEN). A waiter subscribes *before* it checks the
store, so a notification between the check and the wait is not lost, and it stays subscribed
until it unsubscribes, so none is lost while it handles the one before either.

A notification may say the status the transition committed (``notify(key, status)``): a client
following a traverser until it reaches some statuses then reads it again only when the status
is one of them, or not said (another server's notification, a transition that does not say).

Work queued for a node wakes one claim poll, not all of them: the poll that is woken claims,
and passes the notification on to the next waiter if its claim took as many tasks as it asked
for and more may be queued, or if it leaves without claiming (``pass_on``, and ``unsubscribe`` of
a listener with a notification it did not take). So N polls on one node (workers, and reports
whose answer waits for the next task) cost one claim per task, not N.

"More may be queued" is counted, not guessed: a transition that queued one task says so
(``notify(key, queued=1)``: a submit, a decision, a release, a retry) and the hub counts those
tasks down as claims take them; a notification that does not say how many (the sweeper, a
worker's release of everything, a silent worker's return, another server's notification) makes
the count unknown until a claim finds the queue short with nothing notified since it began.
Without the count, every full claim of one task woke another poll that found nothing: three
empty claims per approval cycle on the writer's connection under ``bench.atfgraph_cycles``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: Statuses a listener keeps before it looks; past that they collapse into one unknown status.
_MAX_NOTIFIED = 64


class Listener:
    """One waiter's subscription to a key: what was notified on it since the waiter last looked
    (:meth:`Hub.take`), each a status or None (not said)."""

    __slots__ = ("_fut", "notified")

    @property
    def waiting(self) -> bool:
        """Whether its waiter is in :meth:`Hub.wait` now (not busy with what it was woken for)."""
        return self._fut is not None

    def __init__(self) -> None:
        self.notified: list[str | None] = []
        self._fut: asyncio.Future[None] | None = None

    def _notify(self, status: str | None) -> None:
        if len(self.notified) < _MAX_NOTIFIED:
            self.notified.append(status)
        else:
            self.notified[:] = [None]
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)


class Hub:
    def __init__(self) -> None:
        # Per key, its listeners in the order they subscribed (a dict as an ordered set).
        self._waiters: dict[str, dict[Listener, None]] = {}
        #: set when the server begins to shut down: long polls answer at once from then on
        self.closing = False
        #: passes each notification on to the other servers sharing the database (PostgreSQL)
        self.forward: Callable[[str], None] | None = None
        # Per node key: how many notifications it has had; the tasks notified one by one that no
        # claim here has taken yet; whether a notification of an unknown number came since a
        # claim last found the queue short (absent: nothing is known yet, as after a restart).
        self._generation: dict[str, int] = {}
        self._owed: dict[str, int] = {}
        self._vague: dict[str, bool] = {}

    def close(self) -> None:
        """Wake every waiter and make later waits return at once (graceful shutdown: a long
        poll must not hold the server past its shutdown timeout)."""
        self.closing = True
        for waiters in list(self._waiters.values()):
            for listener in list(waiters):
                listener._notify(None)

    def subscribe(self, key: str) -> Listener:
        """Listen on ``key`` until :meth:`unsubscribe` (subscribe before checking the store)."""
        listener = Listener()
        self._waiters.setdefault(key, {})[listener] = None
        return listener

    def unsubscribe(self, key: str, listener: Listener) -> None:
        """Stop listening. A claim poll's listener that leaves with a notification it did not
        :meth:`take` passes it on to another waiter on the node."""
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.pop(listener, None)
            if not waiters:
                del self._waiters[key]
        if listener.notified and key.startswith(_NODE) and not self.closing:
            listener.notified = []
            self.pass_on(key)

    def notify(self, key: str, status: str | None = None, *, queued: int | None = None) -> None:
        """A transition committed: wake this server's waiters on ``key``, and the other servers'.
        ``status``: the status it committed, when the caller knows it for certain; ``queued``:
        how many tasks it queued on a node, when the caller knows (None: some, how many unknown)."""
        self.wake(key, status, queued=queued)
        if self.forward is not None:
            self.forward(key)

    def wake(self, key: str, status: str | None = None, *, queued: int | None = None) -> None:
        """Wake this server's waiters on ``key``: every follower of a traverser, one claim poll
        of a node (see the module's docstring)."""
        if key.startswith(_NODE):
            self._generation[key] = self._generation.get(key, 0) + 1
            if queued is None:
                self._vague[key] = True
            else:
                self._owed[key] = self._owed.get(key, 0) + queued
            self.pass_on(key)
            return
        for listener in list(self._waiters.get(key, ())):
            listener._notify(status)

    def pass_on(self, key: str) -> None:
        """Wake one claim poll on node ``key`` that has nothing notified yet, one in
        :meth:`wait` before one busy claiming; none when all of them already have something."""
        busy = None
        for listener in self._waiters.get(key, ()):
            if listener.notified:
                continue
            if listener.waiting:
                listener._notify(None)
                return
            if busy is None:
                busy = listener
        if busy is not None:
            busy._notify(None)

    def take(self, listener: Listener) -> list[str | None]:
        """What was notified to ``listener`` since it last took, oldest first."""
        notified, listener.notified = listener.notified, []
        return notified

    def generation(self, key: str) -> int:
        return self._generation.get(key, 0)

    def claimed(self, key: str, generation: int, asked: int, got: int) -> None:
        """A claim on node ``key`` that began at ``generation`` asked for ``asked`` tasks and took
        ``got``: they are counted off what was notified, and if it took all it asked for while
        more may be queued, the next poll is woken (see the module's docstring). One that took
        fewer, with nothing notified since it began, saw the queue drained: nothing is owed."""
        owed = self._owed.get(key, 0) - got
        if got < asked and self._generation.get(key, 0) == generation:
            self._owed[key] = 0
            self._vague[key] = False
            return
        self._owed[key] = max(owed, 0)
        if got >= asked and (owed > 0 or self._vague.get(key, True)):
            self.pass_on(key)

    def may_have_work(self, key: str) -> bool:
        """Whether node ``key`` may have queued work: False only when every task notified one by
        one was claimed here and no notification of an unknown number (here or, on PostgreSQL,
        from another server) came since a claim last found the queue short. A hint for the
        claims that ride on reports, which skip their first read on it (a wrong False, work that
        came due without a notification, only means the worker's own long poll finds it, at
        most the report's wait later); a worker's claim requests never skip one."""
        return self._vague.get(key, True) or self._owed.get(key, 0) > 0

    async def wait(self, listener: Listener, timeout: float) -> bool:
        """Wait until something is notified to ``listener`` (at once if something already was);
        False on timeout. The timeout is a timer on the listener's own future: no shield and no
        ``wait_for`` task per wait (those were 2 % of the graph server's GIL under
        ``bench.atfgraph_cycles``)."""
        if listener.notified:
            return True
        if timeout <= 0 or self.closing:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        listener._fut = fut
        timer = loop.call_later(timeout, _time_up, fut)
        try:
            await fut
        finally:
            timer.cancel()
            listener._fut = None
        return bool(listener.notified)


def _time_up(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


_NODE = "node:"


def node_key(node_id: str) -> str:
    return _NODE + node_id


def traverser_key(traverser_id: str) -> str:
    return f"traverser:{traverser_id}"
