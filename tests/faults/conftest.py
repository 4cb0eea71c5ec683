"""The fault suite's private stacks: one per shape, started when a test first needs it, shared by every
module of ``tests/faults`` (the scenarios, the 3-broker topic check) and purged once the package is done,
so CI starts the three Kafka JVMs of ``kafka3`` once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from jqstack.manager import Stack
from loadtest.faults.run import Servers
from loadtest.faults.stacks import private_stack


@pytest.fixture(scope="package")
def private_stacks() -> Iterator[Callable[[Servers], Stack]]:
    """``private_stacks(shape)``: that shape's private stack (started on first use)."""
    opened: dict[Servers, Stack] = {}
    with ExitStack() as closing:

        def get(servers: Servers) -> Stack:
            if servers not in opened:
                opened[servers] = closing.enter_context(private_stack(servers))
            return opened[servers]

        yield get
