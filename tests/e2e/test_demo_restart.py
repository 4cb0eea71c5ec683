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
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from jqengine import reads
from jqstack.manager import Endpoints
from jqstack.supervise import Child, Children, alive, stop_pids
from jqstack.testing.backends import NativeTestStack, SessionStack

pytestmark = pytest.mark.faults

Eventually = Callable[..., Awaitable[Any]]


def _demo(demos: Children, stack_name: str, workdir: Path, *args: str) -> Child:
    argv = [sys.executable, "-m", "jobq", "demo", "--stack", stack_name, "--workdir", str(workdir), *args]
    # PYTHONFAULTHANDLER: a demo that hangs is aborted (SIGABRT) by the test and leaves the traceback of
    # every thread in its output, so the failure names where it hung
    # the demo's history tables: the test's own (both runs share them, as both demos share the topic)
    history = str(workdir.parent / "history")
    env = {**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1", "JOBQ_HISTORY_PATH": history}
    return demos.start(workdir.name, argv, output=workdir.parent / f"{workdir.name}.out", env=env)


async def _wait_or_abort(demo: Child, folder: Path, timeout_s: float) -> int:
    """The demo's exit code; if it has not exited in ``timeout_s``: abort it (see PYTHONFAULTHANDLER),
    stop the children it left (their own sessions: nothing else stops them) and fail with its output."""
    with contextlib.suppress(TimeoutError):
        return await demo.exited(timeout_s)
    demo.signal(signal.SIGABRT)
    with contextlib.suppress(TimeoutError):
        await demo.exited(30)
    with contextlib.suppress(OSError, orjson.JSONDecodeError):
        pids = orjson.loads((folder / "pids.json").read_bytes()).values()
        await asyncio.to_thread(stop_pids, [pid for pid in pids if _runs_demo_module(pid)], grace_s=5)
    out = (folder.parent / f"{folder.name}.out").read_text(errors="replace")
    raise AssertionError(f"the demo did not exit within {timeout_s:.0f}s; its output:\n{out[-12000:]}")


DEMO_MODULES = (
    ("kafkagate",),
    ("jqrelay",),
    ("jqsched",),
    ("jobq", "worker"),
    ("jqdispatch",),
    ("examples.dispatch_hook",),
    ("jobq", "history"),
    ("canary",),
    ("jqweb",),
)
"""What the demo's child processes run: ``python -m <module>``, the worker ``python -m jobq worker``, the
history ``python -m jobq history run``, the dashboard ``python -m jqweb`` (left out before: an aborted demo
in CI left its dashboard running), the dispatcher and its example downstream."""


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
    words = [a.decode(errors="replace") for a in args]
    after_m = [tuple(words[i + 1 :]) for i, word in enumerate(words) if word == "-m"]
    return any(rest[: len(module)] == module for rest in after_m for module in DEMO_MODULES)


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

    with Children(grace_s=30.0) as demos:
        first = _demo(demos, name, first_dir)
        raw_jobs = await eventually(lambda: _file(first_dir / "jobs.json"), _complete_json, 180)
        first.signal(signal.SIGINT)  # Ctrl-C while the delayed and exclusive jobs are still pending
        code = await _wait_or_abort(first, first_dir, 120)
    out = (tmp_path / "first.out").read_text()
    assert code == 0, out
    assert "had to kill" not in out, out
    pids: dict[str, int] = orjson.loads((first_dir / "pids.json").read_bytes())
    # 2 gateways, 2 relays, 2 schedulers, history, worker, canary, dashboard, dispatcher and its downstream
    assert len(pids) == 12, pids
    assert not _strays(pids), f"stray processes: {_strays(pids)} of {pids}"
    jobs: list[list[str]] = orjson.loads(raw_jobs)

    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    try:
        interrupted = await _states(client, jobs)
        unfinished = [i for _, i, expected in jobs if interrupted[i] != expected]
        assert unfinished, "the interruption came too late to prove anything: every job had finished"

        with Children(grace_s=30.0) as demos:
            second = _demo(demos, name, second_dir, "--once", "--timeout", "240")
            code = await _wait_or_abort(second, second_dir, 300)
        assert code == 0, (tmp_path / "second.out").read_text()
        expected = {i: e for _, i, e in jobs}
        final = await eventually(lambda: _states(client, jobs), lambda s: s == expected, 60)
        assert final == expected
    finally:
        await client.aclose()
    pids = orjson.loads((second_dir / "pids.json").read_bytes())
    assert not _strays(pids), f"stray processes: {_strays(pids)} of {pids}"
