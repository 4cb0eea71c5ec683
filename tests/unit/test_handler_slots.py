"""Handler slots (worker/slots.py): at most the limit taken, handed to waiters in the order they asked,
a waiter that gives up takes nothing, a slot handed to a waiter being cancelled is passed on."""

from __future__ import annotations

import asyncio

from worker.slots import HandlerSlots


async def test_slots_go_to_waiters_first_come_first_served() -> None:
    slots = HandlerSlots(lambda: 1)
    assert slots.try_take()
    order: list[str] = []

    async def wait(name: str) -> None:
        assert await slots.take(30)
        order.append(name)

    waiters = [asyncio.create_task(wait(n)) for n in "abc"]
    await asyncio.sleep(0)
    assert not slots.try_take(), "taken, and others wait first"
    for _ in "abc":
        slots.give()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert order == ["a", "b", "c"]
    assert slots.taken == 1


async def test_a_waiter_gives_up_after_its_timeout_taking_nothing() -> None:
    slots = HandlerSlots(lambda: 1)
    assert slots.try_take()
    assert not await slots.take(0.01)
    slots.give()
    assert slots.taken == 0
    assert slots.try_take(), "the timed-out waiter left no claim on the slot"


async def test_a_slot_handed_to_a_cancelled_waiter_is_passed_on() -> None:
    slots = HandlerSlots(lambda: 1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take(30))
    second = asyncio.create_task(slots.take(30))
    await asyncio.sleep(0)
    slots.give()  # handed to the first ...
    first.cancel()  # ... which is cancelled before it resumes
    assert await second is True
    assert first.cancelled()
    assert slots.taken == 1


async def test_a_raised_limit_hands_the_new_slots_at_once() -> None:
    limit = 1
    slots = HandlerSlots(lambda: limit)
    assert slots.try_take()
    waiter = asyncio.create_task(slots.take(30))
    await asyncio.sleep(0)
    limit = 2
    slots.poke()
    assert await waiter is True
    assert slots.taken == 2
