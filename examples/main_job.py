"""The main job (``make run``): the engine end to end on the embedded SQLite default.

1. pyworkflow: the spec's ``review_step`` suspends on a step hook and is resumed.
2. atfgraph: a graph server (SQLite in ``$ATFGRAPH_HOME``, default ``~/.atfgraph``) and a worker
   for the spec's refund desk; one refund is submitted, pauses for approval, is approved by a
   reviewer program and finishes. Then both keep running for you to try by hand (Ctrl-C stops).

    python -m examples.main_job [--port 7878] [--once]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the engine end to end on SQLite.")
    parser.add_argument("--port", type=int, default=7878)
    parser.add_argument("--once", action="store_true", help="stop after the demonstration")
    args = parser.parse_args()

    _banner("pyworkflow: a step that waits for a reviewer (embedded SQLite)")
    from examples.pyworkflow import review_step

    asyncio.run(review_step.main(Path(tempfile.mkdtemp(prefix="pyworkflow-")) / "review.db"))

    url = f"http://127.0.0.1:{args.port}"
    if not _port_free(args.port):
        raise SystemExit(f"port {args.port} is in use; pass --port to choose another")
    env = {**os.environ, "ATFGRAPH_SERVER": url, "PYTHONPATH": str(REPO)}
    home = Path(env.get("ATFGRAPH_HOME") or Path.home() / ".atfgraph")
    _banner(f"atfgraph: graph server on {url}, data in {home}")
    server = subprocess.Popen(
        [sys.executable, "-m", "atfgraph.server", "--port", str(args.port)], env=env, cwd=REPO
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        _wait_ready(url, server)
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "atfgraph.worker",
                "--module",
                "examples.python.features.approvals.agent:app",
            ],
            env=env,
            cwd=REPO,
        )
        _banner("a refund above the desk's limit pauses for a reviewer, who approves it")
        os.environ["ATFGRAPH_SERVER"] = url
        from examples.python.features.approvals import review

        asyncio.run(review.main("QF-4417", 480.0, "approved"))
        if args.once:
            return
        _banner("the server and the worker keep running; in another terminal, try:")
        py = ".venv/bin/python" if (REPO / ".venv").exists() else "python"
        review_mod = "examples.python.features.approvals.review"
        print(
            f"  export ATFGRAPH_SERVER={url}\n"
            f"  {py} -m {review_mod} --ticket QF-4417 --amount 480 --decision rejected\n"
            f"  {py} -m {review_mod} --ticket NZ-0882 --amount 150\n"
            f"  .venv/bin/atfg ps                      # runs waiting for a decision\n"
            f"  .venv/bin/atfg approvals list          # pending approvals; decide with:\n"
            f'  .venv/bin/atfg approvals decide ID --approve --response \'{{"note": "ok"}}\'\n'
            f"  open {url}/  (the review console; sign in with a token from {home / 'credentials.json'})\n"
            "Ctrl-C stops both.",
            flush=True,
        )
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        # The worker first, so that it is not in a long-poll claim when the server stops.
        for proc in (worker, server):
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
