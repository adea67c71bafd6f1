"""Named crash points for crash-recovery tests.

``PYWORKFLOW_CRASH_AT="name"`` or ``"name:N"`` makes the process exit at once (``os._exit``, no
cleanup, like SIGKILL) the Nth time execution passes the named point. Unset, a point costs one
dictionary lookup.
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


def crashpoint(name: str) -> None:
    if _target is None or _target[0] != name:
        return
    passes = _passes.get(name, 0) + 1
    _passes[name] = passes
    if passes >= _target[1]:
        sys.stderr.write(f"pyworkflow: crash point {name!r} reached (pass {passes}); exiting\n")
        sys.stderr.flush()
        os._exit(137)
