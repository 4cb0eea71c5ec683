"""The worker as a real process (``python -m worker``): SIGTERM releases, SIGKILL loses nothing, bad input."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from jobq.stack.manager import Endpoints
from jqcore.envelope import new_envelope
from jqcore.state import Engine, reads
from jqcore.state.models import JobInfo


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    assert endpoints.redis_url
    client = aioredis.Redis.from_url(endpoints.redis_url)
    yield Engine(client)
    await client.aclose()


@pytest.fixture
def spawn(endpoints: Endpoints) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()


def start_worker(
    procs: list[subprocess.Popen[bytes]], endpoints: Endpoints, *args: str
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "JOBQ_REDIS_URL": endpoints.redis_url or ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    procs.append(proc)
    return proc


async def until_state(engine: Engine, queue: str, job_id: str, state: str, timeout_s: float = 90) -> JobInfo:
    """Wait (bounded) until the job reaches ``state``; the worker process gives us no other event."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        got = await reads.get_job(engine.client, queue, job_id)
        if got is not None and got.state == state:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"job {job_id} never reached {state}: {got}")
        await asyncio.sleep(0.05)


async def exit_code(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    return await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout_s)


async def test_sigterm_releases_the_running_job_without_spending_its_attempt(
    engine: Engine, endpoints: Endpoints, prefix: str, spawn: list[subprocess.Popen[bytes]]
) -> None:
    q = f"{prefix}.proc"
    env = new_envelope(q, "demo.sleep", {"seconds": 30})
    await engine.enqueue_batch([env])
    proc = start_worker(spawn, endpoints, "--queues", q, "--grace", "0.2")
    await until_state(engine, q, env.id, "running")
    proc.send_signal(signal.SIGTERM)
    assert await exit_code(proc) == 0
    got = await reads.get_job(engine.client, q, env.id)
    assert got is not None
    assert (got.state, got.attempt) == ("pending", 0)


async def test_sigkill_loses_nothing_the_next_worker_runs_the_job(
    engine: Engine, endpoints: Endpoints, prefix: str, spawn: list[subprocess.Popen[bytes]]
) -> None:
    q = f"{prefix}.proc"
    # long enough that the kill lands while it runs, even if this test is descheduled for a while
    env = new_envelope(q, "demo.sleep", {"seconds": 3})
    await engine.enqueue_batch([env])
    first = start_worker(spawn, endpoints, "--queues", q, "--lease-ms", "1000")
    await until_state(engine, q, env.id, "running")
    first.kill()
    await exit_code(first)
    second = start_worker(spawn, endpoints, "--queues", q, "--lease-ms", "1000", "--burst")
    assert await exit_code(second, 120) == 0, (second.stdout.read() if second.stdout else b"").decode()
    got = await reads.get_job(engine.client, q, env.id)
    assert got is not None
    assert (got.state, got.attempt, got.result) == ("completed", 2, "3")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--queues", "q", "--app", "no.such.module"], "cannot import 'no.such.module'"),
        (["--queues", "q", "--app", "worker.examples:cpu_hash"], "is not a worker.Registry"),
        (["--queues", " , "], "--queues names no queue"),
        (["--queues", "q", "--concurrency", "0"], "--concurrency"),
    ],
)
def test_bad_options_are_named(args: list[str], needle: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "worker", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 2
    assert needle in out.stdout + out.stderr
