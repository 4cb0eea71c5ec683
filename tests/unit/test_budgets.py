"""The per-queue memory budget rules of the relay (pure logic): caps, fair shares under pressure, the
ceiling, and why two backlogs no longer reach the global guard."""

from __future__ import annotations

from typing import Any

import pytest

from jqrelay.budgets import (
    JOB_OVERHEAD,
    RESUME_AT,
    QueueBudgets,
    _Sample,
    budget_of,
    effective_budget,
    is_over,
    projected,
)
from jqrelay.settings import RelaySettings

MIB = 1 << 20
GIB = 1 << 30


@pytest.mark.parametrize(
    ("configured", "share", "maxmemory", "budget"),
    [
        (5 * MIB, 0.35, 0, 5 * MIB),  # a queue's own budget holds without a maxmemory
        (5 * MIB, 0.35, 100 * MIB, 5 * MIB),  # ... and over the share
        (0, 0.35, 100 * MIB, 35 * MIB),  # else the share of maxmemory
        (0, 0.35, 0, 0),  # no maxmemory, no budget of its own: none
        (0, 1.0, 100 * MIB, 0),  # share 1: no default budget
    ],
)
def test_a_queues_cap(configured: int, share: float, maxmemory: int, budget: int) -> None:
    assert budget_of(configured, share, maxmemory) == budget


def test_under_pressure_a_queue_gets_at_most_its_fair_share_of_the_pool() -> None:
    pool = int(0.70 * GIB)
    assert effective_budget(358 * MIB, False, pool, 5) == 358 * MIB, "no pressure: the cap"
    assert effective_budget(358 * MIB, True, pool, 5) == pool // 5, "pressure: the fair level"
    assert effective_budget(10 * MIB, True, pool, 5) == 10 * MIB, "a smaller cap stays"
    assert effective_budget(0, True, pool, 2) == pool // 2, "no cap: the fair level under pressure"
    assert effective_budget(0, False, pool, 2) == 0


def test_over_at_the_budget_and_back_only_under_the_resume_mark() -> None:
    budget = 1000
    assert not is_over(False, 999, budget)
    assert is_over(False, 1000, budget)
    assert is_over(True, int(RESUME_AT * budget), budget), "still over between the marks"
    assert not is_over(True, int(RESUME_AT * budget) - 1, budget)
    assert not is_over(True, 10**9, 0), "no budget: never over"


def test_written_jobs_are_projected_at_the_queues_own_size_per_job_or_at_least_their_records() -> None:
    assert projected(10, 5_000, 3_400.0) == 34_000, "the queue's mean job size, sampled"
    assert projected(10, 5_000, 0.0) == 5_000 + 10 * JOB_OVERHEAD, "no sample yet: records + overhead"
    assert projected(10, 50_000, 100.0) == 50_000 + 10 * JOB_OVERHEAD, "never less than the records"


class _Guard:
    def __init__(self, used: int, maxmemory: int = GIB, slow_at: float = 0.80) -> None:
        self.used_bytes, self.maxmemory, self.slow_at, self.added = used, maxmemory, slow_at, 0


def _budgets(used: int, queues: dict[str, int], **kw: Any) -> QueueBudgets:
    budgets = QueueBudgets(None, _Guard(used), 0.35, 0.70, **kw)  # type: ignore[arg-type]
    for queue, bytes_ in queues.items():
        budgets._samples[queue] = _Sample(at=0.0, used=bytes_, cap=budget_of(0, 0.35, GIB))
    budgets._pressure()
    return budgets


def test_two_stuck_backlogs_stop_at_their_caps_below_the_pool_and_the_neighbours_write() -> None:
    """The issue's case: two queues whose workers drain nothing. Each stops at 0.35 of maxmemory, so
    together they hold at most the pool (0.70), below the ceiling (0.78) and the guard's marks."""
    cap = int(0.35 * GIB)
    budgets = _budgets(2 * cap + 20 * MIB, {"a": cap, "b": cap, "small": 5 * MIB})
    assert budgets.over_now("a")
    assert budgets.over_now("b")
    assert budgets.pressure, "at the pool"
    assert budgets.big_queues() == 2, "the small queue holds under 1 % of maxmemory"
    assert not budgets.over_now("small"), "the band up to the ceiling is the small queues'"
    assert budgets.ceiling == pytest.approx(0.78)


def test_five_backlogs_share_the_pool_under_pressure() -> None:
    cap, fair = int(0.35 * GIB), int(0.70 * GIB) // 5
    budgets = _budgets(
        int(0.72 * GIB), {"a": cap, "b": int(0.2 * GIB), "c": fair + MIB, "d": fair - 10 * MIB, "e": 50 * MIB}
    )
    assert budgets.pressure
    assert budgets.big_queues() == 5
    assert [q for q in "abcde" if budgets.over_now(q)] == ["a", "b", "c"], "at or over pool / 5 step aside"


def test_the_big_queues_share_what_the_rest_of_redis_leaves_of_the_pool() -> None:
    """Redis's own overhead and the small queues count against the pool: two backlogs beside 0.10 of
    other memory get (0.70 - 0.10) / 2 each, so Redis stays near the pool, under the ceiling."""
    each = int(0.31 * GIB)
    budgets = _budgets(2 * each + int(0.10 * GIB), {"a": each, "b": each})
    assert budgets.pressure
    assert budgets.budget("a") == (int(0.70 * GIB) - int(0.10 * GIB)) // 2
    assert budgets.over_now("a"), "0.31 is over its fair 0.30 with the rest counted"
    assert not _budgets(2 * each, {"a": each, "b": each}).over_now("a"), "nothing else: under 0.35"


def test_at_the_ceiling_every_queue_steps_aside() -> None:
    budgets = _budgets(int(0.79 * GIB), {"tiny": MIB})
    assert budgets.at_ceiling()
    assert budgets.over_now("tiny")
    budgets.guard.used_bytes = int(0.70 * GIB)  # type: ignore[attr-defined]
    assert not budgets.at_ceiling()
    budgets.account("tiny", 1000, 90 * MIB)  # what the relay wrote since the last sample counts
    assert budgets.at_ceiling()


def test_other_relays_samples_count_for_the_fair_share_until_stale() -> None:
    from jqrelay.budgets import _fresh

    now = 1_000_000
    raw = {b"a": b"500:999000", b"b": f"7:{now - 31_000}".encode(), "c": "x:1"}
    assert _fresh(raw, now) == {"a": 500}


def test_the_settings_keep_the_pool_below_the_ceiling_and_the_share_within_the_pool() -> None:
    assert RelaySettings().queue_memory_share == 0.35
    with pytest.raises(ValueError, match="POOL"):
        RelaySettings(queue_memory_pool=0.80)
    with pytest.raises(ValueError, match="SHARE"):
        RelaySettings(queue_memory_share=0.75)
    assert RelaySettings(queue_memory_share=1).queue_memory_share == 1, "1: no default budget"
