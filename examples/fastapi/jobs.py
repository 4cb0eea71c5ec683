"""The example's handlers, served by ``jobq worker --app examples.fastapi.jobs:registry --queues QUEUE``.

The queue is ``JOBQ_EXAMPLE_QUEUE`` (default ``default``), read when this module is imported, so the app
(which enqueues) and the worker (which runs) agree on it.
"""

from __future__ import annotations

import os

from jobq import Registry

__all__ = ["QUEUE", "count_words", "registry", "total"]

QUEUE = os.environ.get("JOBQ_EXAMPLE_QUEUE", "default")
registry = Registry()


@registry.job("example.count_words", queue=QUEUE, max_attempts=3)
async def count_words(text: str) -> int:
    """One text's word count (the enqueue endpoint's job, and each item of the report graph)."""
    return len(text.split())


@registry.job("example.total", queue=QUEUE)
async def total(counts: list[int]) -> dict[str, int]:
    """The report graph's callback: fed every item's count, in item order."""
    return {"texts": len(counts), "words": sum(counts)}
