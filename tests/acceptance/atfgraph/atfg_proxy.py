"""A TLS-terminating reverse proxy for the acceptance tests, on real sockets: it accepts HTTPS
(a self-signed certificate made with ``openssl``), parses each request with h11, and forwards it
over plain HTTP to the server from its own source address (127.0.0.2 by default, so the server
can tell it from a direct caller on 127.0.0.1), as nginx's ``proxy_pass`` does: the upstream
``Host`` is the server's, and the original request is described by the forwarding headers of
one of two styles:

- ``x-forwarded``: ``X-Forwarded-For`` (the caller's address appended to what it sent, as
  nginx's ``$proxy_add_x_forwarded_for``), ``X-Forwarded-Proto: https`` and
  ``X-Forwarded-Host`` (both set, replacing what the caller sent); a ``Forwarded`` header the
  caller sent passes through untouched, as nginx passes it;
- ``forwarded``: an RFC 7239 ``Forwarded`` element appended, the caller's X-Forwarded headers
  removed (what docs/operations.md asks of a proxy that speaks RFC 7239).

It runs its own event loop in a thread, so tests may call it with blocking clients."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from pathlib import Path

import h11
import httpx
import pytest

#: Hop-by-hop headers, and the framing the proxy sets itself.
_DROP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"host", b"upgrade", b"te"}


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1, made with the openssl command."""
    cert, key = folder / "proxy-cert.pem", folder / "proxy-key.pem"
    try:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"openssl is needed to make the proxy's certificate: {exc}", pytrace=False)
    return cert, key


class ReverseProxy:
    def __init__(self, upstream: str, folder: Path, *, style: str = "x-forwarded", source: str = "127.0.0.2"):
        assert style in ("x-forwarded", "forwarded"), style
        self.upstream = upstream.rstrip("/")
        self.style = style
        self.source = source
        self.cert, self.key = self_signed(folder)
        self.port = 0
        #: requests forwarded, for the tests' counts
        self.forwarded = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def client_tls(self) -> ssl.SSLContext:
        """What a client needs to trust the proxy's certificate."""
        return ssl.create_default_context(cafile=str(self.cert))

    def start(self) -> ReverseProxy:
        self._thread.start()
        assert self._ready.wait(20), "the proxy never started"
        return self

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(self.cert, self.key)
        transport = httpx.AsyncHTTPTransport(local_address=self.source)
        async with httpx.AsyncClient(transport=transport, timeout=60) as upstream:
            server = await asyncio.start_server(
                lambda r, w: self._connection(r, w, upstream), "127.0.0.1", 0, ssl=tls
            )
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await self._stop.wait()

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: httpx.AsyncClient
    ) -> None:
        conn = h11.Connection(h11.SERVER)
        peer = writer.get_extra_info("peername")[0]
        try:
            while True:
                request = await self._next(conn, reader)
                if not isinstance(request, h11.Request):
                    return
                body = b""
                while not isinstance(event := await self._next(conn, reader), h11.EndOfMessage):
                    if not isinstance(event, h11.Data):
                        return
                    body += event.data
                await self._forward(conn, writer, upstream, peer, request, body)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, ssl.SSLError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await reader.read(65536))

    async def _forward(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        upstream: httpx.AsyncClient,
        peer: str,
        request: h11.Request,
        body: bytes,
    ) -> None:
        received = [(k.lower(), v) for k, v in request.headers]
        host = next((v for k, v in received if k == b"host"), b"").decode("latin-1")
        headers = [(k, v) for k, v in received if k not in _DROP]
        if self.style == "x-forwarded":
            prior = [v.decode("latin-1") for k, v in headers if k == b"x-forwarded-for"]
            headers = [(k, v) for k, v in headers if not k.startswith(b"x-forwarded-")]
            headers += [
                (b"x-forwarded-for", ", ".join([*prior, peer]).encode()),
                (b"x-forwarded-proto", b"https"),
                (b"x-forwarded-host", host.encode("latin-1")),
            ]
        else:
            prior = [v.decode("latin-1") for k, v in headers if k == b"forwarded"]
            headers = [(k, v) for k, v in headers if k != b"forwarded" and not k.startswith(b"x-forwarded-")]
            element = f'for="{peer}";proto=https;host="{host}"'
            headers.append((b"forwarded", ", ".join([*prior, element]).encode("latin-1")))
        self.forwarded += 1
        target = self.upstream + request.target.decode("latin-1")
        method = request.method.decode()
        async with upstream.stream(method, target, headers=headers, content=body) as answer:
            raw = b"".join([chunk async for chunk in answer.aiter_raw()])
            out = [(k.encode(), v.encode("latin-1")) for k, v in answer.headers.multi_items()]
            out = [(k, v) for k, v in out if k.lower() not in _DROP] + [
                (b"content-length", str(len(raw)).encode())
            ]
        writer.write(conn.send(h11.Response(status_code=answer.status_code, headers=out)) or b"")
        writer.write(conn.send(h11.Data(data=raw)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
