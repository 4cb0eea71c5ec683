"""``./run bench startup``: what a process pays before it works (issue 58: a worker claims its first job
≤ 0.3 s after spawn, ``jobq --help`` ≤ 0.3 s), in a minute instead of ``floors``' seventeen.

On a throw-away Redis of its own, each repetition runs, in an order that rotates between repetitions (a
drift of the shared machine touches each alike):

* **spawn → first claim**: one no-op job waits in a fresh queue (:mod:`loadtest.floors.jobq_app`'s,
  one ``INCR``); a ``jobq worker --concurrency 16 --burst`` process is spawned and the queue's ready set
  polled every :data:`POLL_S` until the job has left it: the wall seconds since the spawn and the CPU
  seconds the process has run by then (its threads' ``/proc`` schedstat, to the nanosecond:
  :func:`loadtest.cpu.run_s`) — its interpreter, imports, settings, connection and first claim. The same
  for the floor worker (:mod:`loadtest.floors.worker`, the least code that keeps a lease queue's promise)
  on its own queue. And ``jobq`` as deployed (``jobq-port``): the same worker with a metrics port
  (``JOBQ_WORKER_METRICS_PORT``, which every worker the Helm chart runs has for its probes; its health
  server starts after the first claim round).
* **--help**: ``jobq --help`` and the floor worker's ``--help`` to their exit, wall and CPU seconds.

``baseline``: another checkout's root (``git worktree add /tmp/base main``, or ``git archive``), run
beside this one in every repetition (``PYTHONPATH`` and the working folder its root): the same figures
for its ``jobq``, so a change is measured against its base on the same machine at the same moments.
Each checkout is byte-compiled first (an installed jobq's modules are), and every process is spawned
once before the clock (warming the page cache).
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis
import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqengine import Engine
from jqengine.keys import QueueKeys
from jqstack.pipeline import PipelineEnv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Children, python_m
from loadtest.cpu import run_s
from loadtest.floors import jobq_app
from loadtest.floors.lease import keys as floor_keys
from loadtest.floors.lease import write as floor_write
from loadtest.report import Report, ratio_table
from loadtest.stacks import redis_rounds

__all__ = ["POLL_S", "SYSTEMS", "command_cost", "compile_tree", "run", "worker_command"]

HERE = Path(__file__).resolve().parents[1]
"""This checkout's root."""
SLOTS = 16
"""The workers' slots (as ``floors``' worker hop)."""
POLL_S = 0.002
"""How often the queue is looked at while a worker starts."""
SYSTEMS = ("jobq", "jobq-port", "floor")
"""Measured every repetition; ``baseline`` joins them when a baseline checkout is given. ``jobq-port``
has no ``--help`` of its own (the same command)."""


def command_cost(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[float, float]:
    """Run ``argv`` to its end: its wall seconds and its CPU seconds (user + system, from the exit)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=60, env=env, cwd=cwd)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compile_tree(root: Path) -> None:
    """Byte-compile the packages of the checkout at ``root`` (as ``./run bench`` does its own): a process
    then reads its modules' ``.pyc`` files, as an installed jobq does, even under
    ``PYTHONDONTWRITEBYTECODE``."""
    packages = sorted(p.parent.name for p in root.glob("*/__init__.py"))
    subprocess.run(
        python_m("compileall", "-q", "-j", "0", *packages), cwd=root, check=True, capture_output=True
    )


def _tree_env(root: Path) -> dict[str, str]:
    """This process's environment with ``root``'s packages first on the path."""
    return {**os.environ, "PYTHONPATH": str(root)}


async def _enqueue_one(url: str, queue: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await Engine(client).enqueue_batch(
            [new_envelope(queue, jobq_app.KIND, None, id="s0", at_ms=now_ms())]
        )
    finally:
        await client.aclose()


def _one_waiting(url: str, system: str, queue: str) -> Callable[[], bool]:
    """Put one job in ``queue`` for ``system``'s worker; a probe: has it been claimed?"""
    client = redis.Redis.from_url(url)
    if system == "floor":
        pipe = client.pipeline(transaction=False)
        floor_write(pipe, queue, [(b"s0", b"{}")], now_ms())
        pipe.execute()
        pending = floor_keys(queue)[0]
    else:
        asyncio.run(_enqueue_one(url, queue))
        pending = QueueKeys(queue).ready
    assert client.zcard(pending) == 1, f"{system}: the job is not waiting"
    return lambda: int(client.zcard(pending)) == 0


def worker_command(
    url: str, system: str, queue: str, baseline: Path | None, *, slots: int = SLOTS, burst: bool = True
) -> tuple[list[str], dict[str, str], Path]:
    """``system``'s worker on ``queue`` (``jobq``, ``jobq-port``, ``floor`` or ``baseline``): argv,
    environment, working folder."""
    if system == "floor":
        argv = python_m("loadtest.floors.worker", url, queue, "--slots", str(slots))
        return [*argv, "--burst"] if burst else argv, _tree_env(HERE), HERE
    root = baseline if system == "baseline" and baseline is not None else HERE
    env = {**PipelineEnv({"JOBQ_REDIS_URL": url}, log_level="warning").worker(), "PYTHONPATH": str(root)}
    if system == "jobq-port":
        env["JOBQ_WORKER_METRICS_PORT"] = str(free_port())
    argv = worker_argv(queue, app=f"{jobq_app.__name__}:registry", concurrency=slots, burst=burst)
    return argv, env, root


def first_claim(url: str, system: str, queue: str, baseline: Path | None = None) -> tuple[float, float]:
    """Spawn ``system``'s worker with one job waiting in ``queue``: wall and CPU seconds to its claim."""
    claimed = _one_waiting(url, system, queue)
    argv, env, cwd = worker_command(url, system, queue, baseline)
    with Children(grace_s=30.0) as procs:
        spawned = time.perf_counter()
        child = procs.start(f"{system}-worker", argv, env=env, cwd=cwd)
        deadline = spawned + 60
        while not claimed():
            if child.returncode is not None:
                raise RuntimeError(f"{child.name} exited with {child.returncode} before its first claim")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{child.name}: no claim in 60 s")
            time.sleep(POLL_S)
        wall, cpu = time.perf_counter() - spawned, run_s(child.pid)
        child.wait(60)  # burst: it runs the job and exits
    return wall, cpu


def _help(system: str, baseline: Path | None) -> tuple[float, float]:
    if system == "floor":
        return command_cost(python_m("loadtest.floors.worker", "--help"), env=_tree_env(HERE), cwd=HERE)
    root = baseline if system == "baseline" and baseline is not None else HERE
    return command_cost(python_m("jobq", "--help"), env=_tree_env(root), cwd=root)


def _round(
    url: str, tag: str, shift: int, systems: tuple[str, ...], baseline: Path | None
) -> dict[str, float]:
    order = systems[shift % len(systems) :] + systems[: shift % len(systems)]
    out: dict[str, float] = {}
    for system in order:
        wall, cpu = first_claim(url, system, f"startup{os.getpid()}{tag}{system}", baseline)
        out[f"spawn → first claim, wall: {system}"] = wall
        out[f"spawn → first claim, CPU: {system}"] = cpu
    for system in [s for s in order if s != "jobq-port"]:
        wall, cpu = _help(system, baseline)
        out[f"--help, wall: {system}"] = wall
        out[f"--help, CPU: {system}"] = cpu
    return out


def run(quick: bool = False, baseline: Path | None = None) -> Report:
    """``quick``: 1 repetition (a smoke run), else 9; ``baseline``: another checkout's root, run beside
    this one."""
    reps = 1 if quick else 9
    systems = (*SYSTEMS, "baseline") if baseline is not None else SYSTEMS
    report = Report(
        "startup", {"reps": reps, "baseline": str(baseline or ""), "slots": SLOTS, "quick": quick}
    )
    for root in (HERE, baseline) if baseline is not None else (HERE,):
        compile_tree(root)
    load = [os.getloadavg()[0]]

    def one(url: str, rep: int) -> dict[str, float]:
        if rep == 0:  # unmeasured: every process once, its files then in the page cache
            _round(url, "warm", 0, systems, baseline)
        return _round(url, f"r{rep}", rep, systems, baseline)

    samples = redis_rounds("startup", reps, one)
    load.append(os.getloadavg()[0])
    for name, values in samples.items():
        report.add(name, "CPU s" if ", CPU" in name else "s", values)
    report.notes += [
        f"{reps} repetitions, the systems' order rotating; {SLOTS} slots, --burst, one job waiting; the "
        f"queue polled every {POLL_S * 1000:g} ms; load average (1 min) {load[0]:.1f} → {load[1]:.1f}",
        f"python {sys.version.split()[0]}; baseline: {baseline or '(none)'}",
    ]
    report.summary = ratio_table(
        "## Start-up (medians, seconds; the ratio is per repetition, then its median)",
        samples,
        ("spawn → first claim, wall", "spawn → first claim, CPU", "--help, wall", "--help, CPU"),
        systems,
        3,
    )
    report.sections.append(report.summary)
    return report
