"""``engine.admin``: what an operator does — cancel, dead letters (retry, purge), forget, the queues' and
job types' configuration, and kill switches.

Kill switches are kept in one hash (:data:`~jqengine.keys.SWITCHES_KEY`: name → JSON), and each
queue's configuration carries the list that applies to it (field ``switches``, :mod:`jqengine.switchrules`),
which its claim script reads: setting or lifting a switch rewrites that list in every known queue before
it returns, so no claim that starts after the call answered hands out a matching job — hand-offs to
waiting pools included. A queue born later (or again, after Redis lost it) gets the list from the call
that creates it — the engine reads the switches before its first ``enqueue_batch`` to a queue, and the
script creates a queue only then (:meth:`jqengine.core.Core.unannounced`) — and again when it registers
(:meth:`jqengine.core.Core.register`). Consul keeps a copy of the switches (``jqruntime.stores.config``),
which :meth:`Admin.restore_switches` puts back after Redis lost them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import orjson

from jqengine import codes, reads, replies
from jqengine.core import Part, _encode_kind
from jqengine.keys import KINDS_KEY, QUEUES_KEY, SWITCHES_KEY
from jqengine.models import CancelResult, Forgotten, QueueConfig
from jqengine.redisconn import text
from jqengine.switchrules import RESTORED_FIELD, Switch, queue_list, switch_from_json, switches_of

__all__ = ["FAIR_INDEX_CHUNK", "LIFT_BATCH", "MAX_SWITCHES", "MAX_SWITCHES_PER_QUEUE", "Admin"]

FAIR_INDEX_CHUNK = 1000
"""Ready jobs re-indexed per script call when a queue's fairness changes (Redis is never held long)."""
LIFT_BATCH = 1000
"""Parked jobs moved back per script call when a switch lifts (a long lift never blocks Redis)."""
MAX_SWITCHES = 1000
"""Switches in force at once: each claim's queue carries the list that applies to it, and each change
rewrites every queue's list — an incident brake, not a store."""
MAX_SWITCHES_PER_QUEUE = 50
"""Switches on one queue or glob (a tenant's admin cannot crowd out everyone's switch changes)."""


class Admin(Part):
    """Cancels, dead letters, configuration and kill switches (``engine.admin``)."""

    async def cancel(
        self, queue: str, job_id: str, reason: str = "canceled", *, now_ms: int | None = None
    ) -> CancelResult:
        """Cancel/unschedule: ``canceled`` | ``flagged`` (running) | ``tombstoned`` (not yet here) |
        ``final`` (already finished: nothing changed), with the state the job was in."""
        return replies.cancel(await self._core.run("cancel", queue, [job_id, reason], now_ms))

    async def dead_retry(
        self, queue: str, ids: Sequence[str] = (), limit: int = 1000, *, now_ms: int | None = None
    ) -> int:
        return int(await self._core.run("dead_retry", queue, [limit, *ids], now_ms))

    async def dead_purge(
        self, queue: str, ids: Sequence[str] = (), limit: int = 1000, *, now_ms: int | None = None
    ) -> int:
        return int(await self._core.run("dead_purge", queue, [limit, *ids], now_ms))

    async def forget(self, queue: str, ids: Sequence[str], *, now_ms: int | None = None) -> list[Forgotten]:
        """Delete finished jobs now so their ids can be enqueued again; per id ``forgotten``,
        ``active`` (not finished: left alone) or ``missing``."""
        if not ids:
            return []
        return replies.forget(await self._core.run("forget", queue, list(ids), now_ms))

    async def configure_queue(self, queue: str, config: QueueConfig) -> None:
        """Apply a queue's configuration (validated here; see :class:`QueueConfig`). A change of its
        fairness re-indexes its ready jobs (:data:`FAIR_INDEX_CHUNK` a call)."""
        fields = _config_fields(config)
        before = await reads.queue_config(self._client, queue)
        await self._configure(queue, [x for kv in fields.items() for x in kv])
        if _fairness(config) != _fairness(before):
            offset = 0
            while True:
                _, offset = await self._core.run("fair_index", queue, [offset, FAIR_INDEX_CHUNK], None)
                if not int(offset):
                    break

    async def pause(self, queue: str, paused: bool = True) -> None:
        """Stop (or resume) claims; enqueues are still accepted while paused."""
        await self._configure(queue, ["paused", "1" if paused else "0"])

    async def _configure(self, queue: str, pairs: list[str]) -> None:
        """Write configuration fields; a queue the write creates (new to Redis, or Redis lost it while this
        engine knew it) is registered again: listed, and given the kill switches in force and the kinds'
        defaults before its first job (the relay's first batch no longer creates it, which is where a new
        queue gets them otherwise)."""
        created = int(await self._core.run("configure_queue", queue, pairs, None))
        await self._core.register([queue], again=[queue] if created else ())

    async def configure_kind(
        self,
        kind: str,
        *,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        max_attempts: int | None = None,
        delivery: str = "at_least_once",
        priority: int | None = None,
        ignore_result: bool = False,
    ) -> None:
        """A job type's options in ``queues`` (default: every known queue, and every future one).
        ``priority``: the priority its jobs get when enqueued without one (lower runs first; the default
        is the enqueue time, so 0 puts them ahead of every job left to the default); ``ignore_result``:
        its results are dropped (kept neither in Redis nor in the history)."""
        if delivery not in ("at_least_once", "at_most_once"):
            raise codes.QueueConfigInvalid(
                f"delivery must be at_least_once or at_most_once, not {delivery!r}"
            )
        if (concurrency is not None and concurrency < 1) or (max_attempts is not None and max_attempts < 1):
            raise codes.QueueConfigInvalid("concurrency and max_attempts must be at least 1")
        options = {
            "limit": concurrency,
            "attempts": max_attempts,
            "delivery": delivery,
            "prio": priority,
            "noresult": 1 if ignore_result else None,
        }
        if queues is None:
            await self._client.hset(KINDS_KEY, kind, _encode_kind(options))
            queues = [text(q) for q in await self._client.smembers(QUEUES_KEY)]
        else:
            queues = list(queues)
            await self._core.register(queues)
        for queue in queues:
            await self._core.configure_kind_in(queue, kind, options)

    # ---- kill switches ------------------------------------------------------------------------------
    async def switches(self) -> list[Switch]:
        """Every switch in force, by name."""
        async with codes.redis_errors("switches"):
            raw = await self._client.hgetall(SWITCHES_KEY)
        return sorted(switches_of(raw), key=lambda s: s.name)

    async def set_switch(self, switch: Switch) -> list[str]:
        """Put ``switch`` in force (a switch of the same name is replaced); the known queues it applies to.
        Jobs already running are not touched; jobs it matches are no longer started."""
        async with codes.redis_errors("switch"):
            before = await self._client.hget(SWITCHES_KEY, switch.name)
            if before is None:
                self._room_for(switch, await self.switches())
            await self._client.hset(SWITCHES_KEY, switch.name, switch.to_json())
        replaced = switch_from_json(before) if before else None
        every = await self.switches()
        hit = []
        for queue in await self._core.queues():
            if switch.applies_to(queue):
                hit.append(queue)
                await self._rewrite(queue, every)
            elif replaced and replaced.applies_to(queue):  # the switch's new glob left this queue
                await self._rewrite(queue, every, lift=switch.name)
        return hit

    @staticmethod
    def _room_for(switch: Switch, every: list[Switch]) -> None:
        """:class:`codes.SwitchesFull` when a new switch would pass :data:`MAX_SWITCHES` in all or
        :data:`MAX_SWITCHES_PER_QUEUE` on its queue (or glob)."""
        same = sum(s.queue == switch.queue for s in every)
        if len(every) >= MAX_SWITCHES or same >= MAX_SWITCHES_PER_QUEUE:
            raise codes.SwitchesFull(
                f"{len(every)} kill switches are in force, {same} on {switch.queue!r} (at most"
                f" {MAX_SWITCHES} in all, {MAX_SWITCHES_PER_QUEUE} on one queue or glob): lift one first"
            )

    async def lift_switch(self, name: str) -> int:
        """Lift switch ``name``: jobs it parked become pending again (no attempt spent on them); how many.
        Raises :class:`codes.SwitchNotFound` when no such switch is in force."""
        async with codes.redis_errors("switch"):
            raw = None if name == RESTORED_FIELD else await self._client.hget(SWITCHES_KEY, name)
            if raw is None or not await self._client.hdel(SWITCHES_KEY, name):
                raise codes.SwitchNotFound(f"no kill switch named {name!r} is in force")
        lifted = switch_from_json(raw)
        every = await self.switches()
        moved = 0
        for queue in await self._core.queues():
            if lifted.applies_to(queue):
                moved += await self._rewrite(queue, every, lift=name)
        return moved

    async def switches_restored(self) -> bool:
        """Whether the kept switches were put back in this Redis (:meth:`restore_switches`) since it last
        lost its data: then the switches it holds are those in force, and one it lacks was lifted."""
        async with codes.redis_errors("switches"):
            return bool(await self._client.hexists(SWITCHES_KEY, RESTORED_FIELD))

    async def restore_switches(self, kept: Iterable[Switch]) -> list[str]:
        """Put back the kept switches (Consul's copy) Redis lacks — it lost them with its data — and give
        every known queue they apply to its list (as :meth:`set_switch` does), then mark the switches
        restored (:meth:`switches_restored`); a switch Redis has is left as it is (it is in force). The
        names put back. Called once after a loss, before a restored queue is configured or written
        (``jqruntime.stores.config.restore_switches``: the relay, the gateway, ``jobq rebuild``)."""
        async with codes.redis_errors("switch"):
            back = [s for s in kept if await self._client.hsetnx(SWITCHES_KEY, s.name, s.to_json())]
        if back:
            every = await self.switches()
            for queue in await self._core.queues():
                if any(s.applies_to(queue) for s in back):
                    await self._rewrite(queue, every)
        at = await self._core.now()
        async with codes.redis_errors("switch"):
            await self._client.hset(SWITCHES_KEY, RESTORED_FIELD, str(at))
        return sorted(s.name for s in back)

    async def _rewrite(self, queue: str, every: list[Switch], lift: str = "") -> int:
        """Give ``queue`` its switch list; with ``lift``, move the jobs that switch parked back (all of
        them, :data:`LIFT_BATCH` per call). How many moved."""
        listed, moved = queue_list(queue, every), 0
        while True:
            n, left = await self._core.run("switch_lift", queue, [listed, lift, LIFT_BATCH], None)
            moved += int(n)
            if int(left) == 0:
                return moved


def _config_fields(config: QueueConfig) -> dict[str, str]:
    if len(config.filter_keys) > QueueConfig.MAX_FILTER_KEYS:
        raise codes.QueueConfigInvalid(f"at most {QueueConfig.MAX_FILTER_KEYS} filter keys")
    if config.mode == "exclusive" and not config.excl_key:
        raise codes.QueueConfigInvalid("an exclusive queue needs excl_key (the meta key it is exclusive on)")
    if config.lease_ms < 100 or config.max_attempts < 1 or config.retention_ms < 0:
        raise codes.QueueConfigInvalid(
            "lease_ms >= 100, max_attempts >= 1 and retention_ms >= 0 are required"
        )
    if config.dedup not in ("active", "finished"):
        raise codes.QueueConfigInvalid(f"dedup must be active or finished, not {config.dedup!r}")
    if config.id_from not in ("random", "content"):
        raise codes.QueueConfigInvalid(f"id_from must be random or content, not {config.id_from!r}")
    if config.dedup_window_ms < 0:
        raise codes.QueueConfigInvalid("dedup_window_ms must be >= 0")
    if config.events_cap < 0:
        raise codes.QueueConfigInvalid("events_cap must be >= 0 (0: no lifecycle events)")
    if config.memory_budget < 0:
        raise codes.QueueConfigInvalid("memory_budget must be >= 0 bytes (0: the relay's default share)")
    if not 0 <= config.default_delay_ms <= QueueConfig.MAX_DEFAULT_DELAY_MS:
        raise codes.QueueConfigInvalid(
            f"default_delay_ms must be 0..{QueueConfig.MAX_DEFAULT_DELAY_MS} (30 days; 0: no default delay)"
        )
    _check_fairness(config)
    return {
        "mode": config.mode,
        "excl_key": config.excl_key or "",
        "lease_ms": str(config.lease_ms),
        "max_attempts": str(config.max_attempts),
        "filter_keys": ",".join(config.filter_keys),
        "paused": "1" if config.paused else "0",
        "retention_ms": str(config.retention_ms),
        "dead_retention_ms": str(config.dead_retention_ms),
        "dedup": config.dedup,
        "dedup_window_ms": str(config.dedup_window_ms),
        "id_from": config.id_from,
        "events_cap": str(config.events_cap),
        "fair_key": config.fair_key or "",
        "fair_weights": orjson.dumps(dict(config.fair_weights)).decode() if config.fair_weights else "",
        "fair_limits": orjson.dumps(dict(config.fair_limits)).decode() if config.fair_limits else "",
        "fair_rates": orjson.dumps(dict(config.fair_rates)).decode() if config.fair_rates else "",
        "memory_budget": str(config.memory_budget),
        "default_delay_ms": str(config.default_delay_ms),
        "enqueue_blocked": "1" if config.enqueue_blocked else "0",
    }


_META_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")
MAX_FAIR_ENTRIES = 1000
FAIR_RATE_RANGE = (0.001, 1_000_000.0)


def _fairness(config: QueueConfig) -> tuple[object, ...]:
    """What a change of re-indexes the ready jobs (``fair_index``)."""
    return (config.fair_key, dict(config.fair_weights), dict(config.fair_limits), dict(config.fair_rates))


def _check_fairness(config: QueueConfig) -> None:
    if config.fair_key and not _META_KEY.fullmatch(config.fair_key):
        raise codes.QueueConfigInvalid(f"fair_key must be a meta key (a-z, 0-9, _), not {config.fair_key!r}")
    for name, table, low, high in (
        ("fair_weights", config.fair_weights, 1, 1000),
        ("fair_limits", config.fair_limits, 1, 10**9),
    ):
        if len(table) > MAX_FAIR_ENTRIES:
            raise codes.QueueConfigInvalid(f"{name}: at most {MAX_FAIR_ENTRIES} values")
        bad = [v for v, n in table.items() if not isinstance(n, int) or not low <= n <= high or len(v) > 256]
        if bad:
            raise codes.QueueConfigInvalid(f"{name}: {bad[0]!r} needs an integer from {low} to {high}")
    if len(config.fair_rates) > MAX_FAIR_ENTRIES:
        raise codes.QueueConfigInvalid(f"fair_rates: at most {MAX_FAIR_ENTRIES} values")
    slow, fast = FAIR_RATE_RANGE
    bad = [
        v
        for v, r in config.fair_rates.items()
        if isinstance(r, bool) or not isinstance(r, int | float) or not slow <= r <= fast or len(v) > 256
    ]
    if bad:
        raise codes.QueueConfigInvalid(
            f"fair_rates: {bad[0]!r} needs jobs per second from {slow:g} to {fast:g}"
        )
    if (config.fair_weights or config.fair_limits or config.fair_rates) and not config.fair_key:
        raise codes.QueueConfigInvalid("fair_weights, fair_limits and fair_rates need a fair_key")
