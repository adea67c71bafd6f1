"""Behind a reverse proxy: the original request's scheme, host and client address, taken from the
forwarding headers only when the peer that sent them is a configured trusted proxy
(``--trusted-proxy`` / ``$ATFGRAPH_TRUSTED_PROXIES``; docs/operations.md, "Behind a proxy").

Anyone can send ``X-Forwarded-Proto: https``; believed from an untrusted peer it would make the
console mark cookies ``Secure`` for a plain-HTTP client that then never sends them back, build
decision links on a host the sender chose, and let one caller appear as many addresses to the
per-address bound of the audit trail. So nothing is trusted by default, loopback included: on a
shared host any local process can connect from 127.0.0.1, and a proxy on the same host is named
explicitly (``--trusted-proxy 127.0.0.1``).

Both header families are read, the ``X-Forwarded-*`` ones when a request has any of them:

- ``X-Forwarded-For: 203.0.113.7, 10.0.0.2`` with ``X-Forwarded-Proto`` and ``X-Forwarded-Host``
  (the last value of each: the one the nearest proxy set);
- else ``Forwarded: for=203.0.113.7;proto=https;host=review.example.com, for=10.0.0.2`` (RFC
  7239): one element per hop, appended by each proxy.

Why that order: nginx, Caddy, Traefik and HAProxy set the X-Forwarded family and pass a
``Forwarded`` header the client sent through untouched, so believing ``Forwarded`` first would let
any client behind them choose its address and scheme. A proxy that speaks RFC 7239 instead must
remove the X-Forwarded headers a client sent (docs/operations.md shows how).

The hops are walked from the right (the one the trusted peer wrote) while the address a hop names
is itself a trusted proxy; the first hop whose address is not trusted is the client, and the
scheme and host are those that hop's proxy received. A value that does not parse (a scheme that
is not http or https, a host with a path or spaces, a malformed ``Forwarded``) is ignored: the
request is then seen as the proxy's own, never as what the header claimed.

uvicorn's own ``proxy_headers`` reads neither ``Forwarded`` nor ``X-Forwarded-Host``, so the
server turns it off and uses this middleware instead (``_serve``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: ``host`` or ``host:port``, a DNS name or IPv4 address, or ``[IPv6]`` with an optional port.
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?")
#: RFC 7239 obfuscated identifiers and ``unknown``: a node that is not an address.
_NODE_NAME = re.compile(r"unknown|_[A-Za-z0-9._-]{1,60}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The addresses whose forwarding headers are believed (none by default)."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str]) -> TrustedProxies:
        """Addresses or CIDR networks (``10.0.0.0/8``, ``127.0.0.1``, ``::1``), each value possibly
        several separated by commas or spaces; ``ValueError`` names a bad one."""
        networks: list[Network] = []
        for value in values:
            for item in value.replace(",", " ").split():
                try:
                    networks.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    raise ValueError(
                        "a trusted proxy must be an IP address or a CIDR network such as 10.0.0.0/8,"
                        f" not {item!r}"
                    ) from None
        return cls(tuple(dict.fromkeys(networks)))

    @classmethod
    def from_env(cls, flags: Sequence[str] = ()) -> TrustedProxies:
        """``--trusted-proxy`` values, else ``$ATFGRAPH_TRUSTED_PROXIES``."""
        return cls.parse(flags or [os.environ.get("ATFGRAPH_TRUSTED_PROXIES", "")])

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, address: object) -> bool:
        ip = _ip(address) if isinstance(address, str) else None
        if ip is None:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip.version == net.version and ip in net for net in self.networks)

    def __str__(self) -> str:
        return ", ".join(str(n) for n in self.networks) or "none"


@dataclass(frozen=True, slots=True)
class Hop:
    """What one proxy saw: the address that connected to it, the scheme and the Host it received."""

    client: str | None = None
    proto: str | None = None
    host: str | None = None


@dataclass(frozen=True, slots=True)
class Origin:
    """The original request as the outermost trusted proxy received it."""

    client: str | None
    scheme: str | None
    host: str | None


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def node_address(value: str) -> str | None:
    """A forwarded node as an address (``203.0.113.7``, ``203.0.113.7:4711``, ``[2001:db8::1]:80``,
    a bare IPv6 address in X-Forwarded-For) or a node name (``unknown``, ``_hidden``); None when
    it is neither."""
    value = value.strip()
    if value.startswith("["):
        inside, sep, rest = value[1:].partition("]")
        if not sep or (rest and not re.fullmatch(r":[0-9]{1,5}", rest)):
            return None
        ip = _ip(inside)
        return str(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if (ip := _ip(value)) is not None:
        return str(ip)
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and len(port) <= 5 and isinstance(_ip(host), ipaddress.IPv4Address):
        return host
    return value if _NODE_NAME.fullmatch(value) else None


def _proto(value: str | None) -> str | None:
    value = (value or "").strip().lower()
    return value if value in ("http", "https") else None


def _host(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if _HOST.fullmatch(value) else None


def parse_forwarded(value: str) -> list[Hop] | None:
    """RFC 7239 ``Forwarded`` as hops, leftmost (the client) first; None when it does not parse."""
    hops: list[Hop] = []
    pos, end = 0, len(value)
    while True:
        pairs: dict[str, str] = {}
        while True:  # one element: pairs separated by ';'
            while pos < end and value[pos] in " \t":
                pos += 1
            match = _TOKEN.match(value, pos)
            if match is None or not value.startswith("=", match.end()):
                return None
            key, pos = match.group().lower(), match.end() + 1
            if value.startswith('"', pos):
                chars: list[str] = []
                pos += 1
                while pos < end and value[pos] != '"':
                    if value[pos] == "\\" and pos + 1 < end:
                        pos += 1
                    chars.append(value[pos])
                    pos += 1
                if pos >= end:
                    return None
                pos += 1
                text = "".join(chars)
            else:
                match = _TOKEN.match(value, pos)
                if match is None:
                    return None
                text, pos = match.group(), match.end()
            if key in pairs:
                return None
            pairs[key] = text
            while pos < end and value[pos] in " \t":
                pos += 1
            if pos < end and value[pos] == ";":
                pos += 1
                continue
            break
        hops.append(
            Hop(
                client=node_address(pairs["for"]) if "for" in pairs else None,
                proto=_proto(pairs.get("proto")),
                host=_host(pairs.get("host")),
            )
        )
        if pos >= end:
            return hops
        if value[pos] != ",":
            return None
        pos += 1


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """Every line of one header joined by commas (as a list header), or None when absent."""
    values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
    return ",".join(values) if values else None


def _x_forwarded(headers: Sequence[tuple[bytes, bytes]]) -> tuple[str | None, str | None, str | None]:
    return (
        _header(headers, b"x-forwarded-for"),
        _header(headers, b"x-forwarded-proto"),
        _header(headers, b"x-forwarded-host"),
    )


def forwarded_hops(headers: Sequence[tuple[bytes, bytes]]) -> list[Hop] | None:
    """The hops a request's forwarding headers describe (the X-Forwarded family when there is
    one, else ``Forwarded``), or None."""
    xff, proto, host = _x_forwarded(headers)
    if xff is None and proto is None and host is None:
        forwarded = _header(headers, b"forwarded")
        return None if forwarded is None else parse_forwarded(forwarded)
    clients = [node_address(part) for part in xff.split(",")] if xff else [None]
    if None in clients and xff:
        return None  # one address that does not parse: the list cannot be walked
    last = Hop(
        client=clients[-1],
        proto=_proto(proto.split(",")[-1]) if proto else None,
        host=_host(host.split(",")[-1]) if host else None,
    )
    return [Hop(client=c) for c in clients[:-1]] + [last]


def origin_of(
    peer: str | None, headers: Sequence[tuple[bytes, bytes]], trusted: TrustedProxies
) -> Origin | None:
    """The original request behind ``peer``, or None when ``peer`` is not a trusted proxy or sent
    no forwarding header that parses (the request is then taken as it reached the server)."""
    if peer is None or peer not in trusted:
        return None
    hops = forwarded_hops(headers)
    if not hops:
        return None
    chosen = hops[-1]
    for hop in reversed(hops):
        chosen = hop
        if hop.client is None or hop.client not in trusted:
            break
    # X-Forwarded-Proto and -Host are one value for the whole chain, set by the nearest proxy.
    if len(hops) > 1 and chosen is not hops[-1] and any(v is not None for v in _x_forwarded(headers)):
        chosen = Hop(chosen.client, hops[-1].proto, hops[-1].host)
    return Origin(chosen.client, chosen.proto, chosen.host)


class ForwardedHeaders:
    """ASGI, outermost: a request from a trusted proxy is seen with the scheme, Host and client
    address of the original request (``scope["scheme"]``, the ``host`` header, ``scope["client"]``),
    so the console's cookies, the links built on ``request.base_url``, redirects, the access log
    and the audit trail's per-address bound all see what the proxy saw. Other requests pass as
    they came, whatever headers they carry."""

    def __init__(self, app: ASGIApp, trusted: TrustedProxies) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.trusted:
            client = scope.get("client")
            origin = origin_of(client[0] if client else None, scope.get("headers") or (), self.trusted)
            if origin is not None:
                scope = _rewritten(scope, origin)
        await self.app(scope, receive, send)


def _rewritten(scope: Scope, origin: Origin) -> Scope:
    changed: dict[str, Any] = dict(scope)
    if origin.scheme is not None:
        changed["scheme"] = origin.scheme
    if origin.client is not None:
        changed["client"] = (origin.client, 0)
    if origin.host is not None:
        headers = [(k, v) for k, v in scope.get("headers") or () if k.lower() != b"host"]
        changed["headers"] = [(b"host", origin.host.encode("latin-1")), *headers]
    return changed


__all__ = [
    "ForwardedHeaders",
    "Hop",
    "Origin",
    "TrustedProxies",
    "forwarded_hops",
    "origin_of",
    "parse_forwarded",
]
