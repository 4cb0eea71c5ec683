"""The servers a benchmark runs on — a throw-away stack of its own, or one it is handed (smoke tests
pass the test session's stack so they need not start another Kafka) — and stopping its processes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from jobq.stack.manager import Endpoints, Stack, StackSpec

__all__ = ["bench_stack", "stop_processes"]


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


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], grace_s: float = 30.0) -> None:
    """SIGTERM every process still running, wait up to ``grace_s`` each, then SIGKILL what lingers."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
