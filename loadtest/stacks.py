"""The servers a benchmark runs on — a throw-away stack of its own, or one it is handed (smoke tests
pass the test session's stack so they need not start another Kafka) — and the command line and environment
of its workers. Its processes are started and stopped by :mod:`jqstack.supervise`.

The benchmarks and the demo handlers (``examples/``) are not installed: a process that imports them
(a worker with ``--app loadtest...`` or ``--app examples...``) gets the checkout's root on its
``PYTHONPATH`` (:func:`checkout_env`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jqstack.manager import Endpoints, Stack, StackSpec
from jqstack.supervise import alive, python_m

__all__ = ["REPO_ROOT", "bench_stack", "checkout_env", "up_timed", "worker_argv"]

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout ``loadtest`` runs from: ``loadtest/`` and ``examples/`` are importable from here."""


def checkout_env(**extra: str) -> dict[str, str]:
    """This process's environment, ``extra`` on top, with :data:`REPO_ROOT` first on ``PYTHONPATH``: for a
    child process that imports ``loadtest`` or ``examples`` (neither is installed)."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **extra, "PYTHONPATH": path}


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


def worker_argv(queues: str, *, app: str, concurrency: int, burst: bool = False) -> list[str]:
    """``jobq worker`` serving ``queues`` with the handlers of ``app`` (``module:attribute``)."""
    argv = python_m("jobq", "worker", "--app", app, "--queues", queues, "--concurrency", str(concurrency))
    return [*argv, "--burst"] if burst else argv
