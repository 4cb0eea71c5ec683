"""Example handlers: the demo's workload, and module-level functions the process pool can pickle."""

from __future__ import annotations

import asyncio
import hashlib

from jqcore.errors import Cancel, Retry
from worker.registry import Registry, current_job

__all__ = ["cpu_hash", "registry"]

registry = Registry()


@registry.job("demo.noop")
async def noop() -> None:
    """Does nothing (benchmarks measure the queue, not the work)."""


@registry.job("demo.sleep", timeout=60)
async def sleep(seconds: float = 0.1) -> float:
    await asyncio.sleep(seconds)
    return seconds


@registry.job("demo.flaky", max_attempts=3)
async def flaky(fail_times: int = 1) -> str:
    """Fails its first ``fail_times`` attempts, then succeeds."""
    attempt = current_job().attempt
    if attempt <= fail_times:
        raise Retry(0.05, f"failing on purpose (attempt {attempt})")
    return f"ok on attempt {attempt}"


@registry.job("demo.always_fails", max_attempts=2)
async def always_fails() -> None:
    raise RuntimeError("this job always fails; it ends in the dead-letter list")


@registry.job("demo.refuse")
async def refuse(reason: str = "not wanted") -> None:
    raise Cancel(reason)


def cpu_hash(rounds: int = 10_000) -> str:
    """CPU-bound work (runs in the process pool)."""
    digest = b"jobq"
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


registry.job("demo.cpu_hash", mode="process")(cpu_hash)
