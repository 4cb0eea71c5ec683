"""A queue Redis has no configuration of — new, or lost with Redis's data — gets its kept settings from
Consul before the relay writes its first job (``jqrelay/kept.py``): a wiped exclusive queue is exclusive
again for its very next job, not only once an operator runs ``jobq rebuild``; a kill switch in force when
Redis lost its data holds again from that job on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine, QueueConfig, Switch, SwitchNotFound
from jqengine.keys import SWITCHES_KEY
from jqrelay.main import RelayService
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.config import ConfigStore, lift_switch, set_switch
from jqstack.manager import Endpoints
from tests.relay.conftest import Produce


async def test_a_queue_redis_lost_is_given_its_kept_settings_before_its_next_job(
    prefix: str,
    endpoints: Endpoints,
    cron_settings: CronSettings,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
) -> None:
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.x"
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    store = ConfigStore(consul, cron_settings.kv_prefix)
    await store.put_queue(queue, QueueConfig(mode="exclusive", excl_key="account"))
    await store.put_kind("k", [queue], concurrency=1, max_attempts=2)
    account = {"account": "a"}
    try:
        async with make_relay(topic) as relay:
            written = relay.relays[0].signals.batch
            await produce_jobs(topic, queue, ["a1"], meta=account)
            await written.wait_for(lambda c: c.get("written", 0) >= 1)
            assert (await engine.reads.queue_config(queue)).mode == "exclusive", (
                "a new queue: its kept settings"
            )

            keys = [k async for k in engine._client.scan_iter(match=f"jobq:{{{queue}}}:*")]
            assert await engine._client.delete(*keys)  # Redis lost the queue (a wipe, a lost volume)
            await produce_jobs(topic, queue, ["a2", "a3"], meta=account)
            await written.wait_for(lambda c: c.get("written", 0) >= 3)
            config = await engine.reads.queue_config(queue)
            assert (config.mode, config.excl_key) == ("exclusive", "account")
            options = (await engine.reads.kinds([queue]))["k"]["queues"][queue]
            assert (options["concurrency"], options["max_attempts"]) == (1, 2)
            claimed = await engine.jobs.claim(queue, 10)
            assert [j.id for j in claimed] == ["a2"], "one job of the account at a time, in order"
            info = await engine.reads.get_job(queue, "a2")
            assert info is not None
            assert info.max_attempts == 2, "the kind's kept options hold for its jobs"
    finally:
        await consul.kv.delete(f"{cron_settings.kv_prefix}/", recurse=True)
        await close_consul(consul)


async def test_a_switch_redis_lost_holds_the_relays_next_job_and_one_lifted_meanwhile_stays_lifted(
    prefix: str,
    endpoints: Endpoints,
    cron_settings: CronSettings,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
) -> None:
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.sw"
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    store = ConfigStore(consul, cron_settings.kv_prefix)
    poison = Switch(f"{prefix}-poison", queue=queue, meta={"sw": "poison"})
    fixed = Switch(f"{prefix}-fixed", queue=queue, meta={"sw": "fixed"})
    try:
        for switch in (poison, fixed):
            await set_switch(store, engine, switch)
        async with make_relay(topic) as relay:
            written = relay.relays[0].signals.batch
            await produce_jobs(topic, queue, ["a1"])
            await written.wait_for(lambda c: c.get("written", 0) >= 1)

            keys = [k async for k in engine._client.scan_iter(match=f"jobq:{{{queue}}}:*")]
            assert await engine._client.delete(*keys, SWITCHES_KEY)  # Redis lost its data
            assert await engine.admin.switches() == []
            assert await lift_switch(store, engine, fixed.name) == 0, "lifted while Redis was lost"
            await produce_jobs(topic, queue, ["p1"], meta={"sw": "poison"})
            await produce_jobs(topic, queue, ["f1"], meta={"sw": "fixed"})
            await written.wait_for(lambda c: c.get("written", 0) >= 3)
            assert [s.name for s in await engine.admin.switches()] == [poison.name]
            assert [s.name for s in (await store.switches())[0]] == [poison.name]
            claimed = await engine.jobs.claim(queue, 10)
            assert [j.id for j in claimed] == ["f1"], "the poison job is held, the lifted switch holds none"
            info = await engine.reads.get_job(queue, "p1")
            assert info is not None
            assert (info.state, info.attempt) == ("parked", 0)
    finally:
        with contextlib.suppress(SwitchNotFound):
            await engine.admin.lift_switch(poison.name)
        await consul.kv.delete(f"{cron_settings.kv_prefix}/", recurse=True)
        await close_consul(consul)


async def test_a_relay_starting_on_a_redis_that_lost_its_switches_puts_them_back(
    prefix: str,
    endpoints: Endpoints,
    cron_settings: CronSettings,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
) -> None:
    """Before any write: a Redis started empty has its switches back once a relay started; one set before
    switches were kept (only in Redis) is kept from then on."""
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    store = ConfigStore(consul, cron_settings.kv_prefix)
    kept, older = (
        Switch(f"{prefix}-kept", queue=f"{prefix}.*", kind="k"),
        Switch(f"{prefix}-older", queue=f"{prefix}.*", kind="o"),
    )
    try:
        await store.put_switch(kept)
        await engine._client.delete(SWITCHES_KEY)  # Redis lost its data
        await engine.admin.set_switch(older)  # in Redis alone, as before this release
        async with make_relay(make_topic("jobs", partitions=1)):
            assert [s.name for s in await engine.admin.switches()] == sorted([kept.name, older.name])
            assert sorted(s.name for s in (await store.switches())[0]) == sorted([kept.name, older.name])
            assert await engine.admin.switches_restored()
    finally:
        for switch in (kept, older):
            with contextlib.suppress(SwitchNotFound):
                await engine.admin.lift_switch(switch.name)
        await consul.kv.delete(f"{cron_settings.kv_prefix}/", recurse=True)
        await close_consul(consul)
