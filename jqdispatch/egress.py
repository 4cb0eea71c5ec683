"""Where the dispatcher may POST: a URL whose host is (or resolves to) an internal address is refused
unless the operator allows it (``JOBQ_DISPATCHER_ALLOW_NETS``), and the connection goes to exactly the
addresses that were checked.

Without this, an admin of any queue could point a dispatch kind at the cloud's metadata service, a
cluster-internal admin API or the dispatcher's own metrics port, and read the answer back as the job's
result or error (``docs/security.md``).

* **Refused** (:data:`BLOCKED`): loopback, link-local (169.254.0.0/16 with 169.254.169.254; fe80::/10),
  private (RFC 1918; unique local fc00::/7 with fd00:ec2::254), carrier-grade NAT (100.64.0.0/10),
  unspecified, multicast and the reserved 240.0.0.0/4 — also inside an IPv6 address that carries an
  IPv4 one (``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) — unless an entry of
  ``JOBQ_DISPATCHER_ALLOW_NETS`` allows it: a CIDR holding the address, or the URL's host name itself.
  One refused address refuses the URL (a name that resolves to a public and a private address is not
  half trusted).
* **Pinned** (:class:`Egress`): :meth:`Egress.check` resolves the host once per POST and checks every
  address; the POST then runs inside :meth:`Egress.pinned`, and the session's connector (built with this
  object as its resolver, its DNS cache off) is handed exactly those addresses when it opens a connection,
  so a DNS answer that changes between the check and the connect (rebinding) is never used. A kept-alive
  connection was opened to a checked address. A connection opened outside :meth:`Egress.pinned` is
  resolved and checked here too. TLS still verifies the certificate against the URL's host name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

__all__ = ["BLOCKED", "SETTING", "Egress", "EgressPolicy", "EgressRefused"]

SETTING = "JOBQ_DISPATCHER_ALLOW_NETS"
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

BLOCKED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), why)
    for net, why in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private, RFC 1918"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local, where cloud metadata services answer"),
        ("172.16.0.0/12", "private, RFC 1918"),
        ("192.168.0.0/16", "private, RFC 1918"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved or broadcast"),
        ("::/96", "unspecified, loopback or IPv4-compatible"),
        ("fe80::/10", "link-local"),
        ("fc00::/7", "unique local, where the EC2 metadata service fd00:ec2::254 answers"),
        ("ff00::/8", "multicast"),
    )
)
"""The ranges the dispatcher refuses unless ``JOBQ_DISPATCHER_ALLOW_NETS`` allows them, and why."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOST_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9_-]{0,62})(\.[a-z0-9_-]{1,63})*")


class EgressRefused(Exception):
    """A URL the dispatcher will not POST to; the message names the host, the address and the setting."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _embedded(address: IPAddress) -> list[IPAddress]:
    """The address and the IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), if any."""
    out: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            out.append(address.ipv4_mapped)
        elif address in _NAT64:
            out.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        elif address.sixtofour is not None:
            out.append(address.sixtofour)
    return out


def _host_key(host: str) -> str:
    return host.strip().lower().removesuffix(".")


@dataclass(frozen=True)
class EgressPolicy:
    """The operator's exceptions: networks (CIDRs, or single addresses) and host names."""

    nets: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, entries: Iterable[str]) -> EgressPolicy:
        """``JOBQ_DISPATCHER_ALLOW_NETS``' entries: CIDRs (``10.20.0.0/16``, ``127.0.0.0/8``, ``fd00::/8``),
        addresses and host names (``billing.internal``); ValueError names a bad one."""
        nets: list[IPNetwork] = []
        hosts: set[str] = set()
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            try:
                nets.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = _host_key(entry)
            if _HOST_NAME.fullmatch(name) is None:
                raise ValueError(f"{entry!r} is neither a CIDR (10.0.0.0/8, fd00::/8) nor a host name")
            hosts.add(name)
        return cls(tuple(nets), frozenset(hosts))

    def refusal(self, host: str, address: str) -> str | None:
        """Why a POST to ``host`` at ``address`` is refused (None: it is allowed)."""
        if _host_key(host) in self.hosts:
            return None
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # a link-local address may carry a zone
        except ValueError:
            return "not an IP address"
        candidates = _embedded(ip)
        if any(c in net for c in candidates for net in self.nets if c.version == net.version):
            return None
        for candidate in candidates:
            for net, why in BLOCKED:
                if candidate.version == net.version and candidate in net:
                    return why
        return None


_PINNED: ContextVar[tuple[str, int, tuple[ResolveResult, ...]] | None] = ContextVar(
    "jobq_dispatch_pinned", default=None
)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


class Egress(AbstractResolver):
    """The policy and the resolver of the dispatcher's HTTP session (see the module's docstring)."""

    def __init__(self, policy: EgressPolicy, resolver: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._resolver = resolver if resolver is not None else DefaultResolver()

    async def check(self, host: str, port: int) -> tuple[ResolveResult, ...]:
        """Resolve ``host`` once and check every address: :class:`EgressRefused` for a refused one,
        ``OSError`` when it does not resolve."""
        if _is_ip(host):
            found: Sequence[ResolveResult] = [
                ResolveResult(hostname=host, host=host, port=port, family=0, proto=0, flags=0)
            ]
        else:
            found = await self._resolver.resolve(host, port, family=socket.AF_UNSPEC)
        if not found:
            raise OSError(f"{host} resolves to no address")
        for result in found:
            why = self.policy.refusal(host, result["host"])
            if why is not None:
                is_literal = result["host"] == host
                where = f"host {host}" if is_literal else f"host {host} resolves to {result['host']}"
                raise EgressRefused(
                    f"egress refused: {where} ({why}); the dispatcher POSTs there only when {SETTING}"
                    " allows that network or host name"
                )
        return tuple(found)

    @contextlib.contextmanager
    def pinned(self, host: str, port: int, addresses: tuple[ResolveResult, ...]) -> Iterator[None]:
        """Within this block, a connection to ``host:port`` opened by this task goes to ``addresses``."""
        token = _PINNED.set((host, port, addresses))
        try:
            yield
        finally:
            _PINNED.reset(token)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        pinned = _PINNED.get()
        if pinned is not None and (pinned[0], pinned[1]) == (host, port):
            found = pinned[2]
        else:  # a connection opened outside post_job's check: checked here (never unchecked)
            found = await self.check(host, port)
        return [r for r in found if family in (socket.AF_UNSPEC, r["family"]) or not r["family"]]

    async def close(self) -> None:
        await self._resolver.close()
