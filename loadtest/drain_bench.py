"""``./run bench drain``: drain pre-enqueued no-op jobs with 2 real worker processes (``jobq worker``).

The jobs are stored into a paused queue on a throw-away Redis, the two workers start (``--burst``) and
announce themselves (their presence heartbeat: imported, connected, about to claim), then the queue is
resumed and the clock runs until both workers exited (every job completed).
Reported: jobs/s, CPU seconds per 1k jobs of the worker processes (user + system, from rusage, less what
they had spent when the clock started: their imports and connections, as ``jobq bench peers`` leaves
start-up out) and of Redis (from ``INFO cpu``), the workers' start-up CPU seconds, and the script calls
Redis answered per 1k jobs (``INFO commandstats``).

``--batch N`` drains a batch handler's jobs instead (``loadtest/batch_app.py``, batches of N, each pool's
concurrency 2 N: a batch gathers while one runs): reported as items/s.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
from functools import partial

import redis
import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqcore.keys import presence_key
from jqengine import Engine
from jqstack.pipeline import PipelineEnv, worker_argv
from jqstack.supervise import Children
from loadtest.batch_app import KIND
from loadtest.cpu import tree_cpu_s
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["WORKERS", "drain", "fill", "run"]

WORKERS = 2


async def fill(url: str, queue: str, n: int, kind: str = "demo.noop") -> None:
    """Store ``n`` no-op jobs (ids ``d0``…) into ``queue``, paused first so nothing runs yet."""
    client = aioredis.Redis.from_url(url, socket_timeout=90)
    engine = Engine(client)
    await engine.admin.pause(queue, True)
    t = now_ms()
    for i in range(0, n, 1000):
        await engine.enqueue_batch(
            [new_envelope(queue, kind, None, id=f"d{j}", at_ms=t) for j in range(i, min(n, i + 1000))]
        )
    await client.aclose()


_SCRIPT_CALLS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")


async def _redis_cpu(url: str) -> tuple[float, int]:
    """Redis's CPU seconds (user + system) and the script calls it answered, so far."""
    client = aioredis.Redis.from_url(url)
    info, stats = await client.info("cpu"), await client.info("commandstats")
    await client.aclose()
    calls = sum(int(v["calls"]) for k, v in stats.items() if k in _SCRIPT_CALLS)
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"]), calls


async def _resume_and_count(url: str, queue: str) -> int:
    client = aioredis.Redis.from_url(url)
    await Engine(client).admin.pause(queue, False)
    await client.aclose()
    return 0


async def _finished(url: str, queue: str) -> int:
    client = aioredis.Redis.from_url(url)
    d = await Engine(client).reads.depth(queue)
    await client.aclose()
    return d.finished


def _announced(url: str, pid: int, queue: str) -> bool:
    """True once the pool of process ``pid`` serving ``queue`` beats in the workers' presence set (a pool
    beats when it has imported its handlers and connected, right before its claim loop starts)."""
    client = redis.Redis.from_url(url)
    try:
        return client.zscore(presence_key("worker"), f"{socket.gethostname()}:{pid}:{queue}") is not None
    finally:
        client.close()


def drain(url: str, queue: str, n: int, concurrency: int, batch: int = 0) -> dict[str, float]:
    """Drain the paused ``queue`` holding ``n`` jobs (:func:`fill`) with :data:`WORKERS` burst workers: start
    them, wait until both announced themselves, resume the queue and time until both exited. The figures
    of this scenario. ``batch``: the jobs are the batch app's, in batches of this size."""
    env = PipelineEnv({"JOBQ_REDIS_URL": url}, log_level="warning").worker()
    app = "loadtest.batch_app:registry" if batch else "examples.demo_app:registry"
    env["JOBQ_BENCH_BATCH"] = str(batch)
    argv = worker_argv(queue, app=app, concurrency=concurrency, burst=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Children(grace_s=30.0) as workers:
        for i in range(WORKERS):
            workers.start(f"worker-{i}", argv, output="inherit", env=env)  # their warnings reach the terminal
        for w in workers:  # both imported and about to claim before the clock starts (fails if one exits)
            w.wait_ready(partial(_announced, url, w.pid, queue), timeout_s=120, what=f"{w.name} presence")
        start_up = tree_cpu_s([w.pid for w in workers])  # spent before the clock
        cpu_before, scripts_before = asyncio.run(_redis_cpu(url))
        started = time.perf_counter()
        asyncio.run(_resume_and_count(url, queue))
        codes = [w.wait(600) for w in workers]
        elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_after, scripts_after = asyncio.run(_redis_cpu(url))
    redis_cpu, scripts = cpu_after - cpu_before, scripts_after - scripts_before
    if any(codes) or asyncio.run(_finished(url, queue)) != n:
        raise RuntimeError(f"drain failed: exit codes {codes}")
    worker_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) - start_up
    return {
        "drain": n / elapsed,
        "worker CPU s per 1k jobs": worker_cpu / n * 1000,
        "worker start-up CPU s": start_up,
        "redis CPU s per 1k jobs": redis_cpu / n * 1000,
        "script calls per 1k jobs": scripts / n * 1000,
    }


def _round(url: str, n: int, rep: int, concurrency: int, batch: int) -> dict[str, float]:
    queue = f"drain{os.getpid()}r{rep}"
    asyncio.run(fill(url, queue, n, KIND if batch else "demo.noop"))
    return drain(url, queue, n, concurrency, batch)


UNITS = {
    "drain": "jobs/s",
    "worker CPU s per 1k jobs": "s",
    "worker start-up CPU s": "s",
    "redis CPU s per 1k jobs": "s",
    "script calls per 1k jobs": "calls",
}


def run(quick: bool = False, batch: int = 0) -> Report:
    """``batch`` > 0: batch handlers' items (batches of ``batch``), each pool's concurrency ``2 batch``."""
    n, reps, concurrency = (3_000, 1, 50) if quick else (100_000, 3, 50)
    concurrency = 2 * batch if batch else concurrency
    params = {"jobs": n, "reps": reps, "worker_processes": WORKERS, "concurrency": concurrency}
    report = Report("drain", {**params, "batch": batch})
    samples = redis_rounds("drain", reps, lambda url, rep: _round(url, n, rep, concurrency, batch))
    for name, values in samples.items():
        report.add(name, "items/s" if batch and name == "drain" else UNITS[name], values)
    what = f"{KIND} items in batches of {batch}" if batch else "demo.noop jobs"
    report.notes.append(
        f"{n} {what}, {WORKERS} worker processes x concurrency {concurrency}, "
        "worker CPU includes process start-up"
    )
    return report
