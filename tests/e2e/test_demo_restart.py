"""The README's first command, interrupted and run again: Ctrl-C (SIGINT) stops every process the demo
started (no stray process, no port left bound), and the restarted demo finishes every job the
interrupted one had enqueued — nothing accepted is lost.

The demo runs as a real ``jobq demo`` process on the session's stack (``--stack``). Its topic and queue
names are the demo's own (``jobs.demo``, ``demo.*``); only this test uses them, and it checks only the
job ids its own runs wrote into their ``jobs.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
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
            # PYTHONFAULTHANDLER: a demo that hangs is aborted (SIGABRT) by the test and leaves the
            # traceback of every thread in its output, so the failure names where it hung
            env={**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"},
        )


async def _wait_or_abort(proc: subprocess.Popen[bytes], folder: Path, timeout_s: float) -> int:
    """The demo's exit code; if it has not exited in ``timeout_s``: abort it (see PYTHONFAULTHANDLER),
    kill the children it left (its own session: nothing else stops them) and fail with its output."""
    try:
        return await asyncio.to_thread(proc.wait, timeout_s)
    except subprocess.TimeoutExpired:
        pass
    proc.send_signal(signal.SIGABRT)
    try:
        await asyncio.to_thread(proc.wait, 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        await asyncio.to_thread(proc.wait)
    with contextlib.suppress(OSError, orjson.JSONDecodeError):
        for pid in orjson.loads((folder / "pids.json").read_bytes()).values():
            if _runs_demo_module(pid):
                os.kill(pid, signal.SIGKILL)
    out = (folder.parent / f"{folder.name}.out").read_text(errors="replace")
    raise AssertionError(f"the demo did not exit within {timeout_s:.0f}s; its output:\n{out[-12000:]}")


DEMO_MODULES = ("kafkagate", "jqrelay", "worker", "canary")
"""What the demo's child processes run (``python -m <module>``)."""


def _strays(pids: dict[str, int]) -> list[str]:
    """The demo's processes still running. A pid alone is not proof: on a busy machine (pid_max may be
    32768, and threads take ids from the same space) a freed pid can soon belong to something else, so a
    live pid counts only if it is a process still running one of the demo's modules."""
    return [name for name, pid in pids.items() if alive(pid) and _runs_demo_module(pid)]


def _runs_demo_module(pid: int) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone meanwhile (or no /proc here): trust alive()
        return not Path("/proc/self").exists()
    if f"Tgid:\t{pid}\n" not in status:  # a thread of some other process
        return False
    return any(args[i] == b"-m" and args[i + 1].decode() in DEMO_MODULES for i in range(len(args) - 1))


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


async def _file(path: Path) -> bytes | None:
    return await asyncio.to_thread(_read, path)


def _complete_json(raw: bytes | None) -> bool:
    """The demo writes jobs.json in place: it can be seen existing but empty or half written."""
    if not raw:
        return False
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return True


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
        raw_jobs = await eventually(lambda: _file(first_dir / "jobs.json"), _complete_json, 180)
        first.send_signal(signal.SIGINT)  # Ctrl-C while the delayed and exclusive jobs are still pending
        code = await _wait_or_abort(first, first_dir, 120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    out = (tmp_path / "first.out").read_text()
    assert code == 0, out
    assert "had to kill" not in out, out
    pids: dict[str, int] = orjson.loads((first_dir / "pids.json").read_bytes())
    assert len(pids) == 6, pids  # 2 gateways, 2 relays, the worker, the canary
    assert not _strays(pids), f"stray processes: {_strays(pids)} of {pids}"
    jobs: list[list[str]] = orjson.loads(raw_jobs)

    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    try:
        interrupted = await _states(client, jobs)
        unfinished = [i for _, i, expected in jobs if interrupted[i] != expected]
        assert unfinished, "the interruption came too late to prove anything: every job had finished"

        second = _demo(name, second_dir, "--once", "--timeout", "240")
        try:
            code = await _wait_or_abort(second, second_dir, 300)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        assert code == 0, (tmp_path / "second.out").read_text()
        expected = {i: e for _, i, e in jobs}
        final = await eventually(lambda: _states(client, jobs), lambda s: s == expected, 60)
        assert final == expected
    finally:
        await client.aclose()
    pids = orjson.loads((second_dir / "pids.json").read_bytes())
    assert not _strays(pids), f"stray processes: {_strays(pids)} of {pids}"
