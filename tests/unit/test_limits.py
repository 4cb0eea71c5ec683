"""The relay's rate limits as pure logic: the texts, the token bucket that never waits for a queue, pauses
that can be given up."""

from __future__ import annotations

import asyncio

import pytest

from jqcore.rates import Rate
from jqrelay.limits import Limiter, QueueRateLimits, parse_rate


@pytest.mark.parametrize(
    "text", ["-1", "fast", "nan", "inf", "5/d", "50 60", "burst 5", "50 burst 0", "1e400"]
)
def test_invalid_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"rate|burst"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "rate", "canonical"),
    [
        ("", Rate(), ""),
        ("unlimited", Rate(), ""),
        ("0", Rate(paused=True), "paused"),
        ("paused", Rate(paused=True), "paused"),
        ("12.5", Rate(12.5), "12.5/s"),
        ("50/s", Rate(50), "50/s"),
        ("3000/m", Rate(50), "50/s"),
        ("7200/h", Rate(2), "2/s"),
        ("50/s burst 200", Rate(50, 200), "50/s burst 200"),
        ("Paused 50/s burst 200", Rate(50, 200, paused=True), "paused 50/s burst 200"),
    ],
)
def test_the_texts_of_a_limit(text: str, rate: Rate, canonical: str) -> None:
    assert Rate.parse(text) == rate
    assert rate.text == canonical
    assert Rate.parse(rate.text) == rate, "the canonical text reads back the same"
    assert parse_rate(text) == rate.limit


def test_empty_is_unlimited_and_zero_is_paused() -> None:
    assert parse_rate("") is None
    assert parse_rate("0") == 0
    assert parse_rate("12.5") == 12.5
    assert Rate(50, 200, paused=True).limit == 0, "a paused limit lets nothing through, its rate kept"
    assert (Rate(0.5).capacity, Rate(50).capacity, Rate(50, 200).capacity) == (1, 50, 200)


def test_try_take_never_waits_and_takes_what_the_bucket_holds() -> None:
    limiter = Limiter()
    assert limiter.try_take(10_000) == 10_000, "unlimited"
    limiter.set(5)
    assert limiter.try_take(30) == 5, "a new limit starts with one second's burst"
    assert limiter.try_take(30) == 0
    limiter._at -= 1.0  # a second later
    assert limiter.try_take(30) == 5
    limiter.set(5, burst=20)
    assert limiter.try_take(30) == 20, "the burst set"
    limiter.set(0)
    assert limiter.try_take(1) == 0, "paused"
    assert limiter.wait_s(1) == float("inf")


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
    woken: list[bool] = []
    limits.listeners.append(lambda: woken.append(True))
    folder = "jobq/queue-rates/"
    limits._on(
        [
            {"Key": folder + "a", "Value": b"5"},
            {"Key": folder + "b", "Value": b"bad"},
            {"Key": folder + "c", "Value": b"paused 10/s"},
        ]
    )
    assert limits.rates() == {"a": 5, "c": 0}
    assert limits.paused("c")
    assert not limits.paused("a")
    assert limits.limiter("b") is None, "an invalid text is no limit"
    assert limits.limits["c"] == Rate(10, paused=True)
    assert woken == [True]
    limits._on([])  # every key deleted: unlimited again
    assert limits.rates() == {}
    assert limits.limiter("a") is None
    assert woken == [True, True]
