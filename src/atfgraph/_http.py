"""A small HTTP/1.1 client over asyncio streams, for the SDK's own traffic with the server.

Why not httpx: a worker and a reviewer talk to one server with short JSON requests, and httpx
spends about 1.5 ms of CPU per request on this machine (URL parsing, anyio, h11), which made the
client side cost more than the server. This client keeps idle keep-alive connections per pool,
writes one buffer per request and parses only what the server sends (Content-Length or chunked
bodies); it costs a tenth of that.
"""

from __future__ import annotations

import asyncio
import os
import select
import ssl
from urllib.parse import urlencode, urlsplit

from pyworkflow.store import tracing

from ._errors import ServerUnavailableError

_MAX_HEAD = 64 * 1024
#: Methods a request of which may be sent again when a reused connection is closed unanswered
#: (RFC 9110's idempotent methods); the API's POSTs are not among them.
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_UNANSWERED = (
    "it closed the connection without answering (the request may or may not have been carried "
    "out: a submission with an idempotency key, or a decision, may be sent again)"
)


def _trace_headers() -> bytes:
    """The current span's W3C headers (a Client call inside the application's span, a worker's
    call inside its attempt), so the server's spans join that trace; nothing when tracing is off
    or no span is current."""
    if not tracing.enabled():
        return b""
    found = tracing.carrier()
    return b"".join(
        b"%s: %s\r\n" % (k.encode("ascii"), v.encode("ascii"))
        for k, v in found.items()
        if v.isascii() and "\r" not in v and "\n" not in v
    )


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


def _dropped(conn: _Connection) -> bool:
    """Whether an idle connection was closed by the server: its end was seen, or its socket is
    readable (an idle connection has nothing to read but the server's close), which a loop busy
    elsewhere meanwhile has not yet noticed (urllib3 checks its pooled connections the same way)."""
    if conn.reader.at_eof() or conn.writer.is_closing():
        return True
    sock = conn.writer.get_extra_info("socket")
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class HttpPool:
    """Keep-alive connections to one origin (``http://host:port`` or ``https://...``)."""

    def __init__(
        self, base_url: str, timeout: float = 30.0, max_idle: int = 20, token: str | None = None
    ) -> None:
        try:
            parts = urlsplit(base_url)
            port = parts.port  # parsed on access: ValueError when out of range or not a number
        except ValueError:
            parts, port = None, None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server URL must be http(s)://host[:port], not {base_url!r}")
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.host_header = parts.netloc.encode("ascii")
        if token is not None and ("\r" in token or "\n" in token or not token.isascii()):
            raise ValueError("a bearer token is one line of ASCII")
        self.auth_header = b"Authorization: Bearer %s\r\n" % token.encode("ascii") if token else b""
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        params: dict[str, object] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """Send one request; return (status, body). Raises NoAnswerError (a
        ServerUnavailableError) when the server cannot be reached or does not answer within
        ``timeout`` seconds."""
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        target = self.prefix + path
        if params:
            target += "?" + urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: ".encode("ascii")
            + self.host_header
            + b"\r\nAccept: application/json\r\n"
            + self.auth_header
            + _trace_headers()
        )
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        payload = head + b"\r\n" + (body or b"")
        try:
            async with asyncio.timeout(timeout or self.timeout):
                while self._idle:
                    conn = self._idle.pop()
                    if _dropped(conn):
                        conn.close()  # the server closed it while it was idle
                        continue
                    try:
                        return await self._exchange(conn, payload, method)
                    except _StaleConnection:
                        conn.close()
                        # Closed unanswered: the server closed it as the request went out, or
                        # it carried out the request and died before answering. Only a request
                        # that may be carried out twice is sent again.
                        if method not in _IDEMPOTENT:
                            raise NoAnswerError(
                                f"{self.host}:{self.port}: {_UNANSWERED}", _UNANSWERED
                            ) from None
                conn = await self._connect()
                try:
                    return await self._exchange(conn, payload, method)
                except _StaleConnection:
                    conn.close()
                    raise NoAnswerError(f"{self.host}:{self.port}: {_UNANSWERED}", _UNANSWERED) from None
        except TimeoutError:
            raise NoAnswerError(
                f"no answer from {self.host}:{self.port} in time", "no answer in time", timed_out=True
            ) from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            reason = _reason(exc)
            raise NoAnswerError(f"cannot talk to {self.host}:{self.port}: {reason}", reason) from None

    async def _connect(self) -> _Connection:
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=_MAX_HEAD)
        return _Connection(reader, writer)

    async def _exchange(self, conn: _Connection, payload: bytes, method: str) -> tuple[int, bytes]:
        keep = False
        try:
            conn.writer.write(payload)
            try:
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise _StaleConnection from None
                raise
            except ConnectionResetError:
                raise _StaleConnection from None
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                data = b""
            elif "content-length" in headers:
                data = await conn.reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                data = await _read_chunked(conn.reader)
            else:
                data = await conn.reader.read()  # delimited by the server closing the connection
                headers["connection"] = "close"
            keep = headers.get("connection", "").lower() != "close"
            return status, data
        finally:
            # Anything unfinished (an error, a timeout, a cancelled long poll) leaves the
            # connection in an unknown state: close it rather than reuse it.
            if keep and not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class NoAnswerError(ServerUnavailableError):
    """ServerUnavailableError as the pool raises it. ``reason``: what went wrong, without the
    address (``[Errno 111] Connection refused``); ``timed_out``: no answer came in time, so the
    server may have received the request and acted on it."""

    def __init__(self, message: str, reason: str = "", *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.reason = reason or message
        self.timed_out = timed_out


def _reason(exc: BaseException) -> str:
    # asyncio rewords a failed connect as "[Errno 111] Connect call failed ('host', port)"; the
    # errno's own words are shorter ("Connection refused"). Not for TLS errors (their errno is
    # OpenSSL's) nor resolver errors (negative: the words are getaddrinfo's).
    errno = exc.errno if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) else None
    if errno is not None and errno > 0:
        return f"[Errno {errno}] {os.strerror(errno)}"
    return str(exc) or type(exc).__name__


class _StaleConnection(Exception):
    """The server had closed this keep-alive connection before our request arrived."""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
