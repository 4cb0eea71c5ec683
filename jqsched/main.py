"""``jobq scheduler`` / ``python -m jqsched``: run one scheduler instance until a signal."""

from __future__ import annotations

import asyncio

from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqruntime.lifecycle import run_until_signal
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings

__all__ = ["run"]


def run(settings: SchedulerSettings | None = None) -> None:
    """Run until a signal; the settings not given come from the environment."""
    settings = settings if settings is not None else load(SchedulerSettings)
    parts = (load(RedisSettings), load(ConsulSettings), load(CronSettings), load(KafkaSettings))
    far, events = load(FarSettings), load(EventSettings)

    async def main() -> None:
        service = SchedulerService(settings, *parts, far, events)
        await run_until_signal(service, health_port=settings.metrics_port)

    asyncio.run(main())
