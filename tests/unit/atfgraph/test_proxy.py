"""Forwarding headers (``server/_proxy.py``): believed only from a trusted peer, walked from the
right past trusted hops, and ignored whole when a value does not parse. The end-to-end behaviour
(a real proxy in front of a real server: Secure cookies, links, redirects, the access log and
the audit bound) is tests/acceptance/atfgraph/test_behind_a_proxy.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from atfgraph.server._proxy import Hop, Origin, TrustedProxies, forwarded_hops, origin_of, parse_forwarded

TRUSTED = TrustedProxies.parse(["10.0.0.0/8", "192.0.2.1", "::1"])


def headers(**values: str) -> list[tuple[bytes, bytes]]:
    return [(name.replace("_", "-").encode(), value.encode()) for name, value in values.items()]


def test_trusted_proxies_parse_addresses_and_networks_and_refuse_anything_else() -> None:
    assert str(TrustedProxies.parse(["10.0.0.0/8, 127.0.0.1", "::1 10.0.0.0/8"])) == (
        "10.0.0.0/8, 127.0.0.1/32, ::1/128"
    )
    assert "10.1.2.3" in TRUSTED and "192.0.2.1" in TRUSTED and "::1" in TRUSTED
    assert "::ffff:10.1.2.3" in TRUSTED  # an IPv4 peer on a dual-stack socket
    assert "192.0.2.2" not in TRUSTED and "unknown" not in TRUSTED and "127.0.0.1" not in TRUSTED
    assert not TrustedProxies.parse([""]) and str(TrustedProxies()) == "none"
    for bad in ("10.0.0.0/33", "proxy.example.com", "*"):
        with pytest.raises(ValueError, match="trusted proxy"):
            TrustedProxies.parse([bad])


def test_an_untrusted_peer_changes_nothing_whatever_it_sends() -> None:
    spoofed = headers(x_forwarded_proto="https", x_forwarded_host="evil.example", x_forwarded_for="1.2.3.4")
    assert origin_of("192.0.2.2", spoofed, TRUSTED) is None
    assert origin_of("127.0.0.1", headers(forwarded="for=1.2.3.4;proto=https"), TRUSTED) is None
    assert origin_of(None, spoofed, TRUSTED) is None
    assert origin_of("10.0.0.5", spoofed, TrustedProxies()) is None


def test_x_forwarded_headers_from_a_trusted_peer() -> None:
    sent = headers(
        x_forwarded_proto="https", x_forwarded_host="review.example.com", x_forwarded_for="203.0.113.7"
    )
    assert origin_of("10.0.0.5", sent, TRUSTED) == Origin("203.0.113.7", "https", "review.example.com")
    # Only the scheme: the peer's address stays the client's.
    assert origin_of("10.0.0.5", headers(x_forwarded_proto="HTTPS"), TRUSTED) == Origin(None, "https", None)


def test_the_walk_stops_at_the_first_untrusted_hop_from_the_right() -> None:
    """A client may prepend anything to X-Forwarded-For; only what trusted proxies appended counts."""
    sent = headers(x_forwarded_for="6.6.6.6, 203.0.113.7, 10.0.0.9", x_forwarded_proto="https")
    assert origin_of("10.0.0.5", sent, TRUSTED) == Origin("203.0.113.7", "https", None)
    every_hop_trusted = headers(x_forwarded_for="10.0.0.8, 10.0.0.9")
    assert origin_of("10.0.0.5", every_hop_trusted, TRUSTED) == Origin("10.0.0.8", None, None)


def test_rfc_7239_forwarded_with_quoting_ports_and_ipv6() -> None:
    value = 'for="[2001:db8::17]:4711";proto=https;host="review.example.com:8443", for=10.0.0.9;proto=http'
    assert parse_forwarded(value) == [
        Hop("2001:db8::17", "https", "review.example.com:8443"),
        Hop("10.0.0.9", "http", None),
    ]
    # The element the outermost trusted proxy wrote describes the original request.
    assert origin_of("10.0.0.5", headers(forwarded=value), TRUSTED) == Origin(
        "2001:db8::17", "https", "review.example.com:8443"
    )
    assert parse_forwarded("for=unknown;proto=https") == [Hop("unknown", "https", None)]
    assert parse_forwarded('For="192.0.2.60:80";Proto=HTTPS') == [Hop("192.0.2.60", "https", None)]
    # The X-Forwarded family wins when both are there: nginx, Caddy and others set it and pass a
    # client's Forwarded through.
    both = headers(
        forwarded="for=203.0.113.7;proto=https", x_forwarded_for="1.1.1.1", x_forwarded_proto="http"
    )
    assert origin_of("10.0.0.5", both, TRUSTED) == Origin("1.1.1.1", "http", None)


@pytest.mark.parametrize(
    "value",
    [
        "for",
        "for=",
        'for="1.2.3.4',
        "for=192.0.2.60:80",  # a port needs quotes (':' is not a token character)
        "for=1.2.3.4;for=5.6.7.8",
        "for=1.2.3.4 proto=https",
        "=x",
        "for=1.2.3.4,,",
    ],
)
def test_a_forwarded_header_that_does_not_parse_is_ignored(value: str) -> None:
    assert parse_forwarded(value) is None
    assert origin_of("10.0.0.5", headers(forwarded=value), TRUSTED) is None


def test_values_that_are_not_a_scheme_host_or_address_are_not_believed() -> None:
    sent = headers(
        x_forwarded_proto="javascript", x_forwarded_host="evil.example/path", x_forwarded_for="1.2.3.4"
    )
    assert origin_of("10.0.0.5", sent, TRUSTED) == Origin("1.2.3.4", None, None)
    assert forwarded_hops(headers(x_forwarded_for="1.2.3.4, not-an-address")) is None
    assert parse_forwarded('for=1.2.3.4;host="a b"') == [Hop("1.2.3.4", None, None)]
    assert parse_forwarded('for="[1.2.3.4]"') == [Hop(None, None, None)]  # brackets hold IPv6 only


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_the_server_refuses_a_trusted_proxy_that_is_not_an_address_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    from atfgraph.server._serve import serve

    monkeypatch.setenv("ATFGRAPH_HOME", str(tmp_path))
    flags: list[str] = []
    if where == "flag":
        flags = ["10.0.0.0/8", "proxy.example.com"]
    else:
        monkeypatch.setenv("ATFGRAPH_TRUSTED_PROXIES", "10.0.0.0/8, proxy.example.com")
    with pytest.raises(SystemExit) as raised:
        serve(port=1, db_path=str(tmp_path / "graph.db"), trusted_proxies=flags)
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "atfgraph: a trusted proxy must be an IP address or a CIDR network such as 10.0.0.0/8,"
        " not 'proxy.example.com'"
    ], err
    assert not list(tmp_path.iterdir())  # nothing was created
