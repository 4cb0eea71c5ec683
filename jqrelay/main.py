"""``jobq relay`` / ``python -m jqrelay``: campaign for every configured topic and relay the ones held.

Several relay processes share the topics: each campaigns for all of them, Consul gives each topic to
one, and a topic whose holder dies is taken over after its session TTL (plus lock-delay).
"""

from __future__ import annotations

import asyncio
from typing import Any

from jqcore import metrics
from jqcore.consulconn import close_consul, consul_client
from jqcore.errors import ConfigError
from jqcore.kafka import AsyncProducer, ensure_topics
from jqcore.lifecycle import Service, run_until_signal
from jqcore.log import get_logger
from jqcore.redisconn import connect
from jqcore.routing import RoutingSettings
from jqcore.settings import ConsulSettings, FarSettings, KafkaSettings, RedisSettings, TraceSettings, load
from jqcore.state import Engine
from jqcore.tracing import setup_tracing
from jqrelay.backpressure import MemoryGuard
from jqrelay.elector import describe
from jqrelay.settings import RelaySettings
from jqrelay.topic import TopicRelay, dead_topic, retry_topic

__all__ = ["RelayService", "run"]

log = get_logger("jqrelay")


class RelayService(Service):
    def __init__(
        self,
        settings: RelaySettings,
        kafka: KafkaSettings,
        redis: RedisSettings,
        consul_settings: ConsulSettings,
        routing: RoutingSettings | None = None,
        far: FarSettings | None = None,
        trace: TraceSettings | None = None,
    ) -> None:
        super().__init__()
        self.settings, self.kafka = settings, kafka
        self.far = far or load(FarSettings)
        self.trace = trace or load(TraceSettings)
        self.topics = settings.topics or (routing or RoutingSettings()).topics()
        if not self.topics:
            raise ConfigError(
                "the relay has no topic: set JOBQ_RELAY_TOPICS or JOBQ_ROUTES", code="topics_missing"
            )
        self.redis_client = connect(redis)
        self.engine = Engine(self.redis_client)
        self.consul = consul_client(consul_settings)
        self.dead_producer = AsyncProducer(kafka)
        guard = MemoryGuard(self.redis_client, settings.memory_slow_at, settings.memory_stop_at)
        self.relays = [
            TopicRelay(t, settings, kafka, self.engine, self.consul, self.dead_producer, guard, self.far)
            for t in self.topics
        ]

    async def _start(self) -> None:
        setup_tracing("jqrelay", self.trace)  # off unless JOBQ_TRACE_OTLP_ENDPOINT is set
        extra = [name(t) for t in self.topics for name in (dead_topic, retry_topic)]
        await asyncio.to_thread(ensure_topics, self.kafka, extra)
        if self.far.enabled:
            await asyncio.to_thread(
                lambda: ensure_topics(
                    self.kafka, [self.far.topic], partitions=self.far.partitions, compacted=True
                )
            )
        for relay in self.relays:
            await relay.start()
        log.info(
            "relay started", topics=self.topics, holder=self.settings.holder, shadow=self.settings.shadow
        )

    async def _stop(self) -> None:
        for relay in self.relays:
            await relay.stop()
        await asyncio.to_thread(self.dead_producer.close, 5.0)
        await self.redis_client.aclose()
        await close_consul(self.consul)

    def status(self) -> list[dict[str, Any]]:
        return [{**describe(r.elector), "topic": r.topic, "counts": dict(r.counts)} for r in self.relays]


def run(settings: RelaySettings | None = None) -> None:
    settings = settings or load(RelaySettings)
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)

    async def main() -> None:
        service = RelayService(
            settings,
            load(KafkaSettings),
            load(RedisSettings),
            load(ConsulSettings),
            load(RoutingSettings),
            load(FarSettings),
        )
        await run_until_signal(service)

    asyncio.run(main())
