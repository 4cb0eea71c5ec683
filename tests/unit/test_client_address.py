"""Whose address a throttle counts (``jqruntime/clientaddr.py``, review M6): ``X-Forwarded-For`` only from a
trusted proxy, read from its right end, never past what a trusted proxy wrote."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from jqruntime.clientaddr import client_address, parse_networks, request_address

PROXIES = parse_networks(["10.0.0.0/8", "192.0.2.7", "fd00::/8"])


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        ("203.0.113.5", [], "203.0.113.5"),  # no proxy
        ("203.0.113.5", ["198.51.100.1"], "203.0.113.5"),  # an untrusted peer's header is its own words
        ("10.1.2.3", [], "10.1.2.3"),  # a trusted proxy that forwarded nothing
        ("10.1.2.3", ["198.51.100.1"], "198.51.100.1"),
        ("10.1.2.3", ["198.51.100.1, 10.9.9.9"], "198.51.100.1"),  # two trusted hops
        ("10.1.2.3", ["6.6.6.6, 198.51.100.1"], "198.51.100.1"),  # the client wrote 6.6.6.6: not believed
        ("10.1.2.3", ["6.6.6.6", "198.51.100.1"], "198.51.100.1"),  # several headers: one chain
        ("10.1.2.3", ["10.4.4.4, 10.5.5.5"], "10.4.4.4"),  # every hop trusted: the farthest
        ("10.1.2.3", ["not-an-ip"], "10.1.2.3"),  # garbage ends the walk at the last trusted hop
        ("10.1.2.3", ["198.51.100.1:4711"], "198.51.100.1"),
        ("10.1.2.3", ["[2001:db8::1]:4711"], "2001:db8::1"),
        ("192.0.2.7", ["2001:db8::2"], "2001:db8::2"),
        ("fd00::1", ["198.51.100.1"], "198.51.100.1"),
        (None, ["198.51.100.1"], "unknown"),
    ],
)
def test_the_client_is_the_nearest_hop_no_trusted_proxy_added(
    remote: str | None, forwarded: list[str], client: str
) -> None:
    assert client_address(remote, forwarded, PROXIES) == client


def test_without_trusted_proxies_the_header_is_never_read() -> None:
    request = make_mocked_request("GET", "/", headers={"X-Forwarded-For": "198.51.100.1"})
    assert request_address(request, ()) == (request.remote or "unknown")
    assert client_address("10.1.2.3", ["198.51.100.1"], ()) == "10.1.2.3"


def test_a_bad_network_is_named() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33' is no address or CIDR"):
        parse_networks(["10.0.0.0/33"])
    assert parse_networks(["", " 10.0.0.1 "]) == parse_networks(["10.0.0.1/32"])
