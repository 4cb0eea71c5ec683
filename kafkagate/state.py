"""What every gateway handler shares: settings, routing, the Kafka producers and the engine."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from jqcore import stages
from jqcore.kafka import AsyncProducer, ProduceFailed
from jqcore.routing import RoutingSettings
from jqcore.settings import KafkaSettings
from jqcore.state import Engine
from kafkagate.settings import GateSettings

__all__ = ["GATE", "PRODUCED_FLUSH_S", "Gate"]

PRODUCED_FLUSH_S = 0.5
METADATA_TIMEOUT_S = 5.0


@dataclass
class Gate:
    settings: GateSettings
    routing: RoutingSettings
    kafka: KafkaSettings
    engine: Engine
    _producers: dict[str, AsyncProducer] = field(default_factory=dict)
    _topics_seen: dict[str, float] = field(default_factory=dict)
    _produced: dict[str, int] = field(default_factory=dict)
    _flusher: asyncio.Task[None] | None = None

    def count_produced(self, topic: str, n: int) -> None:
        """Add to the shared ``produced`` counter in Redis: summed here and written every
        :data:`PRODUCED_FLUSH_S` (one command per topic, not one per request); kept for the next flush
        while Redis is away — enqueues never depend on Redis."""
        self._produced[topic] = self._produced.get(topic, 0) + n
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="gate:produced")

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(PRODUCED_FLUSH_S)
            await self._flush()

    async def _flush(self) -> None:
        pending, self._produced = self._produced, {}
        for topic, n in pending.items():
            try:
                await stages.add(self.engine.client, topic, {"produced": n})
            except Exception:
                self._produced[topic] = self._produced.get(topic, 0) + n

    async def check_topic(self, topic: str) -> None:
        """Refuse fast (TopicMissing) when a routed topic does not exist, instead of letting the write
        wait out its delivery timeout. A topic seen in the last minute is not looked up again."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._topics_seen.get(topic, -1e9) < 60:
            return
        lookup = asyncio.to_thread(self.producer("all").partitions, topic, METADATA_TIMEOUT_S)
        try:  # librdkafka honours its timeout; this bound only guards the request against a stuck call
            await asyncio.wait_for(lookup, METADATA_TIMEOUT_S + 2)
        except TimeoutError:
            raise ProduceFailed(f"no metadata for {topic!r} from Kafka in time") from None
        self._topics_seen[topic] = loop.time()

    def producer(self, acks: Literal["all", "leader"]) -> AsyncProducer:
        """One idempotent ``acks=all`` producer, and a ``leader`` one created when a queue first needs it."""
        if acks not in self._producers:
            self._producers[acks] = AsyncProducer(
                self.kafka, acks=acks, delivery_timeout_ms=self.settings.produce_timeout_ms
            )
        return self._producers[acks]

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._flush(), 2.0)
        for p in self._producers.values():
            await asyncio.to_thread(p.close, 5.0)
        self._producers.clear()


GATE = web.AppKey("gate", Gate)
