"""Who is asking: the client address a throttle counts a request against (the dashboard's sign-in and
Bearer throttle, the gateway's failed-token throttle).

The direct peer (``request.remote``) is the client, unless it is one of the operator's **trusted proxies**
(``JOBQ_WEB_TRUSTED_PROXIES`` / ``JOBQ_GATE_TRUSTED_PROXIES``: CIDRs; none by default). Then the
``X-Forwarded-For`` chain is read from its right end — what the nearest proxy saw — skipping every hop that
is itself a trusted proxy; the first that is not is the client. Everything left of that is written by
the client and is never believed; without a trusted peer the header is ignored altogether (any client may
send it). A hop that is no IP address ends the walk at the last trusted hop (never a text a client chose
as a Redis key or a log field).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from aiohttp import hdrs, web

__all__ = ["Networks", "client_address", "parse_networks", "request_address"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Networks = tuple[Network, ...]


def parse_networks(values: Iterable[str]) -> Networks:
    """CIDRs (``10.0.0.0/8``, ``fd00::/8``) or single addresses; ValueError naming a bad one."""
    out = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"{text!r} is no address or CIDR (e.g. 10.0.0.0/8, 192.0.2.7, fd00::/8)"
            ) from None
    return tuple(out)


def _address(text: str) -> Address | None:
    """An address as a proxy writes it: bare, ``[v6]`` or ``[v6]:port``, or ``v4:port``."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # v4:port (a bare v6 address has several colons)
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: Address | None, trusted: Networks) -> bool:
    return address is not None and any(address in net for net in trusted)


def client_address(remote: str | None, forwarded_for: Sequence[str], trusted: Networks) -> str:
    """The client's address: ``remote`` (the direct peer), or, when that is a trusted proxy, the nearest
    hop of ``forwarded_for`` (every ``X-Forwarded-For`` header, in order) that is not one."""
    peer = _address(remote or "")
    if peer is None:
        return remote or "unknown"
    if not _trusted(peer, trusted):
        return str(peer)
    hops = [hop for header in forwarded_for for hop in header.split(",") if hop.strip()]
    found = peer
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:  # not an address: the last trusted hop stands
            break
        found = address
        if not _trusted(address, trusted):
            break
    return str(found)


def request_address(request: web.BaseRequest, trusted: Networks) -> str:
    """:func:`client_address` of an aiohttp request (no trusted proxy: the peer's address as the socket
    gives it, already canonical; asked on every request a throttle counts)."""
    if not trusted:
        return request.remote or "unknown"
    return client_address(request.remote, request.headers.getall(hdrs.X_FORWARDED_FOR, []), trusted)
