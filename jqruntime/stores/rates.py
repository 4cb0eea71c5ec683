"""Queues' live rate limits in Consul KV (``<JOBQ_RELAY_KV_PREFIX>/queue-rates/<queue>``, texts:
:mod:`jqcore.rates`): written by ``PATCH /v1/queues/{queue}`` (``jobq queue rate``), read back by
``GET /v1/queues/{queue}``; every topic relay watches the folder and applies a change within one Consul
answer (``jqrelay.limits``). Unlimited is the key deleted."""

from __future__ import annotations

from typing import Any

import consul.aio

from jqcore.errors import BackendUnavailable
from jqcore.rates import Rate
from jqcore.settings.pipeline import RelayKeys
from jqruntime.stores.cron import CONSUL_ERRORS

__all__ = ["RateStore"]


class RateStore:
    def __init__(self, client: consul.aio.Consul, keys: RelayKeys) -> None:
        self.client, self.keys = client, keys

    async def _call(self, what: str, call: Any) -> Any:
        try:
            return await call
        except CONSUL_ERRORS as exc:
            raise BackendUnavailable(f"Consul {what}: {exc!r}", code="consul_unavailable") from exc

    async def get(self, queue: str) -> Rate:
        """The queue's limit as its key says (a text no relay would take reads as unlimited, as the relays
        keep their previous limit and log it)."""
        _, entry = await self._call("get", self.client.kv.get(self.keys.queue_rate_key(queue)))
        raw = (entry or {}).get("Value") or b""
        try:
            return Rate.parse(raw.decode() if isinstance(raw, bytes) else str(raw))
        except ValueError:
            return Rate()

    async def put(self, queue: str, rate: Rate) -> None:
        """Keep ``rate`` as the queue's limit (unlimited: the key deleted)."""
        key = self.keys.queue_rate_key(queue)
        if rate.text:
            await self._call("put", self.client.kv.put(key, rate.text))
        else:
            await self._call("delete", self.client.kv.delete(key))
