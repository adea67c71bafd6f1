"""The README's main job (``make run``) works end to end: pyworkflow's review step, then the graph
server, a worker and one approval cycle, all on the embedded SQLite default; then a refund is left
pending for a person, the job prints three ways to decide it and the result once it is decided
(here by the printed ``atfg`` and ``curl`` commands, run as printed, from other processes); and
SIGTERM stops the server and the worker it started."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEX32 = "[0-9a-f]{32}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class MainJob:
    """``python -m examples.main_job`` as ``make run`` starts it, its output read line by line."""

    def __init__(self, home: Path, *args: str) -> None:
        self.port = _free_port()
        self.env = {**os.environ, "ATFGRAPH_HOME": str(home), "PYTHONPATH": str(REPO)}
        self.env.pop("ATFGRAPH_TOKEN", None)
        self.env.pop("ATFGRAPH_SERVER", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "examples.main_job", "--port", str(self.port), *args],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, pattern: str, seconds: float = 240) -> re.Match[str]:
        """Read output until a line matches ``pattern``."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matched {pattern!r} in {seconds} s:\n" + self.output) from None
            if line is None:
                raise AssertionError(f"the job ended before {pattern!r}:\n" + self.output)
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def command_after(self, marker: str) -> str:
        """The command printed on the lines after ``marker`` (continuation lines joined)."""
        start = next(i for i, line in enumerate(self.lines) if marker in line) + 1
        parts = []
        for line in self.lines[start:]:
            parts.append(line.strip().removesuffix("\\"))
            if not line.endswith("\\"):
                break
        return " ".join(parts)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[list[MainJob]]:
    jobs: list[MainJob] = []
    yield jobs
    for j in jobs:
        j.stop()


def _pending_in_ps(j: MainJob) -> list[dict[str, object]]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "atfg"), "ps", "-o", "json"],
        cwd=REPO,
        env={**j.env, "ATFGRAPH_SERVER": f"http://127.0.0.1:{j.port}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    items: list[dict[str, object]] = json.loads(done.stdout)
    return items


def _wait_for_the_person(j: MainJob) -> tuple[str, str]:
    """Through the job's own cycle to the refund it leaves pending: (approval id, run id)."""
    j.until(r"expensive_setup ran 1 time\(s\)")
    j.until("decided    approved by owner")
    approval = j.until(rf"is waiting for a person: approval ({HEX32})").group(1)
    run = j.until(rf"watching run ({HEX32}) until you decide").group(1)
    out = j.output
    assert f"http://127.0.0.1:{j.port}/login" in out and "['owner']" in out  # 1. the console
    assert f"http://127.0.0.1:{j.port}/runs/{run}" in out
    assert f"atfg approvals decide {approval} --approve" in out  # 2. the CLI
    assert f"/api/v2/approvals/{approval}/decide" in out and "curl " in out  # 3. curl
    waiting = [i for i in _pending_in_ps(j) if i["id"] == run]
    assert [(i["status"], i["waiting_on"]) for i in waiting] == [("waiting", approval)]
    return approval, run


def _assert_stopped(j: MainJob, children: list[int]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (any(_alive(p) for p in children) or not _port_free(j.port)):
        time.sleep(0.1)
    assert not [p for p in children if _alive(p)], j.output
    assert _port_free(j.port)


def test_main_job_leaves_a_refund_for_a_person_decided_with_curl(tmp_path: Path, job: list[MainJob]) -> None:
    if shutil.which("curl") is None:
        raise AssertionError("curl is not installed (apt-get install -y curl)")
    j = MainJob(tmp_path)
    job.append(j)
    _wait_for_the_person(j)
    token_cmd = j.command_after("paste the owner token")
    curl = j.command_after("3. curl:")
    assert curl.startswith("TOKEN=$(") and token_cmd in curl
    curl += "\n" + j.command_after("TOKEN=$(")
    decided = subprocess.run(
        curl, shell=True, cwd=REPO, env=j.env, capture_output=True, text=True, timeout=60
    )
    assert decided.returncode == 0, decided.stderr
    assert json.loads(decided.stdout)["status"] == "approved"
    j.until("decided   approved by owner")
    result = json.loads(j.until(r"^result (\{.*\})$").group(1))
    assert result["status"] == "approved" and result["response"] == {"note": "checked the booking"}
    assert result["amount_aud"] == 520.0 and result["attempts"] == 2
    j.until("Ctrl-C stops the server and the worker.")
    assert "atfg runs start refunds.request_refund" in j.output and "--no-decide" in j.output
    children = _children(j.proc.pid)
    assert len(children) == 2  # the graph server and the worker
    j.proc.send_signal(signal.SIGTERM)
    assert j.proc.wait(60) == 143
    _assert_stopped(j, children)
    assert (tmp_path / "credentials.json").exists()
    assert "Exception" not in j.output and "Traceback" not in j.output, j.output


def test_main_job_once_ends_when_the_person_decides_with_atfg(tmp_path: Path, job: list[MainJob]) -> None:
    j = MainJob(tmp_path, "--once")
    job.append(j)
    _wait_for_the_person(j)
    command = j.command_after("2. the atfg command line").replace("--approve", "--reject")
    decided = subprocess.run(
        command, shell=True, cwd=REPO, env=j.env, capture_output=True, text=True, timeout=60
    )
    assert decided.returncode == 0, decided.stderr
    j.until("decided   rejected by owner")
    assert json.loads(j.until(r"^result (\{.*\})$").group(1))["status"] == "rejected"
    assert j.proc.wait(60) == 0
    assert _port_free(j.port)


def test_sigterm_while_waiting_stops_the_server_and_the_worker(tmp_path: Path, job: list[MainJob]) -> None:
    j = MainJob(tmp_path)
    job.append(j)
    _wait_for_the_person(j)
    children = _children(j.proc.pid)
    assert len(children) == 2
    j.proc.send_signal(signal.SIGTERM)
    assert j.proc.wait(60) == 143
    _assert_stopped(j, children)
    # The refund is still pending in the database: the next run's server finds it.
    rerun = MainJob(tmp_path)
    job.append(rerun)
    _wait_for_the_person(rerun)
    assert len([i for i in _pending_in_ps(rerun) if i["status"] == "waiting"]) == 2
