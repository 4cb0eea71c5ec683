"""The fault suite's private stacks: one per shape, started when a test first needs it and shared by every
module of ``tests/faults`` (the scenarios, the 3-broker topic check). Asking for another shape stops the
others (their servers idle otherwise, on two cores, while the next shape's scenarios run): the scenarios
run shape after shape (``loadtest.faults.scenarios.SCENARIOS``), so CI starts each shape once — the three
Kafka JVMs of ``kafka3`` too, which the topic check after the scenarios reuses. Whatever is still open is
purged once the package is done."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from jqstack.manager import Stack
from loadtest.faults.run import Servers
from loadtest.faults.stacks import private_stack


@pytest.fixture(scope="package")
def private_stacks() -> Iterator[Callable[[Servers], Stack]]:
    """``private_stacks(shape)``: that shape's private stack (started on first use; the other shapes'
    stacks are stopped and purged then)."""
    opened: dict[Servers, tuple[ExitStack, Stack]] = {}
    try:

        def get(servers: Servers) -> Stack:
            if servers not in opened:
                for shape in list(opened):
                    opened.pop(shape)[0].close()
                closing = ExitStack()
                opened[servers] = closing, closing.enter_context(private_stack(servers))
            return opened[servers][1]

        yield get
    finally:
        for closing, _ in opened.values():
            closing.close()
