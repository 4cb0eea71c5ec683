"""``./run bench trickle``: what a worker and its Redis pay a job when jobs arrive one at a time — the shape
most queues of a web application have most of the day — beside the worker floor, in a minute.

On a throw-away Redis of its own, each repetition runs each system in turn (the order reversing every other
repetition): one worker process (``jobq worker --concurrency 50``, the floor worker with 50 slots:
:mod:`loadtest.floors.worker`) serves a fresh queue of the benchmark's no-op job (one ``INCR`` that counts
it, :mod:`loadtest.floors.jobq_app`); jobs are written one per call, as a relay writes a batch of one
(jobq: the engine's ``enqueue_batch``; the floor: :func:`loadtest.floors.lease.write`; by a process of
the system's tree, :data:`FEED`), on a schedule of :data:`RATE` a second — :data:`WARM` unmeasured first,
then for :data:`SECONDS` — and the clock stops once every job has counted itself. Per job: the worker
process's CPU (``/proc``), the Redis server's CPU (``INFO cpu``: the writes' share included), its commands
(``INFO commandstats``: a script's own commands counted, the benchmark's looks left out) and its script
calls. jobq hands a job to a waiting worker at the
enqueue (a hand-off); the floor's idle worker polls every 5 ms.

``baseline``: another checkout's root, its ``jobq`` run beside this one's in every repetition (as
``./run bench startup``'s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import redis

from jqstack.supervise import Child, Children
from loadtest.cpu import cpu_s, redis_cpu_s
from loadtest.floors.lease import count_key
from loadtest.report import Report, ratio_table
from loadtest.stacks import redis_rounds
from loadtest.startup_bench import HERE, compile_tree, worker_command

__all__ = ["MEASURES", "RATE", "SECONDS", "run"]

RATE = 500.0
"""Jobs a second, each written alone."""
SECONDS = 6.0
WARM = 200
"""Jobs before the clock (the worker's first rounds, its caches, Redis's script cache)."""
SLOTS = 50
SCRIPTS = ("fcall", "fcall_ro", "evalsha", "eval")
MEASURES = ("worker CPU, µs/job", "Redis CPU, µs/job", "Redis commands/job", "script calls/job")


FEED = """
import asyncio, sys, time
from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope, record_key

url, system, queue = sys.argv[1:4]
n, rate, first = int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])

async def feed():
    if system == "floor":
        import redis
        from loadtest.floors.lease import write
        client = redis.Redis.from_url(url)
    else:
        import redis.asyncio as aioredis
        from jqengine import Engine
        engine = Engine(aioredis.Redis.from_url(url))
    started = time.monotonic()
    for i in range(n):
        env = new_envelope(queue, "floor.noop", None, id=f"t{first + i}", at_ms=now_ms())
        if system == "floor":
            pipe = client.pipeline(transaction=False)
            write(pipe, queue, [(record_key(env), encode(env))], now_ms())
            pipe.execute()
        else:
            await engine.enqueue_batch([env])
        await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))

asyncio.run(feed())
"""
"""The writer of a run's jobs, a process of the system's own tree (a baseline's jobs are written by its own
engine): ``url system queue n rate first``."""


def _feed(url: str, system: str, queue: str, n: int, first: int, root: Path) -> None:
    """Write ``n`` jobs to ``queue``, one per call, :data:`RATE` a second."""
    argv = [sys.executable, "-c", FEED, url, system, queue, str(n), str(RATE), str(first)]
    subprocess.run(argv, check=True, env={**os.environ, "PYTHONPATH": str(root)}, cwd=root, timeout=120)


def _wait_counted(client: redis.Redis, queue: str, n: int, child: Child) -> int:
    """Until ``n`` jobs of ``queue`` have counted themselves; returns the looks it took (GETs)."""
    deadline, looks = time.monotonic() + 60, 0
    while (done := int(client.get(count_key(queue)) or 0)) < n:
        looks += 1
        if child.returncode is not None:
            raise RuntimeError(f"{child.name} exited with {child.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{queue}: {done} of {n} jobs ran in 60 s")
        time.sleep(0.01)
    return looks + 1


def _commands(client: redis.Redis) -> Counter[str]:
    """Redis's commands so far by name (a script's own commands counted too), ``INFO`` left out."""
    stats = client.info("commandstats")
    return Counter(
        {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}
    )


def trickle(
    url: str, system: str, queue: str, baseline: Path | None, seconds: float
) -> tuple[dict[str, float], dict[str, float]]:
    """One system's worker at a trickle: its figures per job (see the module), and its Redis commands per
    job by name."""
    client = redis.Redis.from_url(url)
    argv, env, cwd = worker_command(url, system, queue, baseline, slots=SLOTS, burst=False)
    n = int(RATE * seconds)
    with Children(grace_s=30.0) as procs:
        child = procs.start(f"{system}-worker", argv, env=env, cwd=cwd)
        _feed(url, system, queue, WARM, 0, cwd)
        _wait_counted(client, queue, WARM, child)
        cpu0, redis0, calls0 = cpu_s(child.pid), redis_cpu_s(client), _commands(client)
        _feed(url, system, queue, n, WARM, cwd)
        looks = _wait_counted(client, queue, WARM + n, child)
        cpu1, redis1, calls1 = cpu_s(child.pid), redis_cpu_s(client), _commands(client)
    client.close()
    calls = calls1 - calls0
    calls["get"] -= looks
    per_job = {name: c / n for name, c in calls.most_common() if c > 0}
    figures = {
        "worker CPU, µs/job": (cpu1 - cpu0) * 1e6 / n,
        "Redis CPU, µs/job": (redis1 - redis0) * 1e6 / n,
        "Redis commands/job": sum(per_job.values()),
        "script calls/job": sum(per_job.get(k, 0.0) for k in SCRIPTS),
    }
    return figures, per_job


def _by_command(commands: dict[str, dict[str, float]]) -> str:
    """Each system's Redis commands per job by name, in the last repetition (those ≥ 0.01 a job)."""
    lines = ["## Redis commands per job, by name (the last repetition; a script's own commands counted)", ""]
    for system, per_job in commands.items():
        shown = ", ".join(f"{name} {v:.2f}" for name, v in per_job.items() if v >= 0.01)
        lines.append(f"- **{system}**: {shown}")
    return "\n".join(lines)


def run(quick: bool = False, baseline: Path | None = None) -> Report:
    """``quick``: 1 repetition of 1 s (a smoke run), else 3 of :data:`SECONDS`; ``baseline``: another
    checkout's root, run beside this one."""
    reps, seconds = (1, 1.0) if quick else (3, SECONDS)
    systems = ("jobq", "floor", "baseline") if baseline is not None else ("jobq", "floor")
    report = Report("trickle", {"reps": reps, "rate": RATE, "seconds": seconds, "slots": SLOTS})
    for root in (HERE, baseline) if baseline is not None else (HERE,):
        compile_tree(root)
    load = [os.getloadavg()[0]]

    commands: dict[str, dict[str, float]] = {}

    def one(url: str, rep: int) -> dict[str, float]:
        out: dict[str, float] = {}
        for system in systems if rep % 2 == 0 else systems[::-1]:
            got, commands[system] = trickle(
                url, system, f"trickle{os.getpid()}r{rep}{system}", baseline, seconds
            )
            out |= {f"{measure}: {system}": value for measure, value in got.items()}
        return out

    samples = redis_rounds("trickle", reps, one)
    load.append(os.getloadavg()[0])
    for name, values in samples.items():
        measure = name.split(":")[0]
        report.add(name, measure.split(", ")[1] if ", " in measure else "per job", values)
    report.notes += [
        f"{reps} repetitions of {seconds:g} s after {WARM} unmeasured jobs, the systems' order reversing; "
        f"{SLOTS} slots; load average (1 min) {load[0]:.1f} → {load[1]:.1f}",
        f"python {sys.version.split()[0]}; baseline: {baseline or '(none)'}",
    ]
    title = f"## At a trickle ({RATE:g} jobs/s, each written alone; medians per job)"
    report.summary = ratio_table(title, samples, MEASURES, systems, 2)
    report.sections += [report.summary, _by_command(commands)]
    return report
