"""A kill switch flipped over HTTP stops its kind from starting in two running pools from the moment the
PUT answers, parks the jobs without spending attempts, and lifts cleanly: they all run once, after. Consul
keeps a copy of each, in step: a switch Redis lost comes back when the queue is configured again."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.envelope import new_envelope
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine
from jqengine.keys import SWITCHES_KEY
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores import audit
from jqruntime.stores.config import ConfigStore
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from tests.gate.conftest import Gw
from tests.web.test_sessions import _on_kafka as on_audit_topic
from worker.pool import Pool, PoolConfig
from worker.registry import Registry


async def test_a_switch_stops_a_kind_in_two_pools_and_lifts_cleanly(
    gw: Gw, engine: Engine, redis: aioredis.Redis, endpoints: Endpoints
) -> None:
    q, reg = gw.queue, Registry()
    started: list[tuple[str, int]] = []  # (kind, Redis's clock at the handler's start)
    ran: Counter[str] = Counter()
    enough = {"ok": asyncio.Event(), "poison": asyncio.Event()}
    want = {"ok": 0, "poison": 0}

    def saw(kind: str) -> None:
        ran[kind] += 1
        if ran[kind] >= want[kind]:
            enough[kind].set()

    @reg.job("ok", queue=q)
    async def ok() -> None:
        started.append(("ok", engine.clock.now()))
        saw("ok")

    @reg.job("poison", queue=q)
    async def poison() -> None:
        started.append(("poison", engine.clock.now()))
        saw("poison")

    async def enqueue(n: int) -> None:
        await engine.enqueue_batch([new_envelope(q, k, {}) for _ in range(n) for k in ("ok", "poison")])

    async def wait(kind: str, total: int) -> None:
        want[kind] = total
        if ran[kind] < total:
            enough[kind].clear()
            await asyncio.wait_for(enough[kind].wait(), 30)

    config = PoolConfig([q], concurrency=4, idle_wait_s=1)
    async with Pool(reg, engine, config, redis=redis), Pool(reg, engine, config, redis=redis):
        await enqueue(5)
        await wait("ok", 5)
        await wait("poison", 5)  # both kinds run before the flip

        stop = {"queue": q, "kind": "poison"}
        status, body = await gw.call("PUT", "/v1/switches/" + q + "-stop", json=stop)
        assert status == 200, body
        assert body["queues"] == [q]
        await engine.now()
        flipped = engine.clock.now()
        await enqueue(10)
        await wait("ok", 15)
        assert ran["poison"] == 5
        assert not [at for kind, at in started if kind == "poison" and at > flipped]
        assert (await engine.reads.depth(q)).blocked == 10
        status, listed = await gw.call("GET", "/v1/switches")
        assert status == 200
        assert q + "-stop" in [s["name"] for s in listed["switches"]]

        status, body = await gw.call("DELETE", "/v1/switches/" + q + "-stop")
        assert (status, body["jobs_released"]) == (200, 10), body
        flips = [e for e in await audit.read(engine._client, 1000) if q + "-stop" in e.target]
        assert [e.action for e in flips] == [
            "gate.DELETE /v1/switches/{name}",
            "gate.PUT /v1/switches/{name}",
        ]
        await wait("poison", 15)
    assert ran == {"ok": 15, "poison": 15}  # every job once: none lost, none twice
    assert (await engine.reads.depth(q)).blocked == 0
    shipped = await asyncio.to_thread(
        on_audit_topic, endpoints.kafka_bootstrap, lambda d: q + "-stop" in d["target"], 2
    )
    assert sorted(d["action"] for d in shipped) == [
        "gate.DELETE /v1/switches/{name}",
        "gate.PUT /v1/switches/{name}",
    ]


async def test_switch_requests_are_checked(gw: Gw) -> None:
    status, body = await gw.call("PUT", "/v1/switches/bad name", json={"kind": "x"})
    assert (status, body["error"]["code"]) == (400, "switch_invalid")
    status, body = await gw.call("PUT", "/v1/switches/x", json={"action": "pause"})
    assert status == 400, body
    status, body = await gw.call("DELETE", "/v1/switches/never-set-" + gw.queue)
    assert (status, body["error"]["code"]) == (404, "switch_not_found")
    async with (
        aiohttp.ClientSession() as anonymous,
        anonymous.put(gw.url + "/v1/switches/x", json={}) as resp,
    ):
        assert resp.status == 401


async def _kept(store: ConfigStore) -> list[str]:
    return [s.name for s in (await store.switches())[0]]


async def test_a_switch_is_kept_in_step_and_in_force_at_once_when_consul_does_not_answer(
    gw: Gw, engine: Engine, consul_store: ConfigStore
) -> None:
    """Set: in force in Redis, then kept (Consul away: 503 ``consul_unavailable``, in force, not kept —
    sent again, kept). Lift: Consul's copy first (Consul away: 503, nothing lifted)."""
    name, other = gw.queue + "-kept", gw.queue + "-unkept"
    stop = {"queue": gw.queue, "kind": "poison"}
    status, body = await gw.call("PUT", "/v1/switches/" + name, json=stop)
    assert status == 200, body
    assert await _kept(consul_store) == [name]

    gate = gw.service._gate
    assert gate is not None
    reachable = gate.consul_settings
    if gate._consul is not None:
        await close_consul(gate._consul)
    gate._consul, gate.consul_settings = None, ConsulSettings(addr=f"127.0.0.1:{free_port()}")
    status, body = await gw.call("PUT", "/v1/switches/" + other, json=stop)
    assert (status, body["error"]["code"]) == (503, "consul_unavailable"), body
    assert "in force, but Consul did not keep it" in body["error"]["message"]
    assert other in [s.name for s in await engine.admin.switches()], "in force at once all the same"
    status, body = await gw.call("DELETE", "/v1/switches/" + name)
    assert (status, body["error"]["code"]) == (503, "consul_unavailable"), body
    assert name in [s.name for s in await engine.admin.switches()], "nothing lifted"

    await close_consul(gate._consul)
    gate._consul, gate.consul_settings = None, reachable
    status, body = await gw.call("PUT", "/v1/switches/" + other, json=stop)
    assert status == 200, body
    assert sorted(await _kept(consul_store)) == sorted([name, other])
    for switch in (name, other):
        status, body = await gw.call("DELETE", "/v1/switches/" + switch)
        assert status == 200, body
    assert await _kept(consul_store) == []
    assert not {name, other} & {s.name for s in await engine.admin.switches()}


async def test_a_switch_redis_lost_is_in_force_again_when_its_queue_is_configured_again(
    gw: Gw, engine: Engine, consul_store: ConfigStore
) -> None:
    """Redis lost its data; the operator configures the queue again before the relay's next write (which
    then finds it configured): the kept switches are back before the configuration creates it. A switch
    lifted while Redis had lost it does not come back."""
    q = gw.queue
    for name, kind in ((q + "-held", "poison"), (q + "-lifted", "other")):
        status, body = await gw.call("PUT", "/v1/switches/" + name, json={"queue": q, "kind": kind})
        assert status == 200, body
    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"max_attempts": 3})
    assert status == 200, body
    await engine.enqueue_batch([new_envelope(q, "poison", {}, id="before")])
    keys = [k async for k in engine._client.scan_iter(match=f"jobq:{{{q}}}:*")]
    assert await engine._client.delete(*keys, SWITCHES_KEY)  # Redis lost its data
    status, body = await gw.call("DELETE", f"/v1/switches/{q}-lifted")
    assert (status, body["jobs_released"]) == (200, 0), body

    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"max_attempts": 3})
    assert status == 200, body
    status, listed = await gw.call("GET", "/v1/switches")
    assert [s["name"] for s in listed["switches"] if s["name"].startswith(q)] == [q + "-held"]
    await engine.enqueue_batch([new_envelope(q, k, {}, id=k) for k in ("poison", "other")])
    assert [j.id for j in await engine.jobs.claim(q, 10)] == ["other"]
    status, body = await gw.call("DELETE", f"/v1/switches/{q}-held")
    assert (status, body["jobs_released"]) == (200, 1), body
    assert await _kept(consul_store) == []


def test_the_cli_sets_lists_and_lifts_a_switch(prefix: str, endpoints: Endpoints) -> None:
    runner = CliRunner()
    env = {
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "JOBQ_CONSUL_ADDR": endpoints.consul_addr,
        "JOBQ_CRON_KV_PREFIX": f"jobq-test/{prefix}",
    }

    def jobq(*args: str) -> Any:
        return runner.invoke(app, ["switch", *args], env=env)

    async def kept() -> list[str]:
        client = consul_client(ConsulSettings(addr=endpoints.consul_addr))
        try:
            return await _kept(ConfigStore(client, env["JOBQ_CRON_KV_PREFIX"]))
        finally:
            await close_consul(client)

    name = f"{prefix}-cli"
    made = jobq("set", name, "--queue", f"{prefix}.*", "--kind", "k", "--meta", "tenant=acme")
    assert made.exit_code == 0, made.output
    assert "in force (park)" in made.output
    (row,) = [r for r in orjson.loads(jobq("list", "--json").output) if r["name"] == name]
    assert (row["queue"], row["kind"], row["meta"], row["action"]) == (
        f"{prefix}.*",
        "k",
        {"tenant": "acme"},
        "park",
    )
    assert name in jobq("list").output  # the table never cuts a name
    assert asyncio.run(kept()) == [name]
    lifted = jobq("lift", name)
    assert asyncio.run(kept()) == []
    assert "lifted; 0 parked job(s)" in lifted.output
    again = jobq("lift", name)
    assert f"no kill switch named {name!r}" in str(again.exception)
    bad = jobq("set", name, "--meta", "tenant")
    assert "key=value" in str(bad.exception)
