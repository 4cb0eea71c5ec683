"""The operator's bounds on what a queue's configuration may ask for (security review M3): a queue's admin
cannot lift its own memory budget, retention or events cap past them
(``jqcore.settings.pipeline.QueueBounds``)."""

from __future__ import annotations

from jqcore.settings.pipeline import QueueBounds


def test_each_value_past_its_bound_is_named_with_the_setting_that_raises_it() -> None:
    bounds = QueueBounds(retention_ms=1000, dead_retention_ms=2000, events_cap=10, memory_share=0.25)
    asked = {
        "retention_ms": 1001,
        "dead_retention_ms": 2000,
        "events_cap": 11,
        "memory_budget": 300,
        "paused": True,
    }
    problems = dict(bounds.problems(asked, maxmemory=1000))
    assert set(problems) == {"retention_ms", "events_cap", "memory_budget"}
    assert "at most 250" in problems["memory_budget"]
    assert "JOBQ_QUEUE_MAX_MEMORY_SHARE" in problems["memory_budget"]
    assert "JOBQ_QUEUE_MAX_RETENTION_MS" in problems["retention_ms"]


def test_a_redis_without_maxmemory_bounds_no_memory_budget_and_unset_fields_are_not_checked() -> None:
    bounds = QueueBounds(memory_share=0.1)
    assert bounds.problems({"memory_budget": 1 << 50}, maxmemory=0) == []
    assert bounds.problems({}, maxmemory=1000) == []
