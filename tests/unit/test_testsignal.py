"""The test-signal hook: a no-op until enabled; waits see values sent before and after they start."""

from __future__ import annotations

import asyncio

import pytest

from jqcore.testsignal import KEEP, TestSignal, enable_all


def test_a_signal_nobody_enabled_records_nothing() -> None:
    sig: TestSignal[int] = TestSignal("steps")
    sig.signal(1)
    assert not sig.enabled
    assert sig.values == []


async def test_waiting_on_a_signal_that_is_not_enabled_is_a_mistake() -> None:
    with pytest.raises(RuntimeError, match="not enabled"):
        await TestSignal[int]("steps").wait_for()


async def test_a_wait_returns_a_value_sent_before_it_or_the_first_matching_one_after() -> None:
    sig: TestSignal[int] = TestSignal("steps")
    sig.enable()
    sig.signal(1)
    assert await sig.wait_for(lambda v: v == 1, timeout_s=1) == 1
    waiter = asyncio.ensure_future(sig.wait_for(lambda v: v >= 3, timeout_s=5))
    for v in (2, 3, 4):  # sent once the waiter waits (callbacks run in the order they were scheduled)
        asyncio.get_running_loop().call_soon(sig.signal, v)
    assert await waiter == 3
    assert sig.values == [1, 2, 3, 4]


async def test_a_wait_that_is_never_satisfied_names_the_signal_and_its_last_value() -> None:
    sig: TestSignal[int] = TestSignal("relay batch")
    sig.enable()
    sig.signal(7)
    with pytest.raises(AssertionError, match=r"'relay batch' not reached in 0.05s; last: 7"):
        await sig.wait_for(lambda v: v > 7, timeout_s=0.05)


async def test_old_values_roll_off_without_hiding_new_ones() -> None:
    sig: TestSignal[int] = TestSignal("steps")
    sig.enable()
    for v in range(KEEP + 5):
        sig.signal(v)
    assert len(sig.values) == KEEP
    waiter = asyncio.ensure_future(sig.wait_for(lambda v: v == -1, timeout_s=5))
    asyncio.get_running_loop().call_soon(sig.signal, -1)  # once the waiter waits
    assert await waiter == -1


async def test_a_wait_after_a_mark_sees_only_later_values() -> None:
    sig: TestSignal[int] = TestSignal("rounds")
    sig.enable()
    sig.signal(0)
    mark = sig.mark()
    waiter = asyncio.ensure_future(sig.wait_for(lambda v: v == 0, timeout_s=5, after=mark))
    for v in (1, 0):  # once the waiter waits
        asyncio.get_running_loop().call_soon(sig.signal, v)
    assert await waiter == 0
    assert sig.mark() == mark + 2
    with pytest.raises(AssertionError):
        await sig.wait_for(lambda v: v == 1, timeout_s=0.05, after=mark + 1)


def test_enable_all_enables_every_signal_of_a_group() -> None:
    from worker.lease import LeaseSignals

    group = LeaseSignals()
    enable_all(group)
    assert group.extended.enabled
