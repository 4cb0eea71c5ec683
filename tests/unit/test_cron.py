"""Cron schedules as pure logic: slots (intervals, cron expressions in a time zone, DST), the misfire
policies after a downtime, and the errors a bad schedule gets."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from typing import Any

import pytest

from jqcore.cron import CronSchedule, CronState, due_slots, fire_id, parse_schedule, slots_after
from jqcore.errors import CronInvalid

MIN = 60_000


def schedule(**kw: Any) -> CronSchedule:
    return parse_schedule({"name": "s", "queue": "q", "kind": "k", **kw})


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def test_interval_slots_are_multiples_of_the_interval_since_the_epoch() -> None:
    every = schedule(every_s=60)
    assert list(islice(slots_after(every, 10 * MIN + 1), 3)) == [11 * MIN, 12 * MIN, 13 * MIN]
    assert next(slots_after(every, 11 * MIN)) == 12 * MIN, "strictly after"


def test_cron_slots_follow_the_time_zone_across_a_dst_change() -> None:
    daily = schedule(cron="0 9 * * *", tz="Europe/Paris")
    # Paris moves from UTC+1 to UTC+2 on 2026-03-29: 09:00 local is 08:00 UTC, then 07:00 UTC
    got = list(islice(slots_after(daily, ms(2026, 3, 28, 0, 0)), 2))
    assert got == [ms(2026, 3, 28, 8, 0), ms(2026, 3, 29, 7, 0)]


def test_on_time_slots_fire_whatever_the_policy() -> None:
    for misfire in ("skip", "once", "catch_up"):
        s = schedule(every_s=60, misfire=misfire)
        due = due_slots(s, CronState(last_slot_ms=10 * MIN), 11 * MIN + 20)
        assert (due.fire, due.dropped, due.newest) == ([11 * MIN], 0, 11 * MIN), misfire


def test_nothing_is_due_before_the_next_slot_or_before_the_schedule_existed() -> None:
    s = schedule(every_s=60, created_ms=20 * MIN + 5)
    assert due_slots(s, CronState(), 21 * MIN - 1).fire == []
    assert due_slots(s, CronState(last_slot_ms=5 * MIN), 21 * MIN).fire == [21 * MIN], "not the old slots"


@pytest.mark.parametrize(
    ("misfire", "fire", "dropped"),
    [
        ("skip", [], 10),
        ("once", [20 * MIN], 9),
        ("catch_up", [16 * MIN, 17 * MIN, 18 * MIN, 19 * MIN, 20 * MIN], 5),
    ],
)
def test_misfire_policies_after_a_ten_minute_downtime(misfire: str, fire: list[int], dropped: int) -> None:
    s = schedule(every_s=60, misfire=misfire, catch_up_max=5, grace_s=30)
    due = due_slots(s, CronState(last_slot_ms=10 * MIN), 20 * MIN + 45_000)  # the newest is 45 s late
    assert (due.fire, due.dropped, due.newest) == (fire, dropped, 20 * MIN)


def test_skip_still_fires_a_slot_within_its_grace() -> None:
    s = schedule(every_s=60, grace_s=30)
    due = due_slots(s, CronState(last_slot_ms=10 * MIN), 20 * MIN + 29_000)
    assert (due.fire, due.dropped) == ([20 * MIN], 9)


def test_fire_ids_are_deterministic() -> None:
    assert fire_id("nightly", 1_700_000_000_000) == "cron:nightly:1700000000000"


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        ({"cron": "nope"}, "cron", "is not a cron expression"),
        ({"cron": "0 0 30 2 *"}, "schedule", "never fires"),
        ({"cron": "* * * * *", "every_s": 5}, "schedule", "exactly one of cron or every_s"),
        ({}, "schedule", "exactly one of cron or every_s"),
        ({"every_s": 0}, "every_s", "greater than or equal to 1"),
        ({"every_s": 5, "tz": "Mars/Olympus"}, "tz", "unknown time zone"),
        ({"every_s": 5, "misfire": "sometimes"}, "misfire", "'skip', 'once' or 'catch_up'"),
        ({"every_s": 5, "name": "has space"}, "name", "1-64 of"),
        ({"every_s": 5, "queue": "Bad Queue"}, "queue", ""),
        ({"every_s": 5, "surprise": 1}, "surprise", "Extra inputs"),
    ],
)
def test_a_bad_schedule_names_each_problem(doc: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(CronInvalid) as info:
        schedule(**doc)
    assert info.value.code == "cron_invalid"
    assert any(f.field == field and problem in f.problem for f in info.value.fields), info.value.fields
