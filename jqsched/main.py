"""``jobq scheduler`` / ``python -m jqsched``: run one scheduler instance until a signal."""

from __future__ import annotations

import asyncio

from jqcore import metrics
from jqcore.lifecycle import run_until_signal
from jqcore.settings import ConsulSettings, CronSettings, RedisSettings, load
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings

__all__ = ["run"]


def run(settings: SchedulerSettings | None = None) -> None:
    settings = settings or load(SchedulerSettings)
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)

    async def main() -> None:
        service = SchedulerService(settings, load(RedisSettings), load(ConsulSettings), load(CronSettings))
        await run_until_signal(service)

    asyncio.run(main())
