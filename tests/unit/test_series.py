"""Rates from counter samples (pure): gaps, counter resets, several queues summed."""

from __future__ import annotations

from jqweb.series import combine


def sample(t: int, **counters: int) -> dict[str, int]:
    return {"t": t, **counters}


def test_rates_are_differences_over_the_time_between_samples() -> None:
    points = [sample(0, enqueued=0, completed=0), sample(60_000, enqueued=120, completed=60)]
    rates = combine({"q": points})
    assert rates.at_ms == [60_000]
    assert rates.enqueued == [2.0]
    assert rates.completed == [1.0]
    assert rates.wait_ms == [None]  # nothing claimed: no latency, not zero


def test_a_gap_spreads_over_its_length_and_a_reset_counts_from_zero() -> None:
    points = [
        sample(0, enqueued=100),
        sample(180_000, enqueued=460),  # three buckets without a sample: 360 over 180 s
        sample(240_000, enqueued=30),  # the queue was made anew: its counters restarted
    ]
    rates = combine({"q": points})
    assert rates.enqueued == [2.0, 0.5]


def test_queues_are_summed_bucket_by_bucket() -> None:
    a = [sample(0, completed=0, claimed=0, wait_ms=0), sample(60_000, completed=60, claimed=10, wait_ms=100)]
    b = [sample(0, completed=0, claimed=0, wait_ms=0), sample(60_000, completed=120, claimed=30, wait_ms=700)]
    rates = combine({"a": a, "b": b})
    assert rates.completed == [3.0]
    assert rates.wait_ms == [20.0]  # 800 ms over 40 claims
    assert rates.failed == [0.0]
