"""The rebuild's cron fires (:mod:`jqrecover.rebuild`): fires never pass through Kafka, so a fire the
events knew pending at the loss is fired again from its schedule in Consul, under the same id."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from jqcore.cron import CronSchedule
from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine
from jqrecover.rebuild_read import FINISHED, EventIndex, Key
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CronStore, fire_now

__all__ = ["CRON_ID", "CronReport", "cron_fires", "refire", "schedules_of"]

CRON_ID = re.compile(r"^cron:([A-Za-z0-9][A-Za-z0-9._-]{0,63}):(\d+)(:manual)?$")


@dataclass
class CronReport:
    refired: list[str] = field(default_factory=list)
    """Fires pending at the loss, enqueued again (dry run: that would be)."""
    missing: list[str] = field(default_factory=list)
    """Fires pending at the loss whose schedule is gone from Consul (not rebuilt)."""
    finished: int = 0
    """Fires seen finished (not rebuilt)."""


def cron_fires(index: EventIndex, records: Collection[Key], report: CronReport) -> dict[str, list[Key]]:
    """Schedule name → the fires (``(queue, id)``) not known finished."""
    out: dict[str, list[Key]] = {}
    for key, latest in index.jobs.items():
        m = CRON_ID.match(key[1])
        if m is None or key in records:
            continue  # not a fire, or one that came through Kafka (a client's id): its record decides
        if latest.state in FINISHED:
            report.finished += 1
        else:
            out.setdefault(m[1], []).append(key)
    return out


async def schedules_of(
    names: Iterable[str], consul: ConsulSettings, cron: CronSettings
) -> dict[str, CronSchedule | None]:
    client = consul_client(consul)
    try:
        store = CronStore(client, cron.kv_prefix)
        return {name: await store.get(name) for name in names}
    finally:
        await close_consul(client)


async def refire(
    engine: Engine | None,
    fires: dict[str, list[Key]],
    schedules: dict[str, CronSchedule | None],
    report: CronReport,
) -> None:
    for name, keys in sorted(fires.items()):
        schedule = schedules.get(name)
        for queue, job_id in sorted(keys):
            if schedule is None:
                report.missing.append(job_id)
                continue
            m = CRON_ID.match(job_id)
            assert m is not None
            report.refired.append(job_id)
            if engine is not None:
                same_queue = schedule.model_copy(update={"queue": queue})  # where the fire was enqueued
                await fire_now(engine, same_queue, [int(m[2])], manual=bool(m[3]))
