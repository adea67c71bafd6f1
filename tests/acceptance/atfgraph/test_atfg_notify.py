"""Notifications against a real server and real local HTTP receivers: a created approval or
pyworkflow hook is POSTed (with a Slack-compatible ``text``) to every configured endpoint after
its commit; an endpoint that is down is retried with back-off, every attempt recorded, and lands
in the dead-letter list (API and console) after the last attempt; one that comes up later gets
the next events."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, free_port, wait_until

import pyworkflow
from pyworkflow import hook, workflow


class Receiver:
    """A local HTTP endpoint in a thread: answers 503 to its first ``failures`` requests, then
    200, and keeps every body it was sent."""

    def __init__(self, port: int, failures: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.requests += 1
                if receiver.requests <= failures:
                    self.send_response(503)
                    self.end_headers()
                    self.wfile.write(b"down for maintenance")
                    return
                receiver.bodies.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    started: list[Receiver] = []
    yield started
    for r in started:
        r.close()


@workflow
async def notified_sign_off(doc: str) -> dict[str, Any]:
    return {"answer": await hook("sign_off")}


def api(server: ServerProcess, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {token or server.token()}"}
    return httpx.request(method, server.url + "/api/v2" + path, headers=headers, timeout=10, **kw)


def new_approval(server: ServerProcess, prompt: Any) -> str:
    trav = api(server, "POST", "/traversers", json={"target": "nobody.skill"}).json()["id"]
    body = {"traverser_id": trav, "operation_key": "k", "prompt": prompt, "pause": False}
    approval_id: str = api(server, "POST", "/approvals", json=body).json()["approval"]["id"]
    return approval_id


def deliveries(server: ServerProcess, status: str) -> list[dict[str, Any]]:
    r = api(server, "GET", "/notifications", params={"status": status})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def every_delivery(server: ServerProcess) -> list[dict[str, Any]]:
    return [d for status in ("pending", "delivered", "dead") for d in deliveries(server, status)]


async def test_a_down_endpoint_is_retried_then_dead_lettered_and_gets_later_events_once_up(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    # The down endpoint's port is held bound but not listening until it comes up: a connection
    # to it is refused at once, and no other process can take the port meanwhile (one that
    # accepted and never answered would turn each attempt into a 10 s timeout).
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    down_port, flaky_port = held.getsockname()[1], free_port()
    down, flaky = f"http://127.0.0.1:{down_port}/hook", f"http://127.0.0.1:{flaky_port}/slack"
    receivers.append(Receiver(flaky_port, failures=1))  # up, but its first answer is a 503
    server = ServerProcess(tmp_path)
    server.env.update(
        ATFGRAPH_NOTIFY=f"{down},{flaky}",
        ATFGRAPH_NOTIFY_MAX_ATTEMPTS="3",
        ATFGRAPH_NOTIFY_BACKOFF_SECONDS="0.2",
        ATFGRAPH_NOTIFY_POLL_SECONDS="0.05",
        ATFGRAPH_PUBLIC_URL="https://review.example.com",
    )
    server.start()
    try:
        approval_id = new_approval(server, {"question": "Refund 480 AUD on QF-4417?"})
        flaky_rx = receivers[0]
        wait_until(lambda: len(flaky_rx.bodies) == 1, 20, "the flaky endpoint never got the event")
        event = flaky_rx.bodies[0]
        assert flaky_rx.requests == 2  # the 503 was retried
        assert event["event"] == "wait.created"
        assert event["text"].startswith("Approval requested on nobody.skill: Refund 480 AUD on QF-4417?")
        assert event["wait"]["id"] == approval_id and event["wait"]["kind"] == "approval"
        assert event["wait"]["prompt"] == {"question": "Refund 480 AUD on QF-4417?"}
        assert event["console_url"].startswith("https://review.example.com/runs/")

        wait_until(
            lambda: len(deliveries(server, "dead")) == 1,
            20,
            lambda: (
                f"the down endpoint never reached dead letters: {every_delivery(server)}\n"
                + server.log_tail()
            ),
        )
        (dead,) = deliveries(server, "dead")
        assert (dead["endpoint"], dead["wait_id"], dead["attempts"]) == (down, approval_id, 3)
        assert "ConnectError" in dead["last_error"]
        (delivered,) = deliveries(server, "delivered")
        assert (delivered["endpoint"], delivered["attempts"], delivered["last_error"]) == (flaky, 2, None)
        assert deliveries(server, "pending") == []

        # The dead-letter list in the console (owners and administrators only).
        page = httpx.get(server.url + "/notifications", headers={"authorization": f"Bearer {server.token()}"})
        assert page.status_code == 200 and down in page.text and "ConnectError" in page.text
        assert 'href="/notifications"' in page.text  # in the navigation
        r = api(server, "POST", "/tokens", json={"name": "rita", "role": "reviewer"})
        reviewer = r.json()["token"]
        assert (
            httpx.get(
                server.url + "/notifications", headers={"authorization": f"Bearer {reviewer}"}
            ).status_code
            == 403
        )
        assert api(server, "GET", "/notifications", token=reviewer).status_code == 403
        assert api(server, "GET", "/notifications", params={"status": "lost"}).status_code == 422

        # A pyworkflow hook in the same database is announced by the same mechanism.
        pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
        try:
            run_id = await pyworkflow.start(notified_sign_off, "doc")
            await pyworkflow.wait_for_run(run_id, timeout=15, until=("suspended",))
            wait_until(lambda: len(flaky_rx.bodies) == 2, 20, "the hook was never announced")
            hooked = flaky_rx.bodies[1]
            assert (hooked["wait"]["kind"], hooked["wait"]["name"], hooked["wait"]["run_id"]) == (
                "hook",
                "sign_off",
                run_id,
            )
            assert hooked["text"].startswith("Hook 'sign_off' waits on")
        finally:
            await pyworkflow.shutdown()
            pyworkflow.configure()

        # The down endpoint comes up: the next event reaches it (the hook's event may have been
        # delivered on a retry too, or dead-lettered first); the dead letter stays dead.
        held.close()
        receivers.append(Receiver(down_port))
        later = new_approval(server, "And this one?")
        up = receivers[1]
        wait_until(
            lambda: later in {b["wait"]["id"] for b in up.bodies},
            20,
            lambda: f"the endpoint that came up got nothing: {every_delivery(server)}\n" + server.log_tail(),
        )
        dead_now = deliveries(server, "dead")
        assert approval_id in [d["wait_id"] for d in dead_now] and {d["endpoint"] for d in dead_now} == {down}
        wait_until(
            lambda: deliveries(server, "pending") == [],
            20,
            lambda: f"a delivery stayed pending: {every_delivery(server)}\n" + server.log_tail(),
        )
    finally:
        held.close()
        server.close()


def test_a_bad_notify_endpoint_stops_the_server_at_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    server = ServerProcess(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atfgraph.server",
            "--port",
            str(server.port),
            "--db",
            server.db,
            "--notify",
            "ftp://x",
        ],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "http:// or https://" in done.stderr
    server.close()


def test_a_nodes_endpoints_hear_its_own_approvals_and_the_servers_hear_every_wait(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    server_port, refunds_port, billing_port = free_port(), free_port(), free_port()
    for port in (server_port, refunds_port, billing_port):
        receivers.append(Receiver(port))
    everyone, refunds_team, billing_team = receivers
    server = ServerProcess(tmp_path)
    server.env.update(
        ATFGRAPH_NOTIFY=f"http://127.0.0.1:{server_port}/all",
        ATFGRAPH_NOTIFY_NODES=f"refunds=http://127.0.0.1:{refunds_port}/r,"
        f"billing=http://127.0.0.1:{billing_port}/b",
        ATFGRAPH_NOTIFY_POLL_SECONDS="0.05",
    )
    server.start()
    try:

        def approval_on(target: str, question: str) -> str:
            trav = api(server, "POST", "/traversers", json={"target": target}).json()["id"]
            body = {
                "traverser_id": trav,
                "operation_key": "k",
                "prompt": {"question": question},
                "pause": False,
            }
            approval_id: str = api(server, "POST", "/approvals", json=body).json()["approval"]["id"]
            return approval_id

        refund = approval_on("refunds.request_refund", "Refund 480 AUD?")
        invoice = approval_on("billing.void_invoice", "Void invoice 77?")
        other = approval_on("shipping.reroute", "Reroute parcel 9?")
        wait_until(lambda: len(everyone.bodies) == 3, 20, "the server's endpoint missed an event")
        wait_until(
            lambda: len(refunds_team.bodies) == 1 and len(billing_team.bodies) == 1, 20, "a node missed"
        )
        assert [b["wait"]["id"] for b in refunds_team.bodies] == [refund]
        assert [b["wait"]["id"] for b in billing_team.bodies] == [invoice]
        assert {b["wait"]["id"] for b in everyone.bodies} == {refund, invoice, other}
        assert refunds_team.bodies[0]["wait"]["node_id"] == "refunds"
        delivered = deliveries(server, "delivered")
        assert sorted(d["endpoint"].rsplit("/", 1)[1] for d in delivered) == ["all", "all", "all", "b", "r"]
        # The console's Notifications page says which node goes where.
        page = httpx.get(server.url + "/notifications?status=delivered", headers=server.headers())
        assert f"<code>refunds</code> → <code>http://127.0.0.1:{refunds_port}/r</code>" in page.text
    finally:
        server.close()


def test_a_bad_node_endpoint_stops_the_server_at_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    server = ServerProcess(tmp_path)
    for bad in ("refunds", "=http://x", "refunds=ftp://x"):
        done = subprocess.run(
            [sys.executable, "-m", "atfgraph.server", "--port", str(server.port), "--db", server.db,
             "--notify-node", bad],
            env=server.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "NODE=URL" in done.stderr or "http:// or https://" in done.stderr, done.stderr
    server.close()
