"""The servers a fault scenario kills: private stacks on free loopback ports, one per shape, purged after.

The ``disk`` shape keeps Redis's and Kafka's data on small tmpfs mounts of their own (mounting needs root,
as CI has here), so a scenario can fill a server's disk without touching the machine's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from jqstack.errors import StackError
from jqstack.manager import Stack, StackSpec
from loadtest.faults.run import Servers

__all__ = ["DISK_MB", "SPECS", "can_mount", "private_stack"]

SPECS: dict[Servers, StackSpec] = {
    "own": StackSpec(name="faults-own", redis_mode="single", fixed_ports=False, fault_listener=True),
    "kafka3": StackSpec(name="faults-kafka3", brokers=3, redis_mode="single", fixed_ports=False),
    "cluster": StackSpec(name="faults-cluster", redis_mode="cluster", redis_replicas=1, fixed_ports=False),
    "disk": StackSpec(name="faults-disk", redis_mode="single", fixed_ports=False),
}
DISK_MB = {"redis": 256, "kafka-1": 1024}
"""tmpfs size per server of the ``disk`` shape."""


def can_mount() -> bool:
    """Whether this process may mount the ``disk`` shape's tmpfs (root)."""
    return os.geteuid() == 0


@contextmanager
def private_stack(servers: Servers) -> Iterator[Stack]:
    """A fresh stack of the shape ``servers`` names (not ``shared``), down and purged on exit."""
    spec = SPECS[servers]
    stack = Stack(replace(spec, name=f"{spec.name}-{os.getpid()}"))
    mounted: list[str] = []
    try:
        if servers == "disk":
            for name, mb in DISK_MB.items():
                folder = stack.server(name).data_dir
                folder.mkdir(parents=True, exist_ok=True)
                _run(["mount", "-t", "tmpfs", "-o", f"size={mb}m", "tmpfs", str(folder)])
                mounted.append(str(folder))
        stack.up(timeout_s=300)  # three KRaft brokers once took 184 s to form their quorum in CI (cause open)
        yield stack
    finally:
        stack.down()
        for mount in mounted:
            with contextlib.suppress(StackError):
                _run(["umount", "-l", mount])
        stack.down(purge=True)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
