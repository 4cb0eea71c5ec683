"""Where the dispatcher may POST (``jqdispatch/egress.py``): internal addresses refused unless the operator
allows them (``JOBQ_DISPATCHER_ALLOW_NETS``), a host resolved once per POST and the connection pinned to the
addresses checked — a DNS answer that changes in between (rebinding) is never used. A refused URL or auth is
an answer of its own (``refused``), and nothing is sent: a real HTTP server on loopback proves it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from jqcore.envelope import new_envelope
from jqdispatch.egress import SETTING, Egress, EgressPolicy, EgressRefused
from jqdispatch.push import Sender, post_job
from jqdispatch.settings import DispatcherSettings
from jqengine import ClaimedJob
from jqruntime.dispatch import DispatchConfig, load_config

NONE = EgressPolicy()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.255.0.9",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.254",
        "192.168.1.1",
        "100.64.0.1",
        "169.254.169.254",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fe80::1%eth0",
        "fd00:ec2::254",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
    ],
)
def test_internal_addresses_are_refused_by_default(address: str) -> None:
    assert NONE.refusal("downstream.example", address) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert NONE.refusal("downstream.example", address) is None


def test_the_operator_allows_networks_and_host_names() -> None:
    policy = EgressPolicy.parse(["10.20.0.0/16", " billing.Internal. ", "127.0.0.0/8", "fd12::/16"])
    assert policy.refusal("x", "10.20.3.4") is None
    assert policy.refusal("x", "10.21.0.1") is not None  # another private network
    assert policy.refusal("x", "::ffff:127.0.0.1") is None  # the IPv4 a mapped address carries
    assert policy.refusal("x", "fd12:1::1") is None
    assert policy.refusal("x", "fd00:ec2::254") is not None
    assert policy.refusal("billing.internal", "10.99.0.1") is None  # the name is allowed, wherever it is
    assert policy.refusal("BILLING.INTERNAL.", "10.99.0.1") is None
    assert policy.refusal("other.internal", "10.99.0.1") is not None


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "not a host", "-x.example", "a/b"])
def test_a_bad_entry_is_a_settings_error_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="neither a CIDR"):
        EgressPolicy.parse([entry])
    with pytest.raises(ValueError, match="allow_nets"):
        DispatcherSettings(queues=["q"], callback_secret="s", allow_nets=[entry])


@dataclass
class Dns(AbstractResolver):
    """A resolver whose answers change from one look-up to the next (a rebinding DNS server)."""

    answers: list[list[str]]
    asked: list[str] = field(default_factory=list)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        found = self.answers[min(len(self.asked), len(self.answers)) - 1]
        return [
            ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET, proto=0, flags=0)
            for a in found
        ]

    async def close(self) -> None:
        pass


async def test_one_refused_address_refuses_the_url_naming_host_address_and_setting() -> None:
    egress = Egress(NONE, Dns([["93.184.216.34", "10.0.0.7"]]))
    with pytest.raises(EgressRefused) as err:
        await egress.check("mixed.example", 443)
    message = err.value.message
    assert "mixed.example" in message
    assert "10.0.0.7" in message
    assert SETTING in message
    with pytest.raises(EgressRefused, match=r"host 169\.254\.169\.254"):
        await egress.check("169.254.169.254", 80)  # an address in the URL is checked without DNS


async def test_the_connection_gets_the_checked_addresses_not_a_later_answer() -> None:
    dns = Dns([["93.184.216.34"], ["127.0.0.1"]])
    egress = Egress(NONE, dns)
    checked = await egress.check("rebind.example", 80)
    with egress.pinned("rebind.example", 80, checked):
        again = await egress.resolve("rebind.example", 80, socket.AF_UNSPEC)
    assert [r["host"] for r in again] == ["93.184.216.34"]
    assert dns.asked == ["rebind.example"]  # resolved once
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.1"):  # a connection outside a POST: checked too
        await egress.resolve("rebind.example", 80, socket.AF_UNSPEC)


@dataclass
class Downstream:
    port: int = 0
    headers: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
async def downstream() -> AsyncIterator[Downstream]:
    found = Downstream()

    async def hook(request: web.Request) -> web.Response:
        found.headers.append(dict(request.headers))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield found
    finally:
        await runner.cleanup()


def claimed() -> ClaimedJob:
    return ClaimedJob(new_envelope("q", "k", {"n": 1}), 1, "lease-token", 0)


async def send(egress: Egress, url: str, **config: object) -> tuple[str, str | None]:
    """post_job through a session whose connector resolves through ``egress`` (as the dispatcher's)."""
    connector = aiohttp.TCPConnector(resolver=egress, use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as http:
        answer = await post_job(
            Sender(http, egress), claimed(), DispatchConfig.model_validate({"url": url, **config}), {}
        )
    return answer.outcome, answer.error


async def test_a_refused_downstream_gets_no_request(downstream: Downstream) -> None:
    """The downstream on 127.0.0.1 answers — but only once loopback is allowed: before, nothing reaches it."""
    dns = Dns([["127.0.0.1"]])
    outcome, error = await send(Egress(NONE, dns), f"http://hook.example:{downstream.port}/hook")
    assert outcome == "refused"
    assert error is not None
    assert "hook.example" in error
    assert "127.0.0.1" in error
    assert SETTING in error
    outcome, _ = await send(Egress(NONE), f"http://127.0.0.1:{downstream.port}/hook")
    assert outcome == "refused"
    assert downstream.headers == []

    allowed = Egress(EgressPolicy.parse(["127.0.0.0/8"]), Dns([["127.0.0.1"], ["10.9.9.9"]]))
    assert await send(allowed, f"http://hook.example:{downstream.port}/hook") == ("succeeded", None)
    assert len(downstream.headers) == 1
    by_name = Egress(EgressPolicy.parse(["hook.example"]), Dns([["127.0.0.1"]]))
    assert await send(by_name, f"http://hook.example:{downstream.port}/hook") == ("succeeded", None)


async def test_a_refused_auth_sends_nothing(downstream: Downstream) -> None:
    """A stored configuration naming a variable outside JOBQ_DISPATCH_AUTH_ (written before the rule, or
    around the gateway): the attempt fails, nothing is sent, the value appears nowhere."""
    allowed = Egress(EgressPolicy.parse(["127.0.0.0/8"]))
    url = f"http://127.0.0.1:{downstream.port}/hook"
    config = load_config(f'{{"url": "{url}", "auth": {{"header": "X-Leak", "env": "PATH"}}}}')
    connector = aiohttp.TCPConnector(resolver=allowed, use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as http:
        answer = await post_job(Sender(http, allowed), claimed(), config, {})
    assert answer.outcome == "refused"
    assert "JOBQ_DISPATCH_AUTH_" in (answer.error or "")
    assert downstream.headers == []
