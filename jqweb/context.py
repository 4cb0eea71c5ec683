"""What every page shares: settings, where the stack lives, the Redis engine, Consul, the history (and the
pool its queries run on: ``jqruntime.historypool``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import consul.aio
from aiohttp import web

from jqcore.settings.common import load
from jqcore.settings.pipeline import QueueBounds
from jqengine import Engine, RedisClient, connect
from jqruntime.clientaddr import Networks, request_address
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.historypool import HistoryPool, MissCache
from jqruntime.http import TOKEN_NAME, HttpError
from jqruntime.kafka import AsyncProducer
from jqruntime.stores.audit import AuditTrail
from jqruntime.stores.cron import CronStore
from jqruntime.stores.history import HistoryStore, QueryLimits
from jqweb.overview import Sources
from jqweb.sessions import SessionStore, Throttle
from jqweb.settings import WebSettings

__all__ = ["WEB", "Web", "history_busy"]

_T = TypeVar("_T")


def history_busy(what: str, retry_after_s: int = 1) -> HttpError:
    """429 ``history_busy`` with ``Retry-After``: the dashboard process runs as many history queries as it
    may (``JOBQ_HISTORY_QUERY_SLOTS``, half of them per token)."""
    error = HttpError(
        429, "history_busy", f"the dashboard is at its limit of {what}; retry later", details={"limit": what}
    )
    error.headers = {"Retry-After": str(retry_after_s)}
    return error


@dataclass
class Web:
    settings: WebSettings
    sources: Sources = field(default_factory=Sources)
    base: str = ""
    """The path the dashboard is served under (``""`` on its own; ``/ui`` when the gateway mounts it)."""
    queue_bounds: QueueBounds = field(default_factory=lambda: load(QueueBounds))
    """What a queue's configuration may ask for (``JOBQ_QUEUE_MAX_*``)."""
    _client: RedisClient | None = None
    _engine: Engine | None = None
    _consul: consul.aio.Consul | None = None
    _history: HistoryStore | None = None
    _history_pool: HistoryPool | None = None
    _archive_misses: MissCache | None = None
    _producer: AsyncProducer | None = None
    _audit: AuditTrail | None = None

    @property
    def client(self) -> RedisClient:
        if self._client is None:
            self._client = connect(self.sources.redis)
        return self._client

    @property
    def engine(self) -> Engine:
        """One engine for the process (it registers every script once), made on first use."""
        if self._engine is None:
            self._engine = Engine(self.client)
        return self._engine

    @property
    def consul(self) -> consul.aio.Consul:
        if self._consul is None:
            self._consul = consul_client(self.sources.consul)
        return self._consul

    def producer(self) -> AsyncProducer:
        """An idempotent ``acks=all`` Kafka producer (made on first use: only replays write to Kafka)."""
        if self._producer is None:
            self._producer = AsyncProducer(self.sources.kafka, acks="all")
        return self._producer

    @property
    def audit(self) -> AuditTrail:
        """The audit trail (Redis, then the Kafka audit topic in the background)."""
        if self._audit is None:
            self._audit = AuditTrail(self.client, self.sources.kafka, self.sources.audit)
        return self._audit

    def sessions(self) -> SessionStore:
        return SessionStore(self.client, self.settings.session_idle_s, self.settings.session_max_s)

    def throttle(self) -> Throttle:
        s = self.settings
        return Throttle(self.client, s.login_failures, s.login_window_s, s.login_failures_all)

    @functools.cached_property
    def proxies(self) -> Networks:
        """The trusted proxies (``JOBQ_WEB_TRUSTED_PROXIES``), parsed once."""
        return self.settings.proxy_networks()

    def address(self, request: web.BaseRequest) -> str:
        """The client's address (``jqruntime.clientaddr``: ``X-Forwarded-For`` only from a trusted proxy)."""
        return request_address(request, self.proxies)

    def cron(self) -> CronStore:
        return CronStore(self.consul, self.sources.cron.kv_prefix)

    def history(self) -> HistoryStore | None:
        """The history tables, None until ``jobq history run`` made them (``JOBQ_HISTORY_PATH``)."""
        if self._history is None:
            root = self.sources.history.root
            if not root.is_dir():
                return None
            self._history = HistoryStore(root, QueryLimits.of(self.sources.history))
        return self._history

    def history_pool(self) -> HistoryPool:
        """Where this process runs its history queries (``JOBQ_HISTORY_QUERY_SLOTS``, half per token)."""
        if self._history_pool is None:
            slots = self.sources.history.query_slots
            self._history_pool = HistoryPool(slots, history_busy, setting="JOBQ_HISTORY_QUERY_SLOTS")
        return self._history_pool

    def archive_misses(self) -> MissCache:
        """(queue, id) pairs the history had no job for the last few seconds (``historypool.MISS_TTL_S``)."""
        if self._archive_misses is None:
            self._archive_misses = MissCache()
        return self._archive_misses

    async def in_history(self, request: web.Request, fn: Callable[[], _T]) -> _T:
        """``fn()`` (a read of :meth:`history`) on the history pool, in the share of the request's token."""
        token: str = request.get(TOKEN_NAME, "anonymous")
        return await self.history_pool().run(token, fn)

    async def close(self) -> None:
        if self._history_pool is not None:
            self._history_pool.close()
            self._history_pool = None
        if self._audit is not None:
            await self._audit.close(5.0)
            self._audit = None
        if self._producer is not None:
            await asyncio.to_thread(self._producer.close, 5.0)
            self._producer = None
        await close_consul(self._consul)
        self._consul = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
            self._engine = None


WEB = web.AppKey("web", Web)
