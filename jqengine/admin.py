"""Operator and timer transitions (cancel, promote, reap, GC, dead letters, forget) and the queues' and
job types' configuration."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import orjson

from jqengine import codes, reads, replies
from jqengine.core import EngineCore, _encode_kind
from jqengine.keys import KINDS_KEY, QUEUES_KEY
from jqengine.models import CancelResult, Forgotten, Promoted, QueueConfig
from jqengine.redisconn import text

__all__ = ["FAIR_INDEX_CHUNK", "AdminTransitions"]

FAIR_INDEX_CHUNK = 1000
"""Ready jobs re-indexed per script call when a queue's fairness changes (Redis is never held long)."""


class AdminTransitions(EngineCore):
    """Cancels, timers, dead letters and configuration (a part of :class:`jqengine.Engine`)."""

    async def cancel(
        self, queue: str, job_id: str, reason: str = "canceled", *, now_ms: int | None = None
    ) -> CancelResult:
        """Cancel/unschedule: ``canceled`` | ``flagged`` (running) | ``tombstoned`` (not yet here) |
        ``final`` (already finished: nothing changed), with the state the job was in."""
        return replies.cancel(await self._run("cancel", queue, [job_id, reason], now_ms))

    async def promote_due(self, queue: str, limit: int = 1000, *, now_ms: int | None = None) -> Promoted:
        """Delayed → pending for due jobs, never early."""
        return replies.promoted(await self._run("promote_due", queue, [limit], now_ms))

    async def reap_expired(
        self, queue: str, limit: int = 1000, *, now_ms: int | None = None
    ) -> tuple[int, int]:
        """Expired leases; returns (reaped, next lease deadline or -1)."""
        return replies.timer(await self._run("reap_expired", queue, [limit], now_ms))

    async def gc(self, queue: str, limit: int = 1000, *, now_ms: int | None = None) -> int:
        return int(await self._run("gc", queue, [limit], now_ms))

    async def dead_retry(
        self, queue: str, ids: Sequence[str] = (), limit: int = 1000, *, now_ms: int | None = None
    ) -> int:
        return int(await self._run("dead_retry", queue, [limit, *ids], now_ms))

    async def dead_purge(
        self, queue: str, ids: Sequence[str] = (), limit: int = 1000, *, now_ms: int | None = None
    ) -> int:
        return int(await self._run("dead_purge", queue, [limit, *ids], now_ms))

    async def forget(self, queue: str, ids: Sequence[str], *, now_ms: int | None = None) -> list[Forgotten]:
        """Delete finished jobs now so their ids can be enqueued again; per id ``forgotten``,
        ``active`` (not finished: left alone) or ``missing``."""
        if not ids:
            return []
        return replies.forget(await self._run("forget", queue, list(ids), now_ms))

    async def configure_queue(self, queue: str, config: QueueConfig) -> None:
        """Apply a queue's configuration (validated here; see :class:`QueueConfig`). A change of its
        fairness re-indexes its ready jobs (:data:`FAIR_INDEX_CHUNK` a call)."""
        fields = _config_fields(config)
        before = await reads.queue_config(self._client, queue)
        await self._run("configure_queue", queue, [x for kv in fields.items() for x in kv], None)
        await self._register([queue])
        if _fairness(config) != _fairness(before):
            offset = 0
            while True:
                _, offset = await self._run("fair_index", queue, [offset, FAIR_INDEX_CHUNK], None)
                if not int(offset):
                    break

    async def pause(self, queue: str, paused: bool = True) -> None:
        """Stop (or resume) claims; enqueues are still accepted while paused."""
        await self._run("configure_queue", queue, ["paused", "1" if paused else "0"], None)

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
            await self._register(queues)
        for queue in queues:
            await self._configure_kind_in(queue, kind, options)

    async def queues(self) -> list[str]:
        async with codes.redis_errors("queues"):
            return sorted(text(q) for q in await self._client.smembers(QUEUES_KEY))


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
