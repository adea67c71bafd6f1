"""The SDK's small HTTP/1.1 client against a scripted asyncio server: bodies by length and by
chunks, keep-alive reuse, a keep-alive connection closed by the server, an unreachable server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from atfgraph import ServerUnavailableError
from atfgraph._http import HttpPool

Reply = Callable[[bytes], bytes]
Start = Callable[[Reply, bool], Awaitable[tuple[str, list[int]]]]


@pytest.fixture
async def scripted() -> AsyncIterator[Start]:
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []

    async def start(reply: Reply, close_after_each: bool) -> tuple[str, list[int]]:
        connections: list[int] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(1)
            writers.append(writer)
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    body = await reader.readexactly(length)
                    writer.write(reply(head + body))
                    await writer.drain()
                    if close_after_each:
                        break
            except asyncio.IncompleteReadError:
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}", connections

    yield start
    for writer in writers:
        writer.close()
    await asyncio.sleep(0.01)  # let the transports finish closing inside this loop
    for server in servers:
        server.close()
        await server.wait_closed()


def by_length(request: bytes) -> bytes:
    body = b'{"echo":%d}' % len(request)
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def chunked(request: bytes) -> bytes:
    return (
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n"
    )


async def test_keep_alive_reuses_one_connection(scripted: Start) -> None:
    url, connections = await scripted(by_length, False)
    pool = HttpPool(url)
    for _ in range(5):
        status, body = await pool.request("POST", "/x", b'{"a":1}', {"q": "v w"})
        assert status == 200 and body.startswith(b'{"echo":')
    assert len(connections) == 1
    await pool.aclose()


async def test_chunked_bodies(scripted: Start) -> None:
    url, _ = await scripted(chunked, False)
    pool = HttpPool(url)
    assert await pool.request("GET", "/x") == (404, b"abcdefg")
    await pool.aclose()


async def test_a_connection_closed_while_idle_is_replaced(scripted: Start) -> None:
    url, connections = await scripted(by_length, True)
    pool = HttpPool(url)
    for _ in range(3):
        status, _ = await pool.request("GET", "/x")
        await asyncio.sleep(0.05)  # let the server's close arrive
        assert status == 200
    assert len(connections) == 3
    await pool.aclose()


async def test_unreachable_server_and_timeouts(scripted: Start) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    pool = HttpPool(f"http://127.0.0.1:{port}")
    with pytest.raises(ServerUnavailableError):
        await pool.request("GET", "/x")

    gave_up = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await gave_up.wait()  # never answers while the client is waiting
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    slow = HttpPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    with pytest.raises(ServerUnavailableError, match="in time"):
        await slow.request("GET", "/x", timeout=0.2)
    gave_up.set()
    await asyncio.sleep(0.05)
    server.close()
    await server.wait_closed()
    await slow.aclose()
    with pytest.raises(ValueError):
        HttpPool("ftp://example.org")


async def dies_on_the_second_request(
    seen: list[bytes], handlers: list[asyncio.Task[None]]
) -> Callable[..., Awaitable[None]]:
    """A server that answers a connection's first request, then reads the second and closes the
    connection without answering, as one that carried it out and died would. Each connection's
    task goes into ``handlers`` (for the test to wait for)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        try:
            for n in (1, 2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                seen.append(head.split(b" ", 2)[0] + b" " + await reader.readexactly(length))
                if n == 1:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed its (resent request's) connection first
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return handle


@pytest.mark.parametrize(("method", "resent"), [("POST", False), ("GET", True)])
async def test_a_request_closed_unanswered_is_sent_again_only_when_idempotent(
    method: str, resent: bool
) -> None:
    """A reused connection closed without an answer may have carried the request out: a POST
    (a submission, a claim) is not sent again on its own (it fails, saying so); a GET is."""
    seen: list[bytes] = []
    handlers: list[asyncio.Task[None]] = []
    server = await asyncio.start_server(await dies_on_the_second_request(seen, handlers), "127.0.0.1", 0)
    pool = HttpPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        assert (await pool.request(method, "/x", b'{"n":1}'))[0] == 200
        if resent:
            assert (await pool.request(method, "/x", b'{"n":2}'))[0] == 200
            assert seen == [b"GET " + b'{"n":1}', b"GET " + b'{"n":2}', b"GET " + b'{"n":2}']
        else:
            with pytest.raises(ServerUnavailableError, match="may or may not have been carried out"):
                await pool.request(method, "/x", b'{"n":2}')
            assert seen == [b'POST {"n":1}', b'POST {"n":2}']  # sent once, never again
    finally:
        await pool.aclose()
        await asyncio.wait_for(asyncio.gather(*handlers), 5)  # every connection closed, both ends
        server.close()
        await server.wait_closed()
