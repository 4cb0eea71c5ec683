"""The benchmark's no-op handler for jobq workers (the same record() as every peer's task)."""

from __future__ import annotations

import common

from worker.registry import Registry

registry = Registry()


@registry.job("bench.noop")
async def noop(due: float = 0) -> None:
    await common.arecord(due)
