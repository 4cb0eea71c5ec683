"""Cron schedules in Consul KV — durable, shared by every process, never in one process's memory.

``<prefix>/cron/<name>`` holds a schedule (:class:`~jqcore.cron.CronSchedule`, JSON) and
``<prefix>/cron-state/<name>`` what was last fired (:class:`~jqcore.cron.CronState`). A fire is claimed
by a compare-and-set on the state key (Consul's ``cas`` on its ModifyIndex; 0 = only if absent), so of
any number of scheduler instances computing the same slot exactly one enqueues it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import consul.aio
import orjson
from pydantic import ValidationError

from jqcore.cron import CronSchedule, CronState, fire_id, next_slot
from jqcore.envelope import new_envelope
from jqcore.errors import BackendUnavailable
from jqengine import Engine

__all__ = ["CronStore", "fire_now", "overview"]

CONSUL_ERRORS = (consul.ConsulException, OSError, TimeoutError)


class CronStore:
    def __init__(self, client: consul.aio.Consul, prefix: str = "jobq") -> None:
        self.client, self.prefix = client, prefix.rstrip("/")

    def _def_key(self, name: str) -> str:
        return f"{self.prefix}/cron/{name}"

    def _state_key(self, name: str) -> str:
        return f"{self.prefix}/cron-state/{name}"

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except CONSUL_ERRORS as exc:
            raise BackendUnavailable(f"Consul {what}: {exc!r}", code="consul_unavailable") from exc

    # ---- schedules ---------------------------------------------------------------------------
    async def put(self, schedule: CronSchedule, now_ms: int) -> CronSchedule:
        """Create or replace ``schedule``; its slots start after ``now_ms`` (a changed timing never
        fires the slots it would have had before the change)."""
        stored = schedule.model_copy(update={"created_ms": now_ms})
        await self._call("put", self.client.kv.put(self._def_key(stored.name), stored.model_dump_json()))
        return stored

    async def get(self, name: str) -> CronSchedule | None:
        _, entry = await self._call("get", self.client.kv.get(self._def_key(name)))
        return _schedule(entry) if entry else None

    async def list(self) -> list[CronSchedule]:
        _, entries = await self._call("list", self.client.kv.get(f"{self.prefix}/cron/", recurse=True))
        found = [_schedule(e) for e in entries or []]
        return sorted((s for s in found if s is not None), key=lambda s: s.name)

    async def delete(self, name: str) -> bool:
        existed = await self.get(name) is not None
        await self._call("delete", self.client.kv.delete(self._def_key(name)))
        await self._call("delete", self.client.kv.delete(self._state_key(name)))
        return existed

    async def set_paused(self, name: str, paused: bool, now_ms: int) -> CronSchedule | None:
        """Pause or resume; a resumed schedule fires from ``now_ms`` on (a pause is not a misfire)."""
        schedule = await self.get(name)
        if schedule is None:
            return None
        changed = schedule.model_copy(update={"paused": paused})
        await self._call("put", self.client.kv.put(self._def_key(name), changed.model_dump_json()))
        if not paused:
            while True:  # move the state past the pause; lost races just retry
                state, index = await self.state(name)
                later = state.model_copy(update={"last_slot_ms": max(state.last_slot_ms, now_ms)})
                if await self.swap(name, later, index):
                    break
        return changed

    # ---- state ---------------------------------------------------------------------------------
    async def state(self, name: str) -> tuple[CronState, int]:
        """The schedule's state and its ModifyIndex (0 when there is none yet)."""
        _, entry = await self._call("get", self.client.kv.get(self._state_key(name)))
        if not entry or entry.get("Value") is None:
            return CronState(), 0
        return CronState.model_validate_json(entry["Value"]), int(entry["ModifyIndex"])

    async def swap(self, name: str, state: CronState, index: int) -> bool:
        """Write ``state`` only if the stored one is still at ``index`` (0: only if absent)."""
        return bool(
            await self._call(
                "cas", self.client.kv.put(self._state_key(name), state.model_dump_json(), cas=index)
            )
        )


def _schedule(entry: dict[str, Any]) -> CronSchedule | None:
    try:
        return CronSchedule.model_validate(orjson.loads(entry.get("Value") or b"null"))
    except (orjson.JSONDecodeError, ValidationError):
        return None  # written by hand and broken: listed as missing rather than stopping every schedule


async def fire_now(
    engine: Engine, schedule: CronSchedule, slots: Sequence[int], *, manual: bool = False
) -> list[str]:
    """Enqueue the jobs of ``slots`` (ids ``cron:<name>:<slot>``; ``manual``: a trigger, its own ids)."""
    jobs = [
        new_envelope(
            schedule.queue,
            schedule.kind,
            schedule.args,
            id=fire_id(schedule.name, slot) + (":manual" if manual else ""),
            priority=schedule.priority,
            max_attempts=schedule.max_attempts,
            meta={"cron": schedule.name, "slot": str(slot)},
        )
        for slot in slots
    ]
    if jobs:
        await engine.enqueue_batch(jobs)
    return [j.id for j in jobs]


async def overview(store: CronStore, now_ms: int) -> list[dict[str, Any]]:
    """Every schedule with its last and next run (``jobq cron list``, ``GET /v1/cron``)."""
    rows = []
    for schedule in await store.list():
        state, _ = await store.state(schedule.name)
        since = max(now_ms, schedule.created_ms)
        rows.append(
            {
                **schedule.model_dump(),
                "schedule": schedule.describe(),
                "last_slot_ms": state.last_slot_ms or None,
                "last_fired_at_ms": state.fired_at_ms,
                "next_slot_ms": None if schedule.paused else next_slot(schedule, since),
                "fires": state.fires,
                "dropped": state.dropped,
            }
        )
    return rows
