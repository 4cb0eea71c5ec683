"""The one judgment of a silent worker (``jqruntime.stores.presence.silent_queues``): what ``jobq status``,
the dashboard and the scheduler's ``jobq_worker_silent_seconds`` all call. Pure: a presence record, the
queues' oldest pending ages, the time."""

from __future__ import annotations

from jqruntime.stores.presence import ALIVE_S, SEEN_ALIVE_S, SILENT_AFTER_S, Claimer, silent_queues

NOW = 10_000_000_000
T = int(SILENT_AFTER_S * 1000)
"""The silence threshold in ms."""


def pool(
    last: dict[str, int], *, beat: int = NOW - 1_000, busy: int | None = 0, slots: int | None = 8
) -> Claimer:
    return Claimer("worker", "host:1:q", beat, last, busy, slots)


def test_a_worker_with_room_that_claimed_nothing_while_its_queue_waited_is_silent() -> None:
    c = pool({"q": NOW - T})
    assert silent_queues(c, NOW, {"q": T}) == ["q"], "exactly the threshold, both ways"
    assert silent_queues(c, NOW, {"q": T - 1}) == [], "the head waited less: someone takes the jobs"
    assert silent_queues(pool({"q": NOW - T + 1}), NOW, {"q": 10 * T}) == [], "it claimed within the time"
    assert silent_queues(c, NOW, {"q": 0}) == [], "nothing pending"
    assert silent_queues(c, NOW, {"q": None}) == [], "no age known"
    assert silent_queues(c, NOW, {}) == [], "a queue the caller does not judge (another scheduler keeps it)"
    assert silent_queues(c, NOW, {"q": 10 * T}, paused={"q"}) == [], "a paused queue waits on purpose"


def test_each_served_queue_is_judged_on_its_own() -> None:
    c = pool({"a": NOW - 2 * T, "b": NOW - 5, "c": NOW - 3 * T})
    waited = {"a": 2 * T, "b": 2 * T, "c": 0}
    assert silent_queues(c, NOW, waited) == ["a"], "b claims, nothing waits in c"


def test_a_busy_worker_is_not_expected_to_claim_while_it_beats() -> None:
    long_jobs = pool({"q": NOW - 10 * T}, busy=8, slots=8)
    assert silent_queues(long_jobs, NOW, {"q": 10 * T}) == []
    assert silent_queues(pool({"q": NOW - 10 * T}, busy=7), NOW, {"q": 10 * T}) == ["q"], "a free slot"


def test_a_worker_that_stopped_beating_is_judged_by_its_last_record_busy_or_not() -> None:
    """A loop blocked by a handler stops the heartbeat and the claims at once; its record says busy."""
    stale = NOW - int(ALIVE_S * 1000) - 1
    stuck = pool({"q": NOW - T}, beat=stale, busy=1, slots=1)
    assert not stuck.alive(NOW)
    assert silent_queues(stuck, NOW, {"q": T}) == ["q"]
    assert silent_queues(stuck, NOW, {"q": 0}) == [], "its jobs moved on to others: nothing waits"


def test_a_filtered_worker_is_not_judged_by_the_head_of_its_queue() -> None:
    c = Claimer("worker", "host:1:q", NOW, {"q": NOW - 10 * T}, 0, 8, filtered=True)
    assert silent_queues(c, NOW, {"q": 10 * T}) == []


def test_an_http_worker_says_no_slots_and_counts_alive_for_longer() -> None:
    seen = Claimer("http-worker", "billing-go:pod-7", NOW - int(SEEN_ALIVE_S * 1000), {"q": NOW - T})
    assert seen.alive(NOW), "a gateway notes a name every 5 s at most, a long-poll lasts 30 s"
    assert not Claimer("worker", "p", NOW - int(SEEN_ALIVE_S * 1000), {}).alive(NOW)
    assert silent_queues(seen, NOW, {"q": T}) == ["q"], "it asks for work: it has room"


def test_the_row_status_and_the_dashboard_show() -> None:
    c = pool({"q": NOW - T, "r": NOW - 500}, busy=3)
    assert c.as_dict(NOW, silent_queues(c, NOW, {"q": T})) == {
        "role": "worker",
        "name": "host:1:q",
        "alive": True,
        "beat_age_s": 1.0,
        "busy": 3,
        "slots": 8,
        "filtered": False,
        "idle_s": {"q": T / 1000, "r": 0.5},
        "silent": ["q"],
    }
