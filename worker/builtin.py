"""Handlers every pool runs without registering them: the heartbeat canary's job."""

from __future__ import annotations

from jqcore.clock import now_ms
from jqcore.envelope import CANARY_KIND
from worker.registry import Registry, current_job

__all__ = ["CANARY_KIND", "builtin"]

builtin = Registry()


@builtin.job(CANARY_KIND, timeout=10, max_attempts=1)
async def canary(sent_at: int = 0) -> dict[str, object]:
    """Proves this hop works: the canary monitor reads the result (and the job's timestamps)."""
    return {"executed_at": now_ms(), "attempt": current_job().attempt}
