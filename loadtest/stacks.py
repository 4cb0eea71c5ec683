"""The servers a benchmark runs on: a throw-away stack of its own, or one it is handed (smoke tests
pass the test session's stack so they need not start another Kafka)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from jobq.stack.manager import Endpoints, Stack, StackSpec

__all__ = ["bench_stack"]


@contextmanager
def bench_stack(scenario: str, endpoints: Endpoints | None = None) -> Iterator[Endpoints]:
    """``endpoints`` when given; else a fresh Kafka + Consul + Redis on free ports, purged afterwards."""
    if endpoints is not None:
        yield endpoints
        return
    stack = Stack(StackSpec(name=f"bench-{scenario}-{os.getpid()}", redis_mode="single", fixed_ports=False))
    try:
        yield stack.up()
    finally:
        stack.down(purge=True)
