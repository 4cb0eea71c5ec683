"""The topic elector against the real Consul agent: one leader, fenced takeover, trust window."""

from __future__ import annotations

from collections.abc import AsyncIterator

import consul.aio
import pytest

from jqrelay.elector import Elector, ElectorConfig, Role, describe
from jqruntime.consulconn import close_consul
from jqstack.manager import Endpoints

FAST = ElectorConfig(ttl_s=10, lock_delay_s=0, wait_s=1, retry_s=0.2)


@pytest.fixture
async def aio_consul(endpoints: Endpoints) -> AsyncIterator[consul.aio.Consul]:
    host, port = endpoints.consul_addr.rsplit(":", 1)
    client = consul.aio.Consul(host=host, port=int(port))
    yield client
    await close_consul(client)


async def test_one_leader_then_fenced_takeover(aio_consul: consul.aio.Consul, prefix: str) -> None:
    key = f"jobq-test/{prefix}/lock"
    a = Elector(aio_consul, key, "relay-a", FAST)
    b = Elector(aio_consul, key, "relay-b", FAST)
    async with a:
        assert await a.wait_role(Role.LEADER, timeout_s=60) is Role.LEADER
        first = a.trusted_term()
        assert first is not None
        async with b:
            assert await b.wait_role(Role.WAITING, timeout_s=60) is Role.WAITING
            assert b.trusted_term() is None
            await a.stop()
            assert await b.wait_role(Role.LEADER, timeout_s=60) is Role.LEADER
            second = b.trusted_term()
            assert second is not None
            assert second.fence > first.fence
            assert a.trusted_term() is None
            assert describe(b)["fence"] == second.fence
    _, entry = await aio_consul.kv.get(key)
    assert entry is None or not entry.get("Session"), "stop() must release the lock"


async def test_trust_window_closes_before_the_session_could_expire(
    aio_consul: consul.aio.Consul, prefix: str
) -> None:
    now = [1000.0]
    elector = Elector(aio_consul, f"jobq-test/{prefix}/trust", "relay-t", FAST, clock=lambda: now[0])
    async with elector:
        await elector.wait_role(Role.LEADER, timeout_s=60)
        assert elector.trusted_term() is not None
        assert elector.trusted_until <= 1000.0 + FAST.ttl_s
        now[0] = elector.trusted_until  # e.g. the process was paused: no renewal happened meanwhile
        assert elector.trusted_term() is None
