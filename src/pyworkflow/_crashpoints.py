"""Named crash points for crash-recovery tests.

``PYWORKFLOW_CRASH_AT="name"`` or ``"name:N"`` makes the process exit at once (``os._exit``, no
cleanup, like SIGKILL) the Nth time execution passes the named point. Unset, a point costs one
comparison. The engine's runtimes pass :data:`POINTS`; the graph server (``atfgraph.server``,
which calls :func:`crashpoint` through ``pyworkflow.store``) passes :data:`SERVER_POINTS`.
"""

from __future__ import annotations

import os
import sys

_target: tuple[str, int] | None = None
_passes: dict[str, int] = {}


def _load() -> tuple[str, int] | None:
    spec = os.environ.get("PYWORKFLOW_CRASH_AT", "").strip()
    if not spec:
        return None
    name, _, count = spec.partition(":")
    return (name, int(count) if count.isdigit() else 1)


_target = _load()

#: The points the engine passes, in the order a turn meets them.
POINTS = (
    "after_run_created",
    "after_step_completed",
    "after_checkpoint_saved",
    "after_wait_created",
    "after_on_created",
    "after_suspended",
    "after_hook_resumed",
    "after_claim",
)

#: The points the graph server passes, each where its transaction has committed and before the
#: HTTP answer is sent (or, for the sweeper, before anyone is woken):
SERVER_POINTS = (
    # a traverser was queued (a client's submission or a handler's child step): no 201 sent
    "server_after_submit",
    # a claim leased at least one traverser (a long poll, or tasks riding on a report): no answer
    "server_after_claim",
    # an approval request paused its traverser (the lease closed): no answer, nobody woken
    "server_after_approval_requested",
    # a decision was recorded and its traverser queued again: no answer, its workers not woken
    "server_after_decision",
    # a worker's completion was recorded (the traverser succeeded): no answer, followers not woken
    "server_after_complete",
    # a sweep expired waits or reaped run-out leases: the workers and followers not woken
    "server_after_sweep",
)


def crashpoint(name: str) -> None:
    """Exit the process here (``os._exit(137)``) when ``PYWORKFLOW_CRASH_AT`` names this point
    and this is its Nth pass; otherwise return at once. ``name`` is one of :data:`POINTS` or
    :data:`SERVER_POINTS`."""
    if _target is None or _target[0] != name:
        return
    passes = _passes.get(name, 0) + 1
    _passes[name] = passes
    if passes >= _target[1]:
        sys.stderr.write(f"pyworkflow: crash point {name!r} reached (pass {passes}); exiting\n")
        sys.stderr.flush()
        os._exit(137)
