"""The main job (``make run``): the engine end to end on the embedded SQLite default.

1. pyworkflow: the spec's ``review_step`` suspends on a step hook and is resumed.
2. atfgraph: a graph server (SQLite in ``$ATFGRAPH_HOME``, default ``~/.atfgraph``) and a worker
   for the spec's refund desk; one refund is submitted, pauses for approval, is approved by a
   reviewer program and finishes.
3. A second refund is left pending for you: the job prints how to decide it (the console, the
   ``atfg`` CLI, ``curl``), watches it, and prints the result when you decide. Then the server and
   the worker keep running for you to try more by hand; Ctrl-C (or SIGTERM) stops both.

    python -m examples.main_job [--port 7878] [--once]

``--once`` stops after the pending refund is decided instead of waiting for Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
AGENT = "examples.python.features.approvals.agent:app"
#: The refund left for a person: above the desk's auto-approval limit, so it asks a reviewer.
PENDING_REFUND = {"ticket": "QF-4417", "amount_aud": 520.0, "reason": "flight cancelled, rebooked by phone"}


class Stop(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every ``finally`` runs and the children are stopped."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Stop


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _die_with_parent() -> None:
    """In the child, before exec: be sent SIGTERM when the main job dies, even by SIGKILL
    (Linux's PR_SET_PDEATHSIG); elsewhere the main job's ``finally`` is the only guard."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], env=env, cwd=REPO, preexec_fn=_die_with_parent)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    # The worker first, so that it is not in a long-poll claim when the server stops.
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the graph server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the graph server at {url} did not become ready in {seconds} s")


def _banner(text: str) -> None:
    print(f"\n== {text}", flush=True)


@contextlib.contextmanager
def graph_server_and_worker(port: int, home: Path, env: dict[str, str]) -> Iterator[str]:
    """A graph server on ``port`` and a worker for the refund desk, stopped on the way out
    (also on Ctrl-C and SIGTERM); yields the server's URL."""
    url = f"http://127.0.0.1:{port}"
    if not _port_free(port):
        raise SystemExit(
            f"port {port} is in use (another graph server, or an earlier run still stopping?); "
            f"choose another: make run PORT={port + 1}, or python -m examples.main_job --port {port + 1}"
        )
    _banner(f"atfgraph: graph server on {url}, data in {home}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        server = _spawn(["-m", "atfgraph.server", "--port", str(port)], env)
        procs.append(server)
        _wait_ready(url, server)
        procs.insert(0, _spawn(["-m", "atfgraph.worker", "--module", AGENT], env))
        yield url
    finally:
        if procs:
            print("stopping the worker and the graph server", file=sys.stderr, flush=True)
        _stop(procs)


def how_to_decide(url: str, home: Path, approval: dict[str, Any], bin_dir: str) -> str:
    """The three ways to decide ``approval``, as commands to copy."""
    approval_id, run_id = approval["id"], approval["traverser_id"]
    creds = home / "credentials.json"
    read_token = f"{bin_dir}python -c \"import json; print(json.load(open('{creds}'))['owner'])\""
    body = json.dumps({"decision": "approved", "response": {"note": "checked the booking"}})
    return (
        f"refund {approval['prompt'].get('question')!r} is waiting for a person: approval {approval_id}\n"
        f"decide it in any one of three ways:\n"
        f"\n"
        f"  1. the review console: open {url}/login and paste the owner token, which this prints:\n"
        f"       {read_token}\n"
        f"     then open {url}/runs/{run_id} (or the Inbox) and approve or reject it\n"
        f"\n"
        f"  2. the atfg command line (another terminal, in {REPO}):\n"
        f'       {bin_dir}atfg approvals decide {approval_id} --approve --response \'{{"note": "ok"}}\'\n'
        f"\n"
        f"  3. curl:\n"
        f"       TOKEN=$({read_token})\n"
        f'       curl -sS -X POST -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \\\n'
        f"         -d '{body}' {url}/api/v2/approvals/{approval_id}/decide\n"
    )


async def leave_one_pending(url: str, home: Path, bin_dir: str) -> None:
    """Submit a refund that waits for a person, say how to decide it, and watch for the result."""
    from atfgraph import Client, TraverserFailedError

    async with Client(url) as client:
        handle, info = await client.submit_and_wait(
            "refunds.request_refund", PENDING_REFUND, statuses="waiting,terminal", timeout=60
        )
        if info.status != "waiting":
            raise SystemExit(f"the pending refund {handle.id} reached {info.status} instead of waiting")
        approval = await client.get_approval(str(info.waiting_on))
        print(how_to_decide(url, home, approval, bin_dir), flush=True)
        print(f"watching run {handle.id} until you decide ...", flush=True)
        try:
            result = await handle.result(timeout=None)  # long polls: answered the moment it changes
        except TraverserFailedError as exc:
            print(f"run {handle.id} ended {exc}", flush=True)
            return
        decided = await client.get_approval(approval["id"])
        print(f"decided   {decided['status']} by {decided['decided_by']}", flush=True)
        print("result", json.dumps(result, sort_keys=True), flush=True)


def by_hand(url: str, bin_dir: str) -> str:
    review_mod = "examples.python.features.approvals.review"
    return (
        f"  export ATFGRAPH_SERVER={url}\n"
        f'  {bin_dir}atfg runs start refunds.request_refund --input \'{{"ticket": "QF-4417", '
        f'"amount_aud": 480}}\'   # prints the run id; it waits for you\n'
        f"  {bin_dir}python -m {review_mod} --ticket QF-4417 --amount 610 --no-decide   # the same\n"
        f"  {bin_dir}atfg ps                      # runs waiting for a decision, and on what\n"
        f"  {bin_dir}atfg approvals list          # pending approvals; decide one with:\n"
        f'  {bin_dir}atfg approvals decide ID --approve --response \'{{"note": "ok"}}\'\n'
        f"  {bin_dir}atfg runs watch RUN          # follow a run to its end\n"
        f"  {bin_dir}python -m {review_mod} --ticket NZ-0882 --amount 150   # under the limit: no review\n"
        "Ctrl-C stops the server and the worker."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the engine end to end on SQLite.")
    parser.add_argument("--port", type=int, default=7878)
    parser.add_argument("--once", action="store_true", help="stop once the pending refund is decided")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        run(args.port, args.once)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the children were stopped on the way out
        print("stopped", file=sys.stderr, flush=True)
        sys.exit(143 if isinstance(exc, Stop) else 130)


def run(port: int, once: bool) -> None:
    _banner("pyworkflow: a step that waits for a reviewer (embedded SQLite)")
    from examples.pyworkflow import review_step

    asyncio.run(review_step.main(Path(tempfile.mkdtemp(prefix="pyworkflow-")) / "review.db"))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    home = Path(env.get("ATFGRAPH_HOME") or Path.home() / ".atfgraph")
    venv_bin = Path(sys.executable).parent
    bin_dir = f"{os.path.relpath(venv_bin, Path.cwd())}/" if (venv_bin / "atfg").exists() else ""
    env["ATFGRAPH_SERVER"] = f"http://127.0.0.1:{port}"
    with graph_server_and_worker(port, home, env) as url:
        os.environ["ATFGRAPH_SERVER"] = url
        _banner("a refund above the desk's limit pauses for a reviewer, who approves it")
        from examples.python.features.approvals import review

        asyncio.run(review.main("QF-4417", 480.0, "approved"))

        _banner("another refund waits for you")
        asyncio.run(leave_one_pending(url, home, bin_dir))
        if once:
            return
        _banner("the server and the worker keep running; in another terminal, try:")
        print(by_hand(url, bin_dir), flush=True)
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
