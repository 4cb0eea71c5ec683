"""Worker pools against the real Redis: outcomes, retries, control flow, timeouts, modes, leases, shutdown."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from examples.demo_app import cpu_hash
from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqcore.errors import Cancel, Snooze
from jqcore.testsignal import enable_all
from jqengine import Engine, JobInfo, QueueConfig
from jqruntime.stores import presence
from tests.worker.held import HeldRounds, hold_rounds
from worker.pool import Pool, PoolConfig
from worker.registry import Backoff, Registry, current_job

pytestmark = pytest.mark.usefixtures("scheduler")  # pools run no timers: the service does

FAST = Backoff(base_s=0.01, cap_s=0.02, jitter=False)


async def enqueue(engine: Engine, queue: str, kind: str, args: object = None, **kw: object) -> str:
    env = new_envelope(queue, kind, args, **kw)  # type: ignore[arg-type]
    await engine.enqueue_batch([env])
    return env.id


async def info(engine: Engine, queue: str, job_id: str) -> JobInfo:
    got = await engine.reads.get_job(queue, job_id)
    assert got is not None
    return got


async def drain(reg: Registry, engine: Engine, redis: aioredis.Redis, queue: str, **kw: object) -> None:
    """Run a burst pool until nothing is claimable and nothing runs."""
    async with Pool(reg, engine, PoolConfig([queue], burst=True, **kw), redis=redis) as pool:  # type: ignore[arg-type]
        await asyncio.wait_for(pool.drained.wait(), 60)


async def test_async_and_sync_handlers_complete_with_results(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.w", Registry()
    threads: list[str] = []

    @reg.job("add", queue=q)
    async def add(a: int, b: int) -> int:
        assert current_job().kind == "add"
        return a + b

    @reg.job("shout", queue=q)
    def shout(text: str) -> str:
        threads.append(threading.current_thread().name)
        assert current_job().attempt == 1
        return text.upper()

    a = await enqueue(engine, q, "add", {"a": 2, "b": 3})
    s = await enqueue(engine, q, "shout", ["hi"])
    await drain(reg, engine, redis, q)
    assert ((await info(engine, q, a)).state, (await info(engine, q, a)).result) == ("completed", "5")
    assert (await info(engine, q, s)).result == '"HI"'
    assert threads[0].startswith("jobq")


async def test_failures_retry_with_backoff_then_dead_letter(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.w", Registry()

    @reg.job("boom", queue=q, max_attempts=3, backoff=FAST)
    async def boom() -> None:
        raise ValueError(f"broken on attempt {current_job().attempt}")

    job_id = await enqueue(engine, q, "boom")
    await drain(reg, engine, redis, q)
    got = await info(engine, q, job_id)
    assert (got.state, got.attempt) == ("errored", 3)
    assert "ValueError: broken on attempt 3" in (got.last_error or "")
    assert [h["outcome"] for h in got.history] == ["failed", "failed", "failed"]
    assert [j.id for j in await engine.reads.dead_list(q)] == [job_id]


async def test_cancel_and_snooze_from_handlers(engine: Engine, redis: aioredis.Redis, prefix: str) -> None:
    q, reg = f"{prefix}.w", Registry()

    @reg.job("refuse", queue=q)
    async def refuse() -> None:
        raise Cancel("not today")

    @reg.job("later", queue=q)
    async def later() -> str:
        if current_job().attempt == 1 and not later_seen:
            later_seen.append(1)
            raise Snooze(0.05)
        return f"attempt {current_job().attempt}"

    later_seen: list[int] = []
    r = await enqueue(engine, q, "refuse")
    s = await enqueue(engine, q, "later")
    await drain(reg, engine, redis, q)
    refused = await info(engine, q, r)
    assert (refused.state, refused.attempt) == ("canceled", 1)
    snoozed = await info(engine, q, s)
    assert (snoozed.state, snoozed.result) == ("completed", '"attempt 1"'), "a snooze spends no attempt"


async def test_timeout_stops_an_async_job(engine: Engine, redis: aioredis.Redis, prefix: str) -> None:
    q, reg = f"{prefix}.w", Registry()
    cancelled = asyncio.Event()

    @reg.job("stuck", queue=q, timeout=0.2, max_attempts=1)
    async def stuck() -> None:
        try:
            await asyncio.Event().wait()  # runs until the timeout cancels it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = await enqueue(engine, q, "stuck")
    await drain(reg, engine, redis, q)
    assert cancelled.is_set()
    got = await info(engine, q, job_id)
    assert got.state == "errored"
    assert "timeout after 0.2s" in (got.last_error or "")


async def test_process_pool_handler(engine: Engine, redis: aioredis.Redis, prefix: str) -> None:
    q, reg = f"{prefix}.w", Registry()
    reg.job("cpu", queue=q, mode="process")(cpu_hash)
    job_id = await enqueue(engine, q, "cpu", {"rounds": 100})
    await drain(reg, engine, redis, q, process_workers=1)
    assert (await info(engine, q, job_id)).result == f'"{cpu_hash(100)}"'


async def test_lease_keeper_keeps_a_long_job_from_being_reaped(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.w", Registry()
    # The keeper extends a third into each lease; the rest is headroom for a loop that is late on a
    # loaded machine (with a 300 ms lease a 200 ms stall was enough to have the job reaped).
    pool = Pool(reg, engine, PoolConfig([q], burst=True, lease_ms=1500), redis=redis)
    enable_all(pool.signals)

    @reg.job("long", queue=q)
    async def long() -> int:
        job_id, rounds = current_job().id, 0

        def three(extended: list[str]) -> bool:
            nonlocal rounds
            rounds += job_id in extended
            return rounds >= 3

        await pool.signals.extended.wait_for(three)  # outlives three leases, each extended by the keeper
        return current_job().attempt

    job_id = await enqueue(engine, q, "long")
    async with pool:
        await asyncio.wait_for(pool.drained.wait(), 60)
    got = await info(engine, q, job_id)
    assert (got.state, got.attempt, got.result) == ("completed", 1, "1")


async def running_forever(
    engine: Engine, redis: aioredis.Redis, queue: str, **config: Any
) -> tuple[Pool, str]:
    """A started pool (``PoolConfig`` options ``config``) running one job that runs until the pool stops
    it, returned once the job started; (the pool, the job id)."""
    reg, started = Registry(), asyncio.Event()

    @reg.job("long", queue=queue)
    async def long() -> None:
        started.set()
        await asyncio.Event().wait()

    job_id = await enqueue(engine, queue, "long")
    pool = Pool(reg, engine, PoolConfig([queue], **config), redis=redis)
    await pool.start()
    await asyncio.wait_for(started.wait(), 30)
    return pool, job_id


async def test_graceful_shutdown_releases_a_long_job(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q = f"{prefix}.w"
    pool, job_id = await running_forever(engine, redis, q, grace_s=0.2)
    found = await pool.readiness()  # /readyz's judgement: claiming, Redis answers
    assert (found.problems, found.facts["running"], found.facts["queues"]) == ([], 1, [q])
    await pool.stop()
    assert [p.code for p in (await pool.readiness()).problems] == ["stopping"]
    got = await info(engine, q, job_id)
    assert (got.state, got.attempt) == ("pending", 0), "released, and the attempt refunded"


async def test_hard_stop_loses_nothing_the_lease_brings_it_back(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q = f"{prefix}.w"
    # short enough that the next pool reaps it soon, long enough that the keeper is never late for it
    pool, job_id = await running_forever(engine, redis, q, lease_ms=1000)
    await pool.hard_stop()
    assert (await info(engine, q, job_id)).state == "running"

    done = asyncio.Event()
    reg2 = Registry()

    @reg2.job("long", queue=q)
    async def long_again() -> int:
        done.set()
        return current_job().attempt

    async with Pool(reg2, engine, PoolConfig([q]), redis=redis):
        await asyncio.wait_for(done.wait(), 60)
    got = await info(engine, q, job_id)
    assert got.attempt == 2


async def test_a_fair_values_rate_holds_across_a_running_pool(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """Real clocks: a pool waiting for hand-offs, the scheduler waking the rated tenant (fair_rates 10/s,
    a burst of 10). Its 25 jobs start no faster than the rate — measured by Redis's own stamps
    (``started_at``) — and the other tenant's jobs do not wait for it."""
    q, reg = f"{prefix}.fair", Registry()
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant", fair_rates={"noisy": 10}))
    done: list[str] = []
    all_done = asyncio.Event()

    @reg.job("work", queue=q)
    async def work() -> None:
        done.append(current_job().id)
        if len(done) == 35:
            all_done.set()

    envs = [new_envelope(q, "work", None, meta={"tenant": "noisy"}) for _ in range(25)]
    envs += [new_envelope(q, "work", None, meta={"tenant": "quiet"}) for _ in range(10)]
    await engine.enqueue_batch(envs)
    async with Pool(reg, engine, PoolConfig([q], concurrency=4), redis=redis):
        await asyncio.wait_for(all_done.wait(), 60)
    # The rate is judged in the claimers' views of Redis's clock (``NOW``), read before each call reaches
    # Redis; Redis stamps ``started_at`` when the script runs: up to a call's transit apart (under load,
    # tens of ms), hence the 200 ms allowance (unlimited, the 25 start within ~100 ms).
    infos = await engine.reads.get_jobs(q, [e.id for e in envs])
    noisy = sorted(i.started_at for i in infos[:25] if i is not None and i.started_at is not None)
    quiet = [i.started_at for i in infos[25:] if i is not None and i.started_at is not None]
    assert (len(noisy), len(quiet)) == (25, 10)
    assert noisy[-1] - noisy[0] >= 1300, "10 at once, then one each 100 ms: the 25th 1.5 s after the first"
    assert max(quiet) < noisy[-1], "the quiet tenant was not held behind the rated one"


def _script_calls(name: str) -> float:
    return metrics.SCRIPT_CALLS.labels(name, "ok")._value.get()


async def test_a_busy_pools_completions_carry_its_next_claims(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """Complete-and-claim: the jobs a round finished are replaced by the same script call (settle_claim);
    the claim loop claims only when a round came back short."""
    q, reg, ran = f"{prefix}.w", Registry(), []

    @reg.job("tick", queue=q)
    async def tick(n: int) -> None:
        await redis.incr(f"{q}:ticks")  # a round trip: the jobs of a round end at different moments
        ran.append(n)

    await engine.enqueue_batch([new_envelope(q, "tick", {"n": i}) for i in range(300)])
    claims, rounds = _script_calls("claim"), _script_calls("settle_claim")
    await drain(reg, engine, redis, q, concurrency=10)
    claims, rounds = _script_calls("claim") - claims, _script_calls("settle_claim") - rounds
    assert sorted(ran) == list(range(300))
    assert rounds > 0
    # the claim loop claims at the start and when a round comes back short (the queue's end): a few calls,
    # not one every other round (a round that counted its room before the last round's jobs had left)
    assert claims <= 5, f"{claims} claim calls beside {rounds} rounds: the rounds did not claim"


async def _held_pool(
    engine: Engine, redis: aioredis.Redis, q: str, ran: list[str], ids: list[str], **config: Any
) -> tuple[Pool, HeldRounds]:
    """A pool of concurrency 1 on three enqueued jobs (``ids``), its first round held on its way to Redis."""
    reg = Registry()

    @reg.job("quick", queue=q)
    async def quick() -> None:
        ran.append(current_job().id)

    ids += [await enqueue(engine, q, "quick") for _ in range(3)]
    pool = Pool(reg, engine, PoolConfig([q], concurrency=1, **config), redis=redis)
    held = hold_rounds(pool)
    await pool.start()
    await asyncio.wait_for(held.arrived.wait(), 30)
    return pool, held


async def test_a_stop_releases_the_jobs_a_round_on_its_way_brought(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """The round sent before the stop claims its replacement; the stopping pool holds it unstarted and
    releases it with the rest (attempt refunded), after the round's completion was written."""
    q, ran, ids = f"{prefix}.w", [], []
    pool, held = await _held_pool(engine, redis, q, ran, ids)
    cancel_fetcher = pool._cancel_fetcher

    async def open_the_gate_once_stopping() -> None:  # the stop's first step: it claims nothing more
        assert pool._stopping
        held.gate.set()
        await cancel_fetcher()

    pool._cancel_fetcher = open_the_gate_once_stopping  # type: ignore[method-assign]
    await asyncio.wait_for(pool.stop(), 30)
    states = sorted((j.state, j.attempt) for j in await engine.reads.get_jobs(q, ids) if j)
    assert len(ran) == 1
    assert states == [("completed", 1), ("pending", 0), ("pending", 0)]


async def test_a_crash_before_a_rounds_answer_loses_nothing(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """The window complete-and-claim leaves: a job whose handler returned but whose round never reached
    Redis stays running under its lease, which expires; the job runs again (attempt 2), nothing is lost."""
    q, ran, ids = f"{prefix}.w", [], []
    pool, _ = await _held_pool(engine, redis, q, ran, ids, lease_ms=1000)
    first = ran[0]
    await pool.hard_stop()
    assert (await info(engine, q, first)).state == "running", "its completion never reached Redis"
    await drain(pool.registry, engine, redis, q)
    got = await info(engine, q, first)
    assert (got.state, got.attempt) == ("completed", 2)
    assert sorted(set(ran)) == sorted(ids)
    assert [j.state for j in await engine.reads.get_jobs(q, ids) if j] == ["completed"] * 3


async def test_a_pool_counts_its_claims_per_queue_from_zero(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """Every served queue's claims series exists from the start (a pool that never claims shows as 0); the
    pool's presence record notes its last claim from each queue (the silent-worker judgment). A job's
    series count it once each, whether per job or per round: claimed, in flight, started, finished, its
    queue wait and run time."""
    q, idle, reg = f"{prefix}.w", f"{prefix}.idle", Registry()

    @reg.job("noop", queue=q)
    async def noop() -> None:
        return None

    for _ in range(3):
        await enqueue(engine, q, "noop")
    await drain(reg, engine, redis, q)
    sample = REGISTRY.get_sample_value
    assert metrics.WORKER_CLAIMS.labels(q)._value.get() == 3
    assert sample("jobq_jobs_in_flight", {"queue": q}) == 0
    assert sample("jobq_jobs_started_total", {"queue": q, "kind": "noop"}) == 3
    assert sample("jobq_jobs_finished_total", {"queue": q, "kind": "noop", "outcome": "succeeded"}) == 3
    assert sample("jobq_job_queue_wait_seconds_count", {"queue": q}) == 3
    assert sample("jobq_job_run_seconds_count", {"queue": q, "kind": "noop"}) == 3
    pool = Pool(reg, engine, PoolConfig([idle, q]), redis=redis)
    enable_all(pool.signals)
    async with pool:
        started = now_ms()
        await asyncio.sleep(0.002)  # not a wait for anything: the claim below is stamped after the start
        job_id = await enqueue(engine, q, "noop")
        await pool.signals.finished.wait_for(lambda done: done[0] == job_id)
        await pool._presence.beat()
        (me,) = [c for c in await presence.claimers(redis, ["worker"]) if c.name == pool._presence.name]
        assert me.last_claim[idle] <= started, "never claimed from: serving it since the start"
        assert me.last_claim[q] > started
        assert (me.busy, me.slots, me.filtered) == (0, pool._capacity(), False)
    assert not [c for c in await presence.claimers(redis, ["worker"]) if c.name == me.name], "it left"
    assert REGISTRY.get_sample_value("jobq_worker_claims_total", {"queue": idle}) == 0
    assert REGISTRY.get_sample_value("jobq_jobs_in_flight", {"queue": idle}) == 0


async def test_a_job_whose_claim_lease_ended_before_its_start_is_given_up_unrun(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """The loop held up between a claim and its handler's start past the claim's lease (seen under CI load:
    the job was handed out again and ran twice at once): the handler never starts and nothing is written
    back; the next claim runs it once."""
    q, reg, ran = f"{prefix}.late", Registry(), []

    @reg.job("k", queue=q)
    async def k() -> None:
        ran.append(current_job().attempt)

    await enqueue(engine, q, "k")
    [late] = await engine.jobs.claim(q, 1, lease_ms=1000, now_ms=now_ms() - 5_000)  # its lease ended 4 s ago
    async with Pool(reg, engine, PoolConfig([f"{q}.none"], concurrency=1), redis=redis) as pool:
        pool._launch([late])  # as its fetch loop would (it claims elsewhere: only this run is in the test)
        run = pool.in_flight[late.id]
        assert run.task is not None
        await asyncio.gather(run.task, return_exceptions=True)
        assert (run.abandoned, run.started, ran) == (True, False, [])
    await drain(reg, engine, redis, q)
    assert ran == [2], "the next claim ran it, once"


async def test_a_pool_at_a_trickle_is_handed_job_after_job_on_one_registration(
    engine: Engine, redis: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs one at a time to an idle pool of 4 slots: its short claim registered the slots for hand-offs,
    and a hand-off of one job leaves the rest registered, so the pool pops job after job with no claim
    call between (issue 58: at a trickle a claim a job was a third of a worker's script calls)."""
    q, reg = f"{prefix}.w", Registry()

    @reg.job("noop", queue=q)
    async def noop() -> None:
        return None

    claims, real = [], engine.jobs.claim

    async def counted(queue: str, n: int, **kw: Any) -> Any:
        claims.append(n)
        return await real(queue, n, **kw)

    monkeypatch.setattr(engine.jobs, "claim", counted)
    pool = Pool(reg, engine, PoolConfig([q], concurrency=4), redis=redis)
    enable_all(pool.signals)
    async with pool:
        await pool.claimed_once.wait()
        for _ in range(3):
            job_id = await enqueue(engine, q, "noop")
            await pool.signals.finished.wait_for(lambda done, i=job_id: done == (i, "succeeded"))
    assert claims == [4]
