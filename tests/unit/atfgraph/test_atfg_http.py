"""The SDK's small HTTP/1.1 client against a scripted asyncio server: bodies by length and by
chunks, keep-alive reuse, a keep-alive connection closed by the server, an unreachable server."""

from __future__ import annotations

import asyncio
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
