"""The servers a benchmark runs on — a throw-away stack of its own, or one it is handed (smoke tests
pass the test session's stack so they need not start another Kafka). The environment and command line of
the processes a benchmark runs on it come from :mod:`jqstack.pipeline`; :mod:`jqstack.supervise` starts
and stops them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jqstack.manager import Endpoints, Stack, StackSpec
from jqstack.supervise import alive

__all__ = ["bench_stack", "redis_only", "redis_rounds", "up_timed"]


def up_timed(stack: Stack, timeout_s: float = 90.0) -> dict[str, float]:
    """Start ``stack``'s stopped servers one at a time; seconds from spawn to a real answer, per server (and
    ``redis-cluster-forming`` when it has a Redis Cluster)."""
    tools = stack.provision()
    timings: dict[str, float] = {}
    for server in stack.servers:
        if alive(server.pid):
            continue
        started = time.monotonic()
        stack.start_server(server, tools)
        stack.wait_server_ready(server, timeout_s)
        timings[server.name] = time.monotonic() - started
    if stack.of_kind("redis-cluster"):
        started = time.monotonic()
        stack.form_redis_cluster(timeout_s)
        timings["redis-cluster-forming"] = time.monotonic() - started
    return timings


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


@contextmanager
def redis_only(scenario: str) -> Iterator[str]:
    """A throw-away single Redis of its own (no Kafka, no Consul): its URL. Stopped and its data removed
    whatever happens."""
    stack = Stack(StackSpec(name=f"bench-{scenario}-{os.getpid()}", redis_mode="single", fixed_ports=False))
    stack.servers = [s for s in stack.servers if s.kind == "redis"]
    try:
        up_timed(stack)
        yield f"redis://127.0.0.1:{stack.servers[0].port}/0"
    finally:
        stack.down(purge=True)


def redis_rounds(
    scenario: str, reps: int, one_round: Callable[[str, int], dict[str, float]]
) -> dict[str, list[float]]:
    """On a throw-away single Redis of its own (:func:`redis_only`): ``one_round(url, rep)`` ``reps`` times;
    each figure's samples."""
    samples: dict[str, list[float]] = {}
    with redis_only(scenario) as url:
        for rep in range(reps):
            for name, value in one_round(url, rep).items():
                samples.setdefault(name, []).append(value)
    return samples
