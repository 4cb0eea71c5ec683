"""The event shipper's pace (issue 58): while events keep coming, a round that found less than a batch
starts the next ``EVENTS_GATHER_S`` after its own start, so each carries what that gathered (its reads,
produce and trim paid per many events); a full round goes on at once, an empty one waits on the streams."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqsched.service import EVENTS_GATHER_S, SchedulerService
from jqsched.settings import SchedulerSettings

NOWHERE = "127.0.0.1:1"


class Rounds:
    """A shipper whose rounds ship the given counts, then stop the test; and the streams' idle wait."""

    def __init__(self, counts: list[int], log: list[Any], done: asyncio.Event) -> None:
        self.counts, self.log, self.done = counts, log, done
        self.events = self

    async def ship(self, queues: Sequence[str]) -> int:
        if not self.counts:
            self.done.set()
            await asyncio.Event().wait()
        self.log.append(("ship", self.counts[0]))
        return self.counts.pop(0)

    async def wait(self, queues: Sequence[str], timeout_s: float) -> bool:
        self.log.append(("wait on the streams",))
        return True


async def test_a_light_round_waits_out_the_gathering_a_full_one_goes_on_and_an_empty_one_waits_on_the_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = SchedulerSettings(name="s", group="g", events=True)
    events = EventSettings(batch=100)
    service = SchedulerService(
        settings,
        RedisSettings(url=f"redis://{NOWHERE}/0"),
        ConsulSettings(addr=NOWHERE),
        CronSettings(),
        KafkaSettings(bootstrap=NOWHERE),
        FarSettings.model_validate({"horizon_s": 0}),
        events,
    )
    log: list[Any] = []
    done = asyncio.Event()
    fake = Rounds([3, 7, 100, 0, 5], log, done)
    service.shipper, service._engine = fake, fake  # type: ignore[assignment]
    service.dealt.set()
    real_sleep = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        log.append(("sleep", delay))
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)  # the service's pauses (nothing else runs here)
    task = asyncio.create_task(service._events_loop())
    await asyncio.wait_for(done.wait(), 10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    steps = [step[0] if step[0] == "sleep" else step for step in log]
    assert steps == [
        ("ship", 3),
        "sleep",  # a light round: the next starts EVENTS_GATHER_S after this one began
        ("ship", 7),
        "sleep",
        ("ship", 100),  # a full batch: the next at once
        ("ship", 0),
        ("wait on the streams",),  # nothing: block until an event comes, then ship it at once
        ("ship", 5),
        "sleep",
    ]
    assert all(0 < step[1] <= EVENTS_GATHER_S for step in log if step[0] == "sleep")
