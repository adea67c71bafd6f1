"""Counting this process's fsyncs with strace: noise-free, unlike the wall clock on a shared machine.

``FsyncCounter`` attaches ``strace -f -c -e trace=fsync,fdatasync -p <this pid>`` (every thread of
the process, the database writer's included) for the duration of a ``with`` block and reads the
summary table strace prints when it detaches. ptrace stops the process at every system call while
attached, so a traced phase is slower: the benchmarks count fsyncs in a pass of their own and never
report the timings of that pass.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

STRACE_ARGS = ("-f", "-c", "-e", "trace=fsync,fdatasync")


def strace_available() -> bool:
    """Whether strace exists and may attach to this process (root, or ptrace allowed)."""
    if shutil.which("strace") is None:
        return False
    try:
        with FsyncCounter():
            pass
    except RuntimeError:
        return False
    return True


def parse_summary(text: str) -> int:
    """The number of fsync and fdatasync calls in strace's ``-c`` table."""
    calls = 0
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[-1] in ("fsync", "fdatasync"):
            # "% time  seconds  usecs/call  calls  [errors]  syscall": calls is the 4th column
            calls += int(parts[3])
    return calls


class FsyncCounter:
    """``with FsyncCounter() as c: ...`` then ``c.fsyncs``: fsync+fdatasync calls made by every
    thread of this process inside the block."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.fsyncs = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = Path(tempfile.mkstemp(prefix="strace-", suffix=".txt")[1])
        self._stderr: list[bytes] = []
        self._reader = threading.Thread()

    def __enter__(self) -> FsyncCounter:
        strace = shutil.which("strace")
        if strace is None:
            raise RuntimeError("strace is not installed")
        cmd = [strace, *STRACE_ARGS, "-o", str(self._out), "-p", str(self.pid)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        attached = threading.Event()
        assert self._proc.stderr is not None
        stream = self._proc.stderr

        def read() -> None:
            for line in stream:
                self._stderr.append(line)
                if b"attached" in line:
                    attached.set()
            attached.set()  # strace ended (it could not attach): __enter__ reports it

        self._reader = threading.Thread(target=read, name="strace-stderr", daemon=True)
        self._reader.start()
        if not attached.wait(10) or self._proc.poll() is not None:
            self._stop()
            raise RuntimeError("strace could not attach: " + b"".join(self._stderr).decode(errors="replace"))
        time.sleep(0.05)  # "attached" is printed per process; let every thread be seized
        return self

    def _stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._reader.ident is not None:
            self._reader.join(5)
        if self._proc.stderr is not None:
            self._proc.stderr.close()
        self._proc = None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop()
        try:
            self.fsyncs = parse_summary(self._out.read_text())
        finally:
            self._out.unlink(missing_ok=True)
