"""The side-effect ledger of the reliability suite.

An append-only file written by the trial's own steps and handlers (and by the processes that
start runs and decide waits): one JSON line per side-effect execution, written with one
``write`` on an ``O_APPEND`` descriptor and ``fsync``ed before the code goes on, so a line in
the file is an execution that really happened, whichever process did it and however it died
afterwards. The :mod:`~tests.reliability.oracle` compares it with the database.

A line is ``{"run": KEY, "what": NAME, "pid": PID, ...}``: ``run`` is the trial's key for the run
(a pyworkflow workload passes it as an argument; an atfgraph handler uses its traverser id),
``what`` names the effect (``"prepare"``, ``"setup"``, ``"checkpoint"``, ``"decide"``...), extra
fields say more (``revision`` of a checkpoint write, ``outcome`` of a decision, ``attempt``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Entry", "Ledger"]


@dataclass(frozen=True)
class Entry:
    """One recorded execution."""

    run: str
    what: str
    pid: int
    extra: dict[str, Any]


class Ledger:
    """An append-only, fsynced file of executions, shared by every process of a trial."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def from_env(cls, variable: str = "RELIABILITY_LEDGER") -> Ledger:
        """The ledger a trial's harness named in the environment of the processes it starts."""
        return cls(os.environ[variable])

    def record(self, run: str, what: str, **extra: Any) -> None:
        """Append one line and make it durable before returning."""
        line = json.dumps({"run": run, "what": what, "pid": os.getpid(), **extra}, sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self) -> list[Entry]:
        """Every complete line, in the order written. A line cut short by a kill mid-write (the
        last one, unterminated) did not finish, so it is not an entry."""
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text().split("\n")[:-1]:
            data = json.loads(line)
            run, what, pid = data.pop("run"), data.pop("what"), data.pop("pid")
            found.append(Entry(run, what, pid, data))
        return found

    def counts(self, what: str) -> Counter[str]:
        """Executions of ``what`` per run key."""
        return Counter(e.run for e in self.entries() if e.what == what)
