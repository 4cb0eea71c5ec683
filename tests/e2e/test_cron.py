"""Cron schedules on the real stack: kept in Consul, fired by scheduler instances (exactly one job per
slot however many fire at once), each misfire policy across a simulated downtime, and the same
operations over HTTP and from the CLI."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.clock import now_ms
from jqcore.cron import parse_schedule
from jqcore.routing import RoutingSettings
from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CronStore
from jqsched.cron import CronFirer
from jqsched.service import SchedulerService
from jqstack.manager import Endpoints
from kafkagate.main import GateService

Eventually = Callable[..., Awaitable[Any]]
MIN = 60_000


@pytest.fixture
async def cron_store(endpoints: Endpoints, cron_settings: CronSettings) -> AsyncIterator[CronStore]:
    client = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    try:
        yield CronStore(client, cron_settings.kv_prefix)
    finally:
        await client.kv.delete(f"{cron_settings.kv_prefix}/", recurse=True)
        await close_consul(client)


async def pending_ids(engine: Engine, queue: str) -> list[str]:
    raw = await engine._client.zrange(f"jobq:{{{queue}}}:ready", 0, -1)
    return sorted(r.decode() for r in raw)


async def test_three_instances_firing_one_schedule_enqueue_exactly_one_job_per_slot(
    prefix: str,
    engine: Engine,
    cron_store: CronStore,
    make_scheduler: Callable[..., SchedulerService],
    eventually: Eventually,
) -> None:
    q = f"{prefix}.cron"
    await cron_store.put(parse_schedule({"name": "tick", "every_s": 1, "queue": q, "kind": "k"}), now_ms())
    # each in a group of its own: each believes it owns the schedule
    services = [make_scheduler(f"i{n}", group=f"{prefix}-{n}", cron=True) for n in range(3)]
    for service in services:
        await service.start()
    try:
        await eventually(lambda: cron_store.state("tick"), lambda s: s[0].fires >= 4, 60)
    finally:
        for service in services:
            await service.stop()
    state, _ = await cron_store.state("tick")
    stats = await engine.reads.queue_stats(q)
    enqueued = stats.get("enqueued", 0)
    # a stop may cut a firer between its claim (the CAS) and its enqueue: those slots are still pending in
    # the claim (a firer re-enqueues them after RECOVER_AFTER_MS) and may or may not be in the queue yet
    cut = len(state.pending) if state.fired_at_ms is None else 0
    assert stats.get("duplicates", 0) == 0, "never a second enqueue"
    assert state.fires - cut <= enqueued <= state.fires, (enqueued, state)
    ids = await pending_ids(engine, q)
    slots = [int(i.rsplit(":", 1)[1]) for i in ids]
    assert len(set(slots)) == len(ids) == enqueued
    assert all(i.startswith("cron:tick:") for i in ids)
    assert all(s % 1000 == 0 for s in slots), "slots on the interval"


@pytest.mark.parametrize(("misfire", "jobs"), [("skip", 0), ("once", 1), ("catch_up", 5)])
async def test_each_misfire_policy_after_a_simulated_downtime(
    prefix: str, engine: Engine, cron_store: CronStore, misfire: str, jobs: int
) -> None:
    q = f"{prefix}.cron"
    now = (now_ms() // MIN) * MIN + 30_000  # the newest missed slot is 30 s old
    doc = {"name": "m", "every_s": 60, "queue": q, "kind": "k", "misfire": misfire}
    schedule = parse_schedule({**doc, "catch_up_max": 5, "grace_s": 0})
    await cron_store.put(schedule, now - 10 * MIN - 30_000)  # added, then no scheduler for ten slots
    firer = CronFirer(cron_store, engine, "only", clock=lambda: now)
    await firer.step(["only"], 1000)
    await firer.step(["only"], 1000)  # a second look fires nothing more
    state, _ = await cron_store.state("m")
    assert (state.fires, state.dropped, state.last_slot_ms) == (jobs, 10 - jobs, now - 30_000)
    expected = [f"cron:m:{now - 30_000 - k * MIN}" for k in range(jobs)]
    assert await pending_ids(engine, q) == sorted(expected)


async def test_a_paused_schedule_does_not_fire_and_resumes_from_the_next_slot(
    prefix: str, engine: Engine, cron_store: CronStore
) -> None:
    q = f"{prefix}.cron"
    now = (now_ms() // MIN) * MIN + 30_000
    await cron_store.put(parse_schedule({"name": "p", "every_s": 60, "queue": q, "kind": "k"}), now - 5 * MIN)
    await cron_store.set_paused("p", True, now - 4 * MIN)
    firer = CronFirer(cron_store, engine, "only", clock=lambda: now)
    await firer.step(["only"], 1000)
    assert await pending_ids(engine, q) == []
    await cron_store.set_paused("p", False, now)
    await firer.step(["only"], 1000)
    assert await pending_ids(engine, q) == [], "the paused slots are not misfires"
    later = CronFirer(cron_store, engine, "only", clock=lambda: now + 31_000)
    await later.step(["only"], 1000)
    assert await pending_ids(engine, q) == [f"cron:p:{now + 30_000}"]


async def test_a_host_whose_clock_runs_ahead_fires_no_slot_early(
    prefix: str, engine: Engine, cron_store: CronStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slots are judged by Redis's clock: a scheduler whose host clock runs an hour and 5 minutes ahead
    believes the next hourly slot is past, and fires it only when Redis's clock says it is due."""
    q, hour = f"{prefix}.cron", 60 * MIN
    now = now_ms()
    slot = (now // hour + 1) * hour
    await cron_store.put(parse_schedule({"name": "s", "every_s": 3600, "queue": q, "kind": "k"}), now)
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + (hour + 5 * MIN) * 1_000_000)
    assert now_ms() > slot, "this host now believes the slot is due"
    firer = CronFirer(cron_store, engine, "only")
    wait_ms = await firer.step(["only"], 2 * hour)
    assert await pending_ids(engine, q) == [], "fired before Redis's clock reached the slot"
    assert slot - now - 10_000 <= wait_ms <= slot - now, "the next step is planned on Redis's clock"


async def test_the_http_api_adds_lists_pauses_triggers_and_removes(
    prefix: str,
    engine: Engine,
    make_gate: Callable[..., GateService],
    make_topic: Callable[..., str],
    token: str,
) -> None:
    q = f"{prefix}.cron"
    gate = make_gate(RoutingSettings(default_topic=make_topic("jobs")))
    async with gate, aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, gate.url + path, json=body) as resp:
                return resp.status, await resp.json()

        doc = {"cron": "0 9 * * mon-fri", "tz": "Europe/Paris", "queue": q, "kind": "report", "args": [1]}
        status, stored = await call("PUT", "/v1/cron/daily", doc)
        assert (status, stored["name"], stored["created_ms"] > 0) == (200, "daily", True)
        status, listed = await call("GET", "/v1/cron")
        (row,) = listed["schedules"]
        assert (row["name"], row["schedule"], row["next_slot_ms"] > now_ms()) == (
            "daily",
            "0 9 * * mon-fri (Europe/Paris)",
            True,
        )
        status, paused = await call("POST", "/v1/cron/daily/pause")
        assert (status, paused["paused"]) == (200, True)
        status, got = await call("GET", "/v1/cron/daily")
        assert (got["paused"], got["next_slot_ms"]) == (True, None)
        status, fired = await call("POST", "/v1/cron/daily/trigger")
        assert status == 202
        assert fired["id"].startswith("cron:daily:")
        assert await pending_ids(engine, q) == [fired["id"]], "a trigger fires even while paused"
        status, bad = await call("PUT", "/v1/cron/daily", {**doc, "cron": "61 * * * *", "tz": "Nowhere/X"})
        assert (status, bad["error"]["code"]) == (400, "cron_invalid")
        assert {f["field"] for f in bad["error"]["fields"]} == {"cron", "tz"}
        status, bad = await call("PUT", "/v1/cron/other", {**doc, "name": "daily"})
        assert (status, bad["error"]["fields"][0]["field"]) == (400, "name")
        assert (await call("DELETE", "/v1/cron/daily"))[0] == 200
        for method, path in (("GET", ""), ("DELETE", ""), ("POST", "/pause"), ("POST", "/trigger")):
            status, missing = await call(method, f"/v1/cron/daily{path}")
            assert (status, missing["error"]["code"]) == (404, "cron_not_found"), (method, path)


def test_the_cli_adds_lists_pauses_triggers_and_removes(
    prefix: str, endpoints: Endpoints, cron_settings: CronSettings
) -> None:
    q = f"{prefix}.cron"
    env = {
        "JOBQ_CONSUL_ADDR": endpoints.consul_addr,
        "JOBQ_CRON_KV_PREFIX": cron_settings.kv_prefix,
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
    }
    runner = CliRunner()

    def jobq(*args: str) -> Any:
        return runner.invoke(app, ["cron", *args], env=env)

    try:
        added = jobq("add", "tick", "--queue", q, "--kind", "k", "--every", "300", "--misfire", "once")
        assert added.exit_code == 0, added.output
        listed = jobq("list", "--json")
        (row,) = orjson.loads(listed.output)
        assert (row["name"], row["schedule"], row["misfire"]) == ("tick", "every 300s", "once")
        assert jobq("pause", "tick").exit_code == 0
        assert orjson.loads(jobq("list", "--json").output)[0]["paused"] is True
        triggered = jobq("trigger", "tick")
        assert "enqueued cron:tick:" in triggered.output
        bad = jobq("add", "broken", "--queue", q, "--kind", "k", "--cron", "nope")
        assert bad.exit_code != 0
        assert "not a cron expression" in str(bad.exception)
        missing = jobq("resume", "nothere")
        assert "no cron schedule named 'nothere'" in str(missing.exception)
        assert jobq("remove", "tick").exit_code == 0
        assert orjson.loads(jobq("list", "--json").output) == []
    finally:

        async def clean() -> None:
            client = consul_client(ConsulSettings(addr=endpoints.consul_addr))
            await client.kv.delete(f"{cron_settings.kv_prefix}/", recurse=True)
            await close_consul(client)

        asyncio.run(clean())
