"""The test session's stack: the native servers (default) or containers where a Docker engine answers."""

from __future__ import annotations

import os
from typing import Any, Protocol

from jqstack.errors import StackError
from jqstack.manager import Endpoints, Stack, StackSpec
from jqstack.procs import free_port
from jqstack.servers import kafka_ready
from jqstack.supervise import alive, wait_until
from jqstack.testing import containers

__all__ = ["ContainerTestStack", "NativeTestStack", "SessionStack", "start_test_stack"]


class SessionStack(Protocol):
    @property
    def endpoints(self) -> Endpoints: ...

    def check(self) -> None: ...

    def stop(self) -> None: ...


class NativeTestStack:
    """Real binaries on free loopback ports, under ``JOBQ_HOME/stacks/pytest-<pid>``."""

    def __init__(self, reuse: bool = False) -> None:
        name = "pytest-reused" if reuse else f"pytest-{os.getpid()}"
        self.reuse = reuse
        self.stack = Stack(StackSpec(name=name, redis_mode="both", fixed_ports=False))
        if not reuse:
            self.stack.down(purge=True)
            self.stack = Stack(self.stack.spec)
        try:
            self.stack.up()
        except BaseException:
            if not reuse:  # a half-started stack must not outlive the failed session
                self.stack.down(purge=True)
            raise

    @property
    def endpoints(self) -> Endpoints:
        return self.stack.endpoints

    def check(self) -> None:
        self.stack.check()

    def stop(self) -> None:
        if self.reuse:
            return
        pids = [s.pid for s in self.stack.servers]
        self.stack.down(purge=True)
        left = [p for p in pids if alive(p)]
        if left:
            raise StackError(f"`down` left processes behind: {left}")


class ContainerTestStack:
    """The same servers from official images (no Redis Cluster: its tests skip on this path)."""

    def __init__(self) -> None:
        ports = {"kafka": free_port(), "consul": free_port(), "redis": free_port()}
        self._containers: list[Any] = []
        for defn in containers.definitions(ports["kafka"], ports["consul"], ports["redis"]):
            self._containers.append(containers.build(defn).start())
        self._endpoints = Endpoints(
            f"127.0.0.1:{ports['kafka']}",
            f"127.0.0.1:{ports['consul']}",
            f"redis://127.0.0.1:{ports['redis']}/0",
        )
        wait_until(
            lambda: kafka_ready(self._endpoints.kafka_bootstrap, 1), what="kafka container", timeout_s=120
        )

    @property
    def endpoints(self) -> Endpoints:
        return self._endpoints

    def check(self) -> None:
        for c in self._containers:
            c.get_wrapped_container().reload()
            if c.get_wrapped_container().status != "running":
                raise StackError(f"container {c.image} is {c.get_wrapped_container().status}")

    def stop(self) -> None:
        for c in self._containers:
            c.stop()


def start_test_stack(backend: str = "auto") -> SessionStack:
    """``native`` | ``containers`` | ``auto`` (containers only where a Docker engine answers) | ``reuse``.

    ``reuse`` is for development loops: a native stack named ``pytest-reused`` that is started when
    needed and left running after the session, so the next run starts in no time.
    """
    if backend == "reuse":
        return NativeTestStack(reuse=True)
    if backend not in ("native", "containers", "auto"):
        raise StackError(f"JOBQ_TEST_BACKEND must be native, containers, auto or reuse, not {backend!r}")
    use_containers = backend == "containers" or (backend == "auto" and containers.docker_available())
    return ContainerTestStack() if use_containers else NativeTestStack()
