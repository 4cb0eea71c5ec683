"""The README's first command, interrupted and run again: Ctrl-C (SIGINT) stops every process the demo
started (no stray process, no port left bound), and the restarted demo finishes every job the
interrupted one had enqueued — nothing accepted is lost.

The demo runs as a real ``jobq demo`` process on the session's stack (``--stack``). Its topic and queue
names are the demo's own (``jobs.demo``, ``demo.*``); only this test uses them, and it checks only the
job ids its own runs wrote into their ``jobs.json``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from jobq.stack.backends import NativeTestStack, SessionStack
from jobq.stack.manager import Endpoints
from jobq.stack.procs import alive
from jqcore.state import reads

pytestmark = pytest.mark.faults

Eventually = Callable[..., Awaitable[Any]]


def _demo(stack_name: str, workdir: Path, *args: str) -> subprocess.Popen[bytes]:
    with (workdir.parent / f"{workdir.name}.out").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "jobq", "demo", "--stack", stack_name, "--workdir", str(workdir), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


async def _file(path: Path) -> bytes | None:
    return await asyncio.to_thread(_read, path)


async def _states(client: aioredis.Redis, jobs: list[list[str]]) -> dict[str, str]:
    out = {}
    for queue, job_id, _ in jobs:
        info = await reads.get_job(client, queue, job_id)
        out[job_id] = info.state if info else "in kafka"
    return out


async def test_interrupted_demo_leaves_no_process_and_the_restart_finishes_its_jobs(
    stack: SessionStack, endpoints: Endpoints, tmp_path: Path, eventually: Eventually
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("the demo runs on a native stack")
    name = stack.stack.spec.name
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"

    first = _demo(name, first_dir)
    try:
        raw_jobs = await eventually(lambda: _file(first_dir / "jobs.json"), lambda b: b is not None, 120)
        first.send_signal(signal.SIGINT)  # Ctrl-C while the delayed and exclusive jobs are still pending
        code = await asyncio.to_thread(first.wait, 60)
    finally:
        if first.poll() is None:
            first.kill()
    out = (tmp_path / "first.out").read_text()
    assert code == 0, out
    assert "had to kill" not in out, out
    pids: dict[str, int] = orjson.loads((first_dir / "pids.json").read_bytes())
    assert len(pids) == 6, pids  # 2 gateways, 2 relays, the worker, the canary
    assert not [n for n, pid in pids.items() if alive(pid)], f"stray processes: {pids}"
    jobs: list[list[str]] = orjson.loads(raw_jobs)

    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    try:
        interrupted = await _states(client, jobs)
        unfinished = [i for _, i, expected in jobs if interrupted[i] != expected]
        assert unfinished, "the interruption came too late to prove anything: every job had finished"

        second = _demo(name, second_dir, "--once", "--timeout", "240")
        try:
            code = await asyncio.to_thread(second.wait, 300)
        finally:
            if second.poll() is None:
                second.kill()
        assert code == 0, (tmp_path / "second.out").read_text()
        expected = {i: e for _, i, e in jobs}
        final = await eventually(lambda: _states(client, jobs), lambda s: s == expected, 60)
        assert final == expected
    finally:
        await client.aclose()
    pids = orjson.loads((second_dir / "pids.json").read_bytes())
    assert not [n for n, pid in pids.items() if alive(pid)], f"stray processes: {pids}"
