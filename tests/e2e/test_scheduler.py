"""The scheduler service on the real stack: an HTTP-only queue (gateway, relay, scheduler; no Python pool
anywhere) gets its delayed jobs, retries and expired leases; several instances split the queues with no
overlap and re-deal when one is killed with SIGKILL, missing no due job, starting none early or twice."""

from __future__ import annotations

import asyncio
import signal
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqengine import Engine
from jqruntime.stores.membership import owner
from jqsched.service import SchedulerService
from jqstack.supervise import http_ok
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

Eventually = Callable[..., Awaitable[Any]]


async def http_claim(path: Any, **body: Any) -> dict[str, Any]:
    got = await path.client.request(
        "POST", f"/v1/queues/{path.queue}/claims", json={"n": 1, "wait_ms": 20_000, **body}
    )
    (job,) = got["jobs"]
    return dict(job)


ROUND_TRIP_MS = 50
"""What a recorded time may lag this host's clock: a process reads Redis's clock through ``TIME`` and its
monotonic clock, behind by at most the round trip of its last sync (``jqcore.clock.ServerClock``); a gateway
recording a claim may lag more than the scheduler that promoted the job (a failure: 1 ms short)."""


async def test_an_http_only_queue_gets_its_delays_retries_and_expired_leases(
    path: Any, scheduler_processes: Any, eventually: Eventually
) -> None:
    scheduler_processes.start("s1")
    # a scheduler process: nothing in this process to wait on, so its membership record is watched
    await eventually(scheduler_processes.members, lambda m: m == ["s1"], 60)
    q = path.queue

    due = now_ms() + 1500
    delayed = (await path.client.enqueue_one(q, "k", {"n": 1}, run_at=due))["id"]
    job = await http_claim(path)
    assert job["id"] == delayed
    info = await path.client.get_job(q, delayed)
    assert info is not None
    # times a transition records are Redis's clock as the caller reads it: up to a round trip behind
    assert info["started_at"] >= due - ROUND_TRIP_MS, "handed out on time, never early"

    failed_at = now_ms()
    fail = {"attempt": job["attempt"], "token": job["token"], "error": "boom", "retry_in_ms": 800}
    outcome = await path.client.request("POST", f"/v1/queues/{q}/jobs/{delayed}/fail", json=fail)
    assert outcome["outcome"] == "retry"
    again = await http_claim(path, lease_ms=1000)
    assert (again["id"], again["attempt"]) == (delayed, 2), "retried after its backoff"
    info = await path.client.get_job(q, delayed)
    assert info is not None
    assert info["run_at"] >= failed_at + 800 - ROUND_TRIP_MS, "the backoff counts from the failure"
    assert info["started_at"] >= info["run_at"] - ROUND_TRIP_MS, "claimed once its retry was due"

    # the claimer goes away without a word: the lease expires and the job comes back with attempt 3
    third = await http_claim(path)
    assert (third["id"], third["attempt"]) == (delayed, 3)
    assert now_ms() >= again["lease_deadline_ms"]


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, raw.decode() if path == "/metrics" else orjson.loads(raw)


async def test_a_scheduler_process_is_ready_in_its_group_and_every_log_line_is_json(
    prefix: str, scheduler_processes: Any
) -> None:
    # debug: the standard library's records too (asyncio's, the Kafka and Redis clients'...); the event
    # shipper (a Kafka producer) runs, the far tier and cron are not needed here
    off = {"JOBQ_SCHEDULER_FAR": "false", "JOBQ_SCHEDULER_CRON": "false"}
    child = scheduler_processes.start("s1", JOBQ_LOG_LEVEL="debug", **off)
    port = scheduler_processes.ports["s1"]
    await child.wait_ready_async(http_ok(f"http://127.0.0.1:{port}/readyz"), timeout_s=60)
    status, body = await asyncio.to_thread(_get, port, "/readyz")
    assert status == 200
    assert (body["service"], body["group"], body["name"], body["members"]) == ("scheduler", prefix, "s1", 1)
    assert (await asyncio.to_thread(_get, port, "/healthz"))[0] == 200
    status, text = await asyncio.to_thread(_get, port, "/metrics")
    assert 'jobq_service_ready{service="scheduler"} 1.0' in text
    assert f'jobq_scheduler_group_members{{group="{prefix}"}} 1.0' in text
    assert 'jobq_redis_info{maxmemory_policy="noeviction"} 1.0' in text, "the stack's Redis never evicts"
    assert "jobq_redis_memory_used_bytes" in text
    child.stop()  # SIGTERM: a graceful stop, logged too
    lines = [line for line in scheduler_processes.log("s1").read_text().splitlines() if line.strip()]
    events = [orjson.loads(line) for line in lines]  # every line: a JSON object, or this raises
    components = {e.get("component") for e in events}
    assert {"jqsched", "jqruntime.health"} <= components, components
    assert "asyncio" in components, "a standard-library record went through the same renderer"
    assert any(e.get("event") == "scheduler stopped" for e in events)


async def test_three_instances_split_the_queues_and_one_killed_loses_nothing(
    prefix: str, engine: Engine, redis: aioredis.Redis, scheduler_processes: Any, eventually: Eventually
) -> None:
    names = ["s1", "s2", "s3"]
    procs = {name: scheduler_processes.start(name) for name in names}
    await eventually(scheduler_processes.members, lambda m: m == names, 60)  # processes: watched
    queues = [f"{prefix}.q{i}" for i in range(9)]
    victim = owner(queues[0], names)
    assert victim is not None

    runs: Counter[str] = Counter()
    early: list[str] = []
    due_at: dict[str, int] = {}
    all_ran, some_ran = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.job("tick")
    async def tick() -> None:
        job = current_job()
        runs[job.id] += 1
        if now_ms() < due_at[job.id]:
            early.append(job.id)
        if len(runs) >= 20:
            some_ran.set()
        if len(runs) == len(due_at):
            all_ran.set()

    start = now_ms()
    jobs = []
    for i in range(180):  # 20 per queue, due over the next 5.5 s: some before the kill, most after
        run_at = start + 1000 + i * 25
        env = new_envelope(queues[i % len(queues)], "tick", None, run_at=run_at)
        due_at[env.id] = run_at
        jobs.append(env)
    await engine.enqueue_batch(jobs)

    async with Pool(registry, engine, PoolConfig(queues, concurrency=20), redis=redis):
        await asyncio.wait_for(some_ran.wait(), 60)
        procs[victim].signal(signal.SIGKILL)
        survivors = [n for n in names if n != victim]
        await eventually(scheduler_processes.members, lambda m: m == survivors, 60)
        await asyncio.wait_for(all_ran.wait(), 120)

    assert set(runs) == set(due_at), "no due job missed"
    assert early == [], "none started before its run_at"
    assert [i for i, n in runs.items() if n != 1] == [], "none run twice"


async def test_in_steady_state_every_queue_has_exactly_one_keeper(
    prefix: str, engine: Engine, make_scheduler: Callable[..., SchedulerService], eventually: Eventually
) -> None:
    queues = [f"{prefix}.q{i}" for i in range(12)]
    await engine.enqueue_batch([new_envelope(q, "k", None) for q in queues])  # registers them
    services = [make_scheduler(f"i{n}") for n in range(3)]
    for service in services:
        await service.start()
    try:

        async def dealt(among: list[SchedulerService]) -> None:
            """Until each of ``among`` has dealt the queues seeing exactly those instances (after now)."""
            names = {s.settings.name for s in among}
            marks = [s.signals.dealt.mark() for s in among]
            for service, mark in zip(among, marks, strict=True):
                await service.signals.dealt.wait_for(lambda d: set(d[0]) == names, after=mark)

        def keepers() -> list[str]:
            # every queue kept exactly once. Not "each keeps some": rendezvous hashing leaves one of 3
            # instances none of 12 queues for 2 % of prefixes.
            return sorted(q for s in services if s.running for q in s.owned)

        await dealt(services)
        assert keepers() == sorted(queues)
        await services[0].stop()  # leaves the group: the others take its queues
        await dealt(services[1:])
        assert keepers() == sorted(queues)
    finally:
        for service in services:
            await service.stop()


async def test_a_beat_with_redis_answering_deals_and_the_stop_leaves_the_group(
    prefix: str, make_scheduler: Callable[..., SchedulerService], redis: aioredis.Redis
) -> None:
    async with make_scheduler("only") as service:
        await asyncio.wait_for(service.dealt.wait(), 30)
        assert await redis.zrange(f"jobq:members:{prefix}", 0, -1) == [b"only"]
    assert await redis.zrange(f"jobq:members:{prefix}", 0, -1) == []
