"""``jobq relay`` / ``python -m jqrelay``: campaign for every configured topic and relay the ones held.

Several relay processes share the topics: each campaigns for all of them, Consul gives each topic to
one, and a topic whose holder dies is taken over after its session TTL (plus lock-delay).
"""

from __future__ import annotations

import asyncio
from typing import Any

import consul.aio

from jqcore.errors import ConfigError
from jqcore.log import get_logger
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import CronSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqcore.topics import job_topics, schedule_topic
from jqengine import Engine, RedisClient, connect
from jqrelay.backpressure import GuardSignals, MemoryGuard
from jqrelay.budgets import BudgetSignals, QueueBudgets
from jqrelay.elector import Role, describe
from jqrelay.kept import restorer, switches_at_start
from jqrelay.settings import RelaySettings
from jqrelay.topic import RelaySignals, TopicRelay
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.health import Readiness, ping
from jqruntime.kafka import AsyncProducer
from jqruntime.lifecycle import Service, run_until_signal
from jqruntime.preflight import preflight
from jqruntime.stores.config import ConfigStore
from jqruntime.stores.presence import Presence, process_name
from jqruntime.tracing import setup_tracing

__all__ = ["RelayService", "run"]

log = get_logger("jqrelay")


class RelayService(Service):
    """Every configured topic's :class:`TopicRelay`, sharing one Redis client, one Consul client and one
    dead-letter producer, all made in ``start`` (``relays`` is empty until then; ``signals`` holds each
    topic's test signals, ``guard_signals`` the memory guard's, from construction on, so a test can enable
    them before starting)."""

    health_name = "relay"

    def __init__(
        self,
        settings: RelaySettings,
        kafka: KafkaSettings,
        redis: RedisSettings,
        consul_settings: ConsulSettings,
        routing: RoutingSettings,
        far: FarSettings,
        trace: TraceSettings,
        kept: CronSettings | None = None,
    ) -> None:
        """``kept``: where Consul keeps the queues' settings (``JOBQ_CRON_KV_PREFIX``; default: from the
        environment), restored before the first write to a queue Redis does not know (:mod:`jqrelay.kept`)."""
        super().__init__()
        self.settings, self.kafka, self.redis, self.consul_settings = settings, kafka, redis, consul_settings
        self.far, self.trace = far, trace
        self.kept = kept if kept is not None else load(CronSettings)
        self.topics = settings.topics or routing.topics()
        self.routing = routing
        if not self.topics:
            raise ConfigError(
                "the relay has no topic: set JOBQ_RELAY_TOPICS or JOBQ_ROUTES", code="topics_missing"
            )
        self.signals = {t: RelaySignals() for t in self.topics}
        self.guard_signals = GuardSignals()  # the memory guard's, shared by the topics
        self.budget_signals = BudgetSignals()  # the per-queue memory budgets', shared too
        self.budgets: QueueBudgets | None = None
        self.relays: list[TopicRelay] = []
        self._redis_client: RedisClient | None = None
        self._consul: consul.aio.Consul | None = None
        self._dead_producer: AsyncProducer | None = None
        self._engine: Engine | None = None
        self._presence: Presence | None = None

    @property
    def engine(self) -> Engine:
        """The relays' engine (once started)."""
        if self._engine is None:
            raise RuntimeError("the relay is not started")
        return self._engine

    async def _start(self) -> None:
        setup_tracing("jqrelay", self.trace)  # off unless JOBQ_TRACE_OTLP_ENDPOINT is set
        self._redis_client = client = connect(self.redis)
        await self._preflight(client)
        self._consul = consul = consul_client(self.consul_settings)
        self._dead_producer = dead = AsyncProducer(self.kafka)
        self._engine = engine = Engine(client)
        if not self.settings.shadow:
            kept = ConfigStore(consul, self.kept.kv_prefix)
            engine.before_new_queues = restorer(kept, engine)
            await switches_at_start(kept, engine)
        guard = MemoryGuard(
            client, self.settings.memory_slow_at, self.settings.memory_stop_at, signals=self.guard_signals
        )
        s, kafka, far = self.settings, self.kafka, self.far
        self.budgets = QueueBudgets(
            engine,
            guard,
            s.queue_memory_share,
            s.queue_memory_pool,
            signals=self.budget_signals,
            shared=client,
        )
        budgets = None if s.shadow else self.budgets
        routed = self.routing.topics()
        unchecked = [t for t in self.topics if t not in routed]
        if unchecked:  # JOBQ_RELAY_TOPICS beyond JOBQ_ROUTES: nothing says which queues belong there
            log.warning("no route names these topics: their queues are not checked", topics=unchecked)
        self.relays = []
        for t in self.topics:
            checked = self.routing if t in routed else None
            self.relays.append(
                TopicRelay(
                    t,
                    s,
                    kafka,
                    engine,
                    client,
                    consul,
                    dead,
                    guard,
                    far,
                    self.signals[t],
                    checked,
                    budgets,
                    self.kept.kv_prefix,
                )
            )
        for relay in self.relays:
            await relay.start()
        self._presence = Presence(client, "relay", process_name(s.holder), facts=self._facts)
        await self._presence.start()
        log.info("relay started", topics=self.topics, holder=s.holder, shadow=s.shadow)

    def _facts(self) -> dict[str, Any]:
        """What its presence record says (the dashboard's Workers page): the topics it campaigns for and
        those it holds, the records it wrote into Redis."""
        held = [r.topic for r in self.relays if r.elector.role is Role.LEADER]
        return {
            "kind": "relay",
            "topics": self.topics,
            "held": held,
            "busy": len(held),
            "slots": len(self.topics),
            "processed": sum(r.counts.get("written", 0) for r in self.relays),
            "state": "shadow" if self.settings.shadow else "running",
        }

    async def _preflight(self, client: RedisClient) -> None:
        """Redis must not evict; the relay owns its topics' ``.retry``/``.dead``/``.held`` and the schedule
        topic (created when missing, if allowed) and checks its job topics against the declaration."""
        specs = job_topics(self.topics)
        owns = [s for s in specs if s.role != "jobs"] + (
            [schedule_topic(self.far)] if self.far.enabled else []
        )
        uses = [s for s in specs if s.role == "jobs"]
        await preflight(
            redis=(client, self.redis), kafka=self.kafka, consul=self.consul_settings, owns=owns, uses=uses
        )

    async def _stop(self) -> None:
        if self._presence is not None:
            await self._presence.stop()
        for relay in self.relays:
            await relay.stop()
        if self._dead_producer is not None:
            await asyncio.to_thread(self._dead_producer.close, 5.0)
            self._dead_producer = None
        if self._redis_client is not None:
            await self._redis_client.aclose()
            self._redis_client = self._engine = None
        await close_consul(self._consul)
        self._consul = None

    async def _readiness(self, found: Readiness) -> None:
        """Ready: Redis and Kafka answer and every topic's lock is held or waited for (a relay whose
        Consul does not answer campaigns for nothing, one whose Kafka consumer fails relays nothing)."""
        if self._redis_client is not None:
            await ping("Redis", self._redis_client.ping(), found, code="redis_unreachable")
        if self._dead_producer is not None:
            producer = self._dead_producer
            for topic in self.topics:
                what = f"Kafka (metadata of {topic!r})"
                call = asyncio.to_thread(producer.partitions, topic, 1.5)
                if not await ping(what, call, found, code="kafka_unreachable"):
                    break
        for relay in self.relays:
            relay.check(found)
        found.facts["topics"] = {r.topic: r.elector.role.value for r in self.relays}

    def status(self) -> list[dict[str, Any]]:
        return [{**describe(r.elector), "topic": r.topic, "counts": dict(r.counts)} for r in self.relays]


def run(settings: RelaySettings | None = None) -> None:
    """Relay until a signal; the settings not given come from the environment."""
    settings = settings if settings is not None else load(RelaySettings)
    parts = (load(KafkaSettings), load(RedisSettings), load(ConsulSettings), load(RoutingSettings))
    far, trace = load(FarSettings), load(TraceSettings)

    async def main() -> None:
        service = RelayService(settings, *parts, far, trace)
        await run_until_signal(service, health_port=settings.metrics_port)

    asyncio.run(main())
