"""The relay's rate limiters as pure logic: parsing, chunked acquires, pauses that can be given up."""

from __future__ import annotations

import asyncio

import pytest

from jqrelay.limits import Limiter, QueueRateLimits, parse_rate


@pytest.mark.parametrize("text", ["-1", "fast", "nan", "inf"])
def test_invalid_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="finite rate"):
        parse_rate(text)


def test_empty_is_unlimited_and_zero_is_paused() -> None:
    assert parse_rate("") is None
    assert parse_rate("0") == 0
    assert parse_rate("12.5") == 12.5


async def test_unlimited_acquire_passes_at_once_and_a_pause_can_be_given_up() -> None:
    limiter = Limiter()
    assert await limiter.acquire(10_000)
    limiter.set(0)
    assert not await limiter.acquire(1, keep_waiting=lambda: False)


async def test_a_paused_acquire_passes_once_the_rate_changes() -> None:
    limiter = Limiter()
    limiter.set(0)
    waiter = asyncio.create_task(limiter.acquire(3))
    done_before: list[bool] = []

    def resume() -> None:  # runs after the waiter's first step (callbacks run in the order scheduled)
        done_before.append(waiter.done())
        limiter.set(None)

    asyncio.get_running_loop().call_soon(resume)
    assert await asyncio.wait_for(waiter, 5)
    assert done_before == [False], "paused until the rate changed"


async def test_more_than_a_bucket_is_taken_in_chunks() -> None:
    limiter = Limiter()
    limiter.set(1000)  # a bucket of 1000 that starts full
    assert await asyncio.wait_for(limiter.acquire(1500), 5)  # 1000 at once, 500 more after ~0.5 s


def test_queue_limits_follow_the_consul_folder() -> None:
    limits = QueueRateLimits(None, "jobq/queue-rates", "t")  # type: ignore[arg-type]
    folder = "jobq/queue-rates/"
    limits._on([{"Key": folder + "a", "Value": b"5"}, {"Key": folder + "b", "Value": b"bad"}])
    assert limits.rates() == {"a": 5}
    assert limits.batch_cap(500) == 5
    limits._on([])  # every key deleted: unlimited again
    assert limits.rates() == {}
    assert limits.batch_cap(500) == 500
