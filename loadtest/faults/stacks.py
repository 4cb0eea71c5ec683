"""The servers a fault scenario kills: private stacks on free loopback ports, one per shape, purged after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from jqstack.manager import Stack, StackSpec
from loadtest.faults.run import Servers

__all__ = ["SPECS", "private_stack"]

SPECS: dict[Servers, StackSpec] = {
    "own": StackSpec(name="faults-own", redis_mode="single", fixed_ports=False, fault_listener=True),
    "kafka3": StackSpec(name="faults-kafka3", brokers=3, redis_mode="single", fixed_ports=False),
    "cluster": StackSpec(name="faults-cluster", redis_mode="cluster", redis_replicas=1, fixed_ports=False),
}


@contextmanager
def private_stack(servers: Servers) -> Iterator[Stack]:
    """A fresh stack of the shape ``servers`` names (not ``shared``), down and purged on exit."""
    spec = SPECS[servers]
    stack = Stack(StackSpec(**{**spec.__dict__, "name": f"{spec.name}-{os.getpid()}"}))
    try:
        stack.up(timeout_s=180)
        yield stack
    finally:
        stack.down(purge=True)
