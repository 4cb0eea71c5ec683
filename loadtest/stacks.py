"""The servers a benchmark runs on — a throw-away stack of its own, or one it is handed (smoke tests
pass the test session's stack so they need not start another Kafka) — and the command line of its workers.
Its processes are started and stopped by :mod:`jqstack.supervise`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from jqstack.manager import Endpoints, Stack, StackSpec
from jqstack.supervise import python_m

__all__ = ["bench_stack", "worker_argv"]


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


def worker_argv(queues: str, *, app: str, concurrency: int, burst: bool = False) -> list[str]:
    """``jobq worker`` serving ``queues`` with the handlers of ``app`` (``module:attribute``)."""
    argv = python_m("jobq", "worker", "--app", app, "--queues", queues, "--concurrency", str(concurrency))
    return [*argv, "--burst"] if burst else argv
