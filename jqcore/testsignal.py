"""Test signals: a service announces a step it finished (a relay batch committed, leases extended, a timers
round, a graph finished, events shipped) so a test can wait on the step instead of polling the state it
leaves behind (River's ``testsignal``).

A :class:`TestSignal` costs one attribute check when no test listens: :meth:`TestSignal.signal` returns at
once until :meth:`TestSignal.enable` was called. Enabled, it keeps every value sent since (bounded) and wakes
whoever waits. Services create their signals in their constructor and never read them back::

    relay.signals.committed.enable()
    ...
    await relay.signals.committed.wait_for(lambda c: c.total >= 300)

Everything runs on the event loop of the service: a signal is sent and awaited on the same loop.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from jqcore.aio import wait_event

__all__ = ["CRASH_EXIT", "KEEP", "TestSignal", "crash_point", "enable_all"]

T = TypeVar("T")

KEEP = 10_000
"""Values an enabled signal keeps (the oldest go first): enough for any test, bounded for a long one."""


class TestSignal(Generic[T]):
    """One kind of step a service reports; a no-op until a test enables it."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, name: str) -> None:
        self.name = name
        self._values: collections.deque[T] | None = None
        self._changed: asyncio.Event | None = None
        self._sent = 0

    @property
    def enabled(self) -> bool:
        return self._values is not None

    def enable(self) -> None:
        """Start recording (idempotent; values sent before are not recorded)."""
        if self._values is None:
            self._values = collections.deque(maxlen=KEEP)

    def signal(self, value: T) -> None:
        """Report a step (a no-op unless enabled)."""
        if self._values is None:
            return
        self._values.append(value)
        self._sent += 1
        if self._changed is not None:
            self._changed.set()

    @property
    def values(self) -> list[T]:
        """Every value recorded since :meth:`enable` (oldest first)."""
        return list(self._values or ())

    def mark(self) -> int:
        """How many values were sent so far: pass it as ``after`` to wait only on later ones."""
        return self._sent

    async def wait_for(
        self, ok: Callable[[T], bool] = lambda _: True, timeout_s: float = 60.0, *, after: int = 0
    ) -> T:
        """The first recorded value (already sent or still to come; ``after``: only those sent after that
        :meth:`mark`) for which ``ok`` holds; raises ``AssertionError`` naming the signal and its last
        value after ``timeout_s``."""
        if self._values is None:
            raise RuntimeError(f"test signal {self.name!r} was not enabled before waiting on it")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        seen = after  # values looked at (or skipped) so far, counted since enable()
        while True:
            values = list(self._values)
            for value in values[max(0, seen - (self._sent - len(values))) :]:
                if ok(value):
                    return value
            seen = max(seen, self._sent)
            self._changed = self._changed or asyncio.Event()
            self._changed.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                last = values[-1] if values else None
                raise AssertionError(f"test signal {self.name!r} not reached in {timeout_s}s; last: {last!r}")
            await wait_event(self._changed, remaining)


def enable_all(*groups: Any) -> None:
    """Enable every :class:`TestSignal` of these signal groups (the ``signals`` dataclasses of services)."""
    for group in groups:
        for f in dataclasses.fields(group):
            value = getattr(group, f.name)
            if isinstance(value, TestSignal):
                value.enable()


CRASH_AT = os.environ.get("JOBQ_TEST_CRASH_AT", "")
"""A crash point's name: the process dies there (``os._exit``) the first time it passes it — a test's
``kill -9`` at an exact step. Empty (always, outside tests): :func:`crash_point` costs one comparison."""
CRASH_EXIT = 86


def crash_point(name: str) -> None:
    """Die here, as a ``kill -9`` would (no cleanup, nothing flushed but this line), when
    ``JOBQ_TEST_CRASH_AT`` names this point."""
    if name == CRASH_AT:
        sys.stderr.write(f"crash point {name}: exiting {CRASH_EXIT}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT)
