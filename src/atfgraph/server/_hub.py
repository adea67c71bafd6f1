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

Work queued for a node wakes a claim poll, not all of them, and how many is counted, not guessed.
A transition that queued one task says so (``notify(key, queued=1)``: a submit, a decision, a
release, a retry); the hub counts those tasks as owed until claims here take them, and keeps as
many polls on their way to claim as tasks are owed: a notification, a claim that comes back, and a
poll that leaves without claiming each wake idle polls while more tasks are owed than polls are
already woken or claiming (``_settle``). A notification that does not say how many (the sweeper,
a worker's release of everything, a silent worker's return, another server's notification) makes
the count unknown until a claim finds the queue short with nothing notified since it began;
until then each notification wakes one poll, and a claim that took all it asked for, or a poll
that leaves without claiming, passes the wake-up on to the next (``pass_on``). So N polls on one
node (workers, and reports whose answer waits for the next task) cost about one claim per task,
not N. A claim riding on a report is woken before a worker's own poll: the report's request ends
either way, while a poll that took the task would have to be sent again. Before the count, a
claim of one task that got it always woke the next poll, which usually found nothing: three
empty claims per approval cycle on the writer's connection under ``bench.atfgraph_cycles`` at
24 in flight.

A claim sees only the tasks its worker's version may run (a traverser is pinned to the version
of its first claim), so while a node's polls come from several versions (a rolling upgrade) a
short claim proves the queue drained for its version alone: the wake-up goes on to a poll of a
version that has not come back short since the last notification, and the queue counts as
drained once every version polling has (``claimed``); a poll of a version not among those then
reads the queue before it trusts the count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: Statuses a listener keeps before it looks; past that they collapse into one unknown status.
_MAX_NOTIFIED = 64


class Listener:
    """One waiter's subscription to a key: what was notified on it since the waiter last looked
    (:meth:`Hub.take`), each a status or None (not said)."""

    __slots__ = ("_fut", "notified", "ride", "version")

    @property
    def waiting(self) -> bool:
        """Whether its waiter is in :meth:`Hub.wait` now (not busy with what it was woken for)."""
        return self._fut is not None

    def __init__(self, ride: bool = False, version: str | None = None) -> None:
        self.notified: list[str | None] = []
        self._fut: asyncio.Future[None] | None = None
        #: a claim riding on a report (its request ends either way): woken before a worker's poll
        self.ride = ride
        #: the version of its node the polling worker runs: what its claims may take
        self.version = version

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
        # Per node key: the generation and the versions whose claims came back short at it; once
        # the queue counts as drained, the versions that showed it (see ``claimed``).
        self._short: dict[str, tuple[int, frozenset[str | None]]] = {}
        self._drained_for: dict[str, frozenset[str | None]] = {}

    def close(self) -> None:
        """Wake every waiter and make later waits return at once (graceful shutdown: a long
        poll must not hold the server past its shutdown timeout)."""
        self.closing = True
        for waiters in list(self._waiters.values()):
            for listener in list(waiters):
                listener._notify(None)

    def subscribe(self, key: str, *, ride: bool = False, version: str | None = None) -> Listener:
        """Listen on ``key`` until :meth:`unsubscribe` (subscribe before checking the store);
        ``version``: a claim poll's worker's version of the node."""
        listener = Listener(ride, version)
        self._waiters.setdefault(key, {})[listener] = None
        return listener

    def unsubscribe(self, key: str, listener: Listener) -> None:
        """Stop listening. A claim poll's listener that leaves with a notification it did not
        :meth:`take` passes it on to another waiter on the node, and one that leaves without
        claiming no longer counts as on its way to claim what is owed."""
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.pop(listener, None)
            if not waiters:
                del self._waiters[key]
        if key.startswith(_NODE) and not self.closing:
            notified, listener.notified = listener.notified, []
            if notified or not self._vague.get(key, True):
                self._hand_on(key)

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
            self._hand_on(key)
            return
        for listener in list(self._waiters.get(key, ())):
            listener._notify(status)

    def pass_on(self, key: str, but: frozenset[str | None] = frozenset()) -> None:
        """Wake one claim poll on node ``key`` that has nothing notified yet, one in
        :meth:`wait` before one busy claiming, a report's claim before a worker's own poll; none
        when all of them already have something. ``but``: versions whose polls are passed over."""
        busy = None
        idle = None
        for listener in self._waiters.get(key, ()):
            if listener.notified or listener.version in but:
                continue
            if listener.waiting:
                if listener.ride:
                    listener._notify(None)
                    return
                if idle is None:
                    idle = listener
            elif busy is None:
                busy = listener
        if idle is not None:
            idle._notify(None)
        elif busy is not None:
            busy._notify(None)

    def take(self, listener: Listener) -> list[str | None]:
        """What was notified to ``listener`` since it last took, oldest first."""
        notified, listener.notified = listener.notified, []
        return notified

    def generation(self, key: str) -> int:
        return self._generation.get(key, 0)

    def claimed(self, key: str, listener: Listener, generation: int, asked: int, got: int) -> None:
        """``listener``'s claim on node ``key``, begun at ``generation``, asked for ``asked`` tasks
        and took ``got``: they are counted off what was owed, and idle polls are woken if more is
        owed than the other polls on their way can take (see the module's docstring). A claim that
        took fewer than it asked, with nothing notified since it began, saw the queue drained of
        what its version may run; once every version polling the node has, the queue counts as
        drained, and until then one poll of a version that has not is woken to look."""
        if got < asked and self._generation.get(key, 0) == generation:
            seen_at, short = self._short.get(key, (-1, frozenset()))
            short = (short if seen_at == generation else frozenset()) | {listener.version}
            polling = {other.version for other in self._waiters.get(key, ())}
            self._short[key] = (generation, short)
            if polling <= short:
                self._drained_for[key] = short
                self._owed[key] = 0
                self._vague[key] = False
            else:  # tasks pinned to another version may be queued: one of its polls looks
                self._vague[key] = True
                self.pass_on(key, but=short)
            return
        self._owed[key] = max(self._owed.get(key, 0) - got, 0)
        if self._vague.get(key, True):
            if got >= asked:
                self.pass_on(key)  # as many as it asked for: more may be queued
        else:
            self._settle(key, listener)

    def _hand_on(self, key: str) -> None:
        if self._vague.get(key, True):
            self.pass_on(key)
        else:
            self._settle(key, None)

    def _settle(self, key: str, claiming: Listener | None) -> None:
        """Wake idle polls on node ``key`` (reports' claims first, then the longest waiting)
        while more tasks are owed than the polls other than ``claiming`` that are woken or
        claiming already will take."""
        on_their_way, idle = self._on_their_way(key, claiming)
        idle.sort(key=lambda listener: not listener.ride)  # reports' claims first, each by age
        for listener in idle[: max(self._owed.get(key, 0) - on_their_way, 0)]:
            listener._notify(None)

    def _on_their_way(self, key: str, other_than: Listener | None) -> tuple[int, list[Listener]]:
        """How many polls on node ``key`` (but ``other_than``) are woken or claiming, and the
        idle ones, longest waiting first."""
        idle: list[Listener] = []
        busy = 0
        for listener in self._waiters.get(key, ()):
            if listener is other_than:
                continue
            if listener.notified or not listener.waiting:
                busy += 1
            else:
                idle.append(listener)
        return busy, idle

    def may_have_work(
        self, key: str, listener: Listener | None = None, *, version: str | None = None
    ) -> bool:
        """Whether node ``key`` may have queued work that no poll is on its way to claim: False
        when every task notified one by one was claimed here or has a poll other than
        ``listener`` woken for it or claiming, and no notification of an unknown number (here
        or, on PostgreSQL, from another server) came since a claim last found the queue short.
        A hint for the claims that ride on reports, which skip their first read on it (a wrong
        False, work that came due without a notification, only means the worker's own long poll
        finds it, at most the report's wait later); a worker's claim requests never skip one.
        ``version`` (or ``listener``'s): a version whose claims did not show the queue drained
        may have work pinned to it."""
        if self._vague.get(key, True):
            return True
        if (listener.version if listener is not None else version) not in self._drained_for.get(key, ()):
            return True
        return self._owed.get(key, 0) > self._on_their_way(key, listener)[0]

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
