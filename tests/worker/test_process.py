"""The worker as a real process (``jobq worker``): SIGTERM releases, SIGKILL loses nothing, bad input, its
health routes."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from jqcore.envelope import new_envelope
from jqengine import Engine, JobInfo
from jqengine.keys import QueueKeys
from jqstack.manager import Endpoints
from jqstack.pipeline import checkout_env
from jqstack.supervise import Child, Children, python_m

pytestmark = pytest.mark.usefixtures("scheduler")  # pools run no timers: the service does


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    assert endpoints.redis_url
    client = aioredis.Redis.from_url(endpoints.redis_url)
    yield Engine(client)
    await client.aclose()


APP = "examples.demo_app:registry"

Eventually = Callable[..., Awaitable[Any]]
Spawn = Callable[..., Child]
"""``spawn(*args)``: start ``jobq worker --app examples.demo_app:registry ARGS``."""


@pytest.fixture
def spawn(endpoints: Endpoints, tmp_path: Path) -> Iterator[Spawn]:
    """Worker processes against the session's Redis, each logging to ``tmp_path/worker-N.log``; the
    ones still running are stopped at the end of the test (TERM, grace, KILL of the group)."""
    env = checkout_env(JOBQ_REDIS_URL=endpoints.redis_url or "")  # examples/ is not installed
    with Children(grace_s=10.0) as children:

        def start(*args: str) -> Child:
            name = f"worker-{len(children.members)}"
            argv = python_m("jobq", "worker", "--app", APP, *args)
            return children.start(name, argv, output=tmp_path / f"{name}.log", env=env)

        yield start


async def until_state(
    eventually: Eventually, engine: Engine, queue: str, job_id: str, state: str, timeout_s: float = 90
) -> JobInfo:
    """The job once it reached ``state`` (the worker process gives no other event: its record is watched,
    bounded)."""
    got: JobInfo = await eventually(
        lambda: engine.reads.get_job(queue, job_id),
        lambda job: job is not None and job.state == state,
        timeout_s,
    )
    return got


async def test_sigterm_releases_the_running_job_without_spending_its_attempt(
    engine: Engine, prefix: str, spawn: Spawn, eventually: Eventually
) -> None:
    q = f"{prefix}.proc"
    env = new_envelope(q, "demo.sleep", {"seconds": 30})
    await engine.enqueue_batch([env])
    proc = spawn("--queues", q, "--grace", "0.2")
    await until_state(eventually, engine, q, env.id, "running")
    proc.signal(signal.SIGTERM)
    assert await proc.exited(60) == 0
    got = await engine.reads.get_job(q, env.id)
    assert got is not None
    assert (got.state, got.attempt) == ("pending", 0)


async def test_sigkill_loses_nothing_the_next_worker_runs_the_job(
    engine: Engine, prefix: str, spawn: Spawn, eventually: Eventually
) -> None:
    q = f"{prefix}.proc"
    # long enough that the kill lands while it runs, even if this test is descheduled for a while
    env = new_envelope(q, "demo.sleep", {"seconds": 3})
    await engine.enqueue_batch([env])
    first = spawn("--queues", q, "--lease-ms", "1000")
    await until_state(eventually, engine, q, env.id, "running")
    first.signal(signal.SIGKILL)  # the crash under test
    await first.exited(60)
    # a long lease for the job's second run: a stall of the loaded machine must not make it a third
    second = spawn("--queues", q, "--lease-ms", "30000", "--burst")
    assert await second.exited(120) == 0, second.log.read_text() if second.log else ""
    got = await engine.reads.get_job(q, env.id)
    assert got is not None
    assert (got.state, got.attempt, got.result) == ("completed", 2, "3")


async def test_a_worker_killed_after_a_hand_off_before_starting_the_job_loses_nothing(
    engine: Engine, prefix: str, spawn: Spawn, eventually: Eventually
) -> None:
    """The hand-off claim's crash: the job is claimed for the idle worker by the enqueue itself and sits in
    its inbox, leased; the worker is frozen (it cannot start it) and killed. The lease expires, the reaper
    hands the job out again, the next worker runs it."""
    q = f"{prefix}.handoff"
    await engine.enqueue_batch([new_envelope(q, "demo.noop")])  # the queue exists before the worker
    first = spawn("--queues", q, "--lease-ms", "1000")
    await eventually(lambda: engine._client.hlen(QueueKeys(q).waiters), lambda n: n == 1, 60)
    first.signal(signal.SIGSTOP)  # registered for hand-offs, and now unable to run anything
    env = new_envelope(q, "demo.noop")
    await engine.enqueue_batch([env])
    handed = await engine.reads.get_job(q, env.id)
    assert handed is not None
    assert (handed.state, handed.attempt) == ("running", 1)  # claimed for the frozen worker by the enqueue
    first.signal(signal.SIGKILL)
    await first.exited(60)
    # a long lease for the job's second run: a stall of the loaded machine must not make it a third
    second = spawn("--queues", q, "--lease-ms", "30000", "--burst")
    assert await second.exited(120) == 0, second.log.read_text() if second.log else ""
    got = await engine.reads.get_job(q, env.id)
    assert got is not None
    assert (got.state, got.attempt) == ("completed", 2)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--queues", "q", "--app", "no.such.module"], "cannot import 'no.such.module'"),
        (["--queues", "q", "--app", "examples.demo_app:cpu_hash"], "is not a worker.Registry"),
        (["--queues", " , ", "--app", APP], "names no queue"),
        (["--queues", "q", "--app", APP, "--concurrency", "0"], "--concurrency"),
        (["--queues", "q"], "--app"),
    ],
)
def test_bad_options_are_named(args: list[str], needle: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jobq", "worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert needle in out.stdout + out.stderr


def _readyz(port: int) -> int:
    """``GET /readyz``'s status; 0 while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


async def test_a_worker_serves_its_health_routes_once_its_first_claim_round_ended(
    prefix: str, spawn: Spawn, eventually: Eventually
) -> None:
    """The routes come after the first claim round (``worker/main.py``), so with nothing to claim too."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = spawn("--queues", f"{prefix}.idle", "--metrics-port", str(port))
    await eventually(lambda: asyncio.to_thread(_readyz, port), lambda status: status == 200, 90)
    proc.signal(signal.SIGTERM)
    assert await proc.exited(60) == 0
