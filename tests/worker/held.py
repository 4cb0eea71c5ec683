"""A pool whose complete-and-claim rounds wait at Redis's door: what a test needs to act inside a round's
round trip (tests/worker/test_pool.py, test_prefetch.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from jqengine import Engine
from worker.pool import Pool


class HeldRounds:
    """Holds a pool's complete-and-claim rounds at the door to Redis until ``gate`` opens."""

    def __init__(self, engine: Engine) -> None:
        self.real, self.gate, self.arrived = engine.jobs.settle_claim, asyncio.Event(), asyncio.Event()

    async def __call__(self, *args: Any, **kw: Any) -> Any:
        self.arrived.set()
        await self.gate.wait()
        return await self.real(*args, **kw)


def hold_rounds(pool: Pool) -> HeldRounds:
    """Put ``pool``'s rounds behind a :class:`HeldRounds` (before it starts)."""
    held = HeldRounds(pool.engine)
    pool.engine = copy.copy(pool.engine)
    pool.engine.jobs = copy.copy(pool.engine.jobs)  # the pool's part only: the test's engine rounds freely
    pool.engine.jobs.settle_claim = held  # type: ignore[method-assign]
    pool._completions.engine = pool.engine
    return held
