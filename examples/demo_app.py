"""Example handlers: the demo's workload, and module-level functions the process pool can pickle.

Serve them from a checkout: ``PYTHONPATH=. jobq worker --app examples.demo_app:registry --queues default``."""

from __future__ import annotations

import asyncio
import hashlib

from jobq import Registry, current_job
from jqcore.errors import Cancel, Retry

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


@registry.job("demo.graph.add")
async def graph_add(n: int = 0, *fed: int) -> int:
    """A graph node: its own number plus what its parents fed it (a pipeline's previous result)."""
    return n + sum(fed)


@registry.job("demo.graph.sum")
async def graph_sum(*fed: list[int]) -> int:
    """A group's callback: the sum of every result it was fed."""
    return sum(sum(x) if isinstance(x, list) else x for x in fed)


@registry.job("demo.graph.mark", timeout=60)
async def graph_mark(path: str, seconds: float = 0.0, *fed: object) -> str:
    """A graph node with a side effect: appends its node name to ``path`` (tests count how often each ran)."""
    node = current_job().graph
    name = node.node if node is not None else "?"
    await asyncio.to_thread(_append, path, name + "\n")
    await asyncio.sleep(seconds)
    return name


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(line)


def cpu_hash(rounds: int = 10_000) -> str:
    """CPU-bound work (runs in the process pool)."""
    digest = b"jobq"
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


registry.job("demo.cpu_hash", mode="process")(cpu_hash)
