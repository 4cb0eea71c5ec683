"""A claimed job in a pool (:mod:`worker.pool`, :mod:`worker.batch`): its task and where it stands."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from jqengine import ClaimedJob

__all__ = ["Running"]


@dataclass(eq=False, slots=True)
class Running:
    job: ClaimedJob
    task: asyncio.Task[None] | None = None
    started: bool = False
    abandoned: bool = False
    batched: bool = False
    """A batch handler's job (:mod:`worker.batch`): ``task`` is its batch's, shared."""
    writing: bool = False
    """The outcome is being written: an extend racing it sees ``stale`` and must not abandon the job."""
    started_at: float = field(default_factory=time.monotonic)
