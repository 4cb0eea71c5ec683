"""The batch drain's handlers (``./run bench drain --batch N``): one no-op batch kind whose batch size the
bench sets through ``JOBQ_BENCH_BATCH`` (the worker processes import this module)."""

from __future__ import annotations

import os

from worker.batch import BatchItem
from worker.registry import Registry

__all__ = ["KIND", "registry"]

KIND = "bench.noop_batch"
registry = Registry()


@registry.job(KIND, batch=int(os.environ.get("JOBQ_BENCH_BATCH", "500")), batch_wait_ms=20)
async def noop_batch(items: list[BatchItem]) -> None:
    """Does nothing: every item completes (the bench measures the queue, not the work)."""
