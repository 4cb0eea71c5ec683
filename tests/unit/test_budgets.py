"""The per-queue memory budget rules of the relay (pure logic)."""

from __future__ import annotations

import pytest

from jqrelay.budgets import JOB_OVERHEAD, RESUME_AT, budget_of, is_over, projected

MIB = 1 << 20


@pytest.mark.parametrize(
    ("configured", "share", "maxmemory", "budget"),
    [
        (5 * MIB, 0.5, 0, 5 * MIB),  # a queue's own budget holds without a maxmemory
        (5 * MIB, 0.5, 100 * MIB, 5 * MIB),  # ... and over the share
        (0, 0.5, 100 * MIB, 50 * MIB),  # else the share of maxmemory
        (0, 0.5, 0, 0),  # no maxmemory, no budget of its own: none
        (0, 1.0, 100 * MIB, 0),  # share 1: no default budget
    ],
)
def test_a_queues_budget(configured: int, share: float, maxmemory: int, budget: int) -> None:
    assert budget_of(configured, share, maxmemory) == budget


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
