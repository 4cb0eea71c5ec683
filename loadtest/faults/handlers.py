"""The fault suite's handlers (``jobq worker --app loadtest.faults.handlers:registry``).

``fault.record`` is the load: it appends one JSON line per execution — job id, attempt, worker process,
time — to ``$JOBQ_FAULT_DIR/exec-<pid>.jsonl``. That file is outside everything under test (no Redis, no
Kafka): a plain ``O_APPEND`` write of one short line survives the process being killed right after it.
"""

from __future__ import annotations

import asyncio
import os
import time

import orjson

from worker.registry import Registry, current_job

__all__ = ["FAULT_DIR_ENV", "registry"]

FAULT_DIR_ENV = "JOBQ_FAULT_DIR"
registry = Registry()
_fd: int | None = None


def _record(job_id: str, attempt: int) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(os.environ[FAULT_DIR_ENV], f"exec-{os.getpid()}.jsonl")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = {"id": job_id, "attempt": attempt, "worker": str(os.getpid()), "at": time.time()}
    os.write(_fd, orjson.dumps(line) + b"\n")


WORK_S = 0.05
"""What ``fault.record`` does after its side effect (so a killed worker always had jobs in hand — some
recorded and not yet acknowledged: the at-least-once duplicates the checker counts)."""


@registry.job("fault.record")
async def record() -> None:
    """The side effect the checker counts, then a little work."""
    job = current_job()
    _record(job.id, job.attempt)
    await asyncio.sleep(WORK_S)
