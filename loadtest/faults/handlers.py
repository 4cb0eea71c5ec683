"""The fault suite's handlers (``jobq worker --app loadtest.faults.handlers:registry``).

``fault.record`` is the load: it appends one JSON line per execution — job id, attempt, worker process,
run number, ``CLOCK_MONOTONIC`` time (system-wide, and left alone by the clock-skew scenario), the lease its
pool claims with, the job's accept time and meta — to ``$JOBQ_FAULT_DIR/exec-<pid>.jsonl``, and one more
line (its run number and end time) when its work is done: a run without an end line was cut short. That
file is outside everything under test (no Redis, no Kafka): a plain ``O_APPEND`` write of one short line
survives the process being killed right after it.
The poison kinds misbehave the ways real handlers do (the ``poison`` scenario).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time

import orjson

from jobq import Cancel
from worker.registry import JobContext, Registry, current_job

__all__ = ["FAULT_DIR_ENV", "process_exit", "registry"]

FAULT_DIR_ENV = "JOBQ_FAULT_DIR"
registry = Registry()
_fd: int | None = None
_runs = itertools.count(1)


def _write(line: dict[str, object]) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(os.environ[FAULT_DIR_ENV], f"exec-{os.getpid()}.jsonl")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(_fd, orjson.dumps(line) + b"\n")


def _record(job: JobContext) -> int:
    """The run's start line; its number (the end line names it)."""
    run = next(_runs)
    # the system-wide monotonic clock: a worker whose wall clock is skewed on purpose must not date its work
    _write(
        {
            "id": job.id,
            "attempt": job.attempt,
            "worker": str(os.getpid()),
            "run": run,
            "mono": time.monotonic(),
            "lease_ms": int(os.environ.get("JOBQ_WORKER_LEASE_MS", "0")),
            "enq": job.enqueued_at,
            "meta": dict(job.meta),
        }
    )
    return run


WORK_S = 0.05
"""What ``fault.record`` does after its side effect (so a killed worker always had jobs in hand — some
recorded and not yet acknowledged: the at-least-once duplicates the checker counts)."""


@registry.job("fault.record")
async def record(work_s: float = WORK_S) -> None:
    """The side effect the checker counts, then a little work (``work_s``: a graph's slow parent keeps
    its fan-in open)."""
    run = _record(current_job())
    await asyncio.sleep(work_s)
    _write({"run": run, "end": time.monotonic()})


@registry.job("fault.abandon")
async def abandon() -> None:
    """A graph node that gives up for good: its run recorded (start and end), then ``Cancel`` — the node
    does not complete, so the nodes requiring it are skipped and must never run. (Not a failure with one
    attempt: a claim a fault took away spends an attempt, and the node would end dead without a run.)"""
    job = current_job()
    _write({"run": _record(job), "end": time.monotonic()})
    raise Cancel("a graph node that gives up: its dependents are skipped")


@registry.job("fault.raise", max_attempts=2)
async def raises() -> None:
    """A poison job: raises every time (ends dead after its attempts)."""
    raise RuntimeError("a poison job: it always raises")


@registry.job("fault.overrun", timeout=1, max_attempts=2)
async def overrun() -> None:
    """Runs past its timeout every time (the pool cancels it and fails the attempt; ends dead)."""
    await asyncio.sleep(60)


@registry.job("fault.big", max_attempts=2)
async def big() -> str:
    """Returns 100 MB, far beyond a result's 64 KiB: the job completes, its result is not kept."""
    return "x" * 100_000_000


def process_exit() -> None:
    """Kills the pool process it runs in (``os._exit``), the way a crashing C extension would."""
    os._exit(17)


registry.job("fault.exit", mode="process", max_attempts=2)(process_exit)
