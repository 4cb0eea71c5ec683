"""Handler slots (worker/slots.py): at most the limit taken, handed to waiters in the order they asked,
a waiter that gives up takes nothing, a slot handed to a waiter being cancelled is passed on."""

from __future__ import annotations

import asyncio

from worker.slots import HandlerSlots


def asking(slots: HandlerSlots) -> tuple[asyncio.Task[bool], asyncio.Event]:
    """A task taking a slot, and an event set the moment it asks (``take`` queues it in the same step)."""
    asked = asyncio.Event()

    async def take() -> bool:
        asked.set()
        return await slots.take(30)

    return asyncio.create_task(take()), asked


async def test_slots_go_to_waiters_first_come_first_served() -> None:
    slots = HandlerSlots(lambda: 1)
    assert slots.try_take()
    order: asyncio.Queue[str] = asyncio.Queue()

    async def wait(name: str, asked: asyncio.Event) -> None:
        asked.set()
        assert await slots.take(30)
        order.put_nowait(name)

    events = {n: asyncio.Event() for n in "abc"}
    waiters = [asyncio.create_task(wait(n, e)) for n, e in events.items()]
    await events["c"].wait()  # all three asked, in order
    assert not slots.try_take(), "taken, and others wait first"
    got = []
    for _ in "abc":
        slots.give()
        got.append(await asyncio.wait_for(order.get(), 5))
    await asyncio.gather(*waiters)
    assert got == ["a", "b", "c"]
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
    first, _ = asking(slots)
    second, asked = asking(slots)
    await asked.wait()
    slots.give()  # handed to the first ...
    first.cancel()  # ... which is cancelled before it resumes
    assert await second is True
    assert first.cancelled()
    assert slots.taken == 1


async def test_a_raised_limit_hands_the_new_slots_at_once() -> None:
    limit = 1
    slots = HandlerSlots(lambda: limit)
    assert slots.try_take()
    waiter, asked = asking(slots)
    await asked.wait()
    limit = 2
    slots.poke()
    assert await waiter is True
    assert slots.taken == 2
