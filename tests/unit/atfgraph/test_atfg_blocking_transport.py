"""``BlockingTransport`` (the CLI's calls) against a small threaded HTTP server: the API prefix,
JSON bodies, keep-alive across calls, typed errors, a 503 that keeps the server's answer, and the
pool's reason for a server that cannot be reached."""

from __future__ import annotations

import json
import pickle
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from atfgraph import NotFoundError, ServerError, ServerUnavailableError, UnauthenticatedError
from atfgraph._http import HttpPool, NoAnswerError
from atfgraph._transport import BlockingTransport

ANSWERS: dict[str, tuple[int, Any]] = {
    "/api/v2/traversers/a%2Fb": (200, {"id": "a/b"}),
    "/api/v2/traversers/gone": (
        404,
        {"error": {"code": "not_found", "message": "traverser 'gone' not found"}},
    ),
    "/api/v2/approvals": (401, {"error": {"code": "unauthenticated", "message": "no token"}}),
    "/api/v2/tokens": (503, {"error": {"code": "database_unavailable", "message": "db down"}}),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    seen: ClassVar[list[tuple[str, str, str | None, Any, int]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        path, _, query = self.path.partition("?")
        port = self.client_address[1]
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body, port))
        status, answer = ANSWERS.get(path, (200, {"echo": body, "query": query}))
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_blocking_calls_share_the_transports_paths_bodies_and_connections(server: str) -> None:
    transport = BlockingTransport(server + "/", token="atfg_secret")
    try:
        assert transport.base_url == server
        assert transport.request("GET", "/traversers/a%2Fb") == {"id": "a/b"}
        answer = transport.request(
            "POST", "/hooks/x/resume", {"payload": [1, "two"]}, {"limit": 5, "no": None}
        )
        assert answer == {"echo": {"payload": [1, "two"]}, "query": "limit=5"}
    finally:
        transport.close()
    assert [(m, p, auth, b) for m, p, auth, b, _ in _Handler.seen] == [
        ("GET", "/api/v2/traversers/a%2Fb", "Bearer atfg_secret", None),
        ("POST", "/api/v2/hooks/x/resume?limit=5", "Bearer atfg_secret", {"payload": [1, "two"]}),
    ]
    assert len({port for *_, port in _Handler.seen}) == 1  # one keep-alive connection


def test_blocking_calls_raise_the_typed_errors(server: str) -> None:
    transport = BlockingTransport(server, token="t")
    try:
        with pytest.raises(NotFoundError) as missing:
            transport.request("GET", "/traversers/gone")
        assert (missing.value.status, missing.value.message) == (404, "traverser 'gone' not found")
        with pytest.raises(UnauthenticatedError):
            transport.request("GET", "/approvals")
        # 503: retried like an unreachable server by the SDK; the server's answer is the cause.
        with pytest.raises(ServerUnavailableError) as unavailable:
            transport.request("GET", "/tokens")
        cause = unavailable.value.__cause__
        assert isinstance(cause, ServerError) and (cause.code, cause.status) == ("database_unavailable", 503)
    finally:
        transport.close()


def test_no_answer_says_why_without_the_address() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    transport = BlockingTransport(f"http://127.0.0.1:{port}", token="t")
    try:
        with pytest.raises(NoAnswerError) as refused:
            transport.request("GET", "/traversers")
    finally:
        transport.close()
    error = refused.value
    assert (error.reason, error.timed_out) == ("[Errno 111] Connection refused", False)
    assert error.message == f"cannot talk to 127.0.0.1:{port}: [Errno 111] Connection refused"
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.message, again.reason, again.timed_out) == (
        NoAnswerError,
        error.message,
        error.reason,
        False,
    )


@pytest.mark.parametrize("url", ["foo", "ftp://x", "http://[bad", "http://h:99999", "http://h:port"])
def test_a_bad_server_url_is_one_message(url: str) -> None:
    with pytest.raises(ValueError, match=r"^server URL must be http\(s\)://host\[:port\], not "):
        HttpPool(url)
