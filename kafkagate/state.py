"""What every gateway handler shares: settings, routing, the Kafka producers and the engine."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

import consul.aio
from aiohttp import web

from jqcore.aio import cancel_and_wait
from jqcore.errors import BackendUnavailable, JobqError
from jqcore.extras import MissingExtra
from jqcore.log import get_logger
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, FarSettings, HistorySettings, QueueBounds, RelayKeys
from jqcore.settings.servers import ConsulSettings
from jqengine import POOL_HOLDER, Engine, QueueConfig, RedisClient
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.historypool import HistoryPool, MissCache
from jqruntime.kafka import AsyncProducer, ProduceFailed, Record, schedule_key
from jqruntime.stores import presence, stages
from jqruntime.stores.config import ConfigStore
from jqruntime.stores.cron import CronStore
from jqruntime.stores.history import HistoryStore, QueryLimits
from jqruntime.stores.rates import RateStore
from kafkagate.limits import busy
from kafkagate.longpoll import LongPolls
from kafkagate.settings import GateSettings

__all__ = ["GATE", "PRODUCED_FLUSH_S", "READY_TTL_S", "Gate"]

log = get_logger("kafkagate.state")

PRODUCED_FLUSH_S = 0.5
METADATA_TIMEOUT_S = 5.0
TOPIC_TTL_S = 60.0
"""How long a topic's existence and partition count are reused before Kafka is asked again."""
PARTITIONS_RECHECK_S = 5.0
"""A partition beyond the cached count is looked up again if the count is older than this (a topic may
have grown); a stream of bad partitions therefore costs at most one metadata request per topic per 5 s."""
QUEUE_CONFIG_TIMEOUT_S = 0.5
"""Longest an enqueue waits for Redis to give a queue's configuration; beyond it the check is skipped."""
QUEUE_CONFIG_TTL_S = 5.0
"""How long the gateway reuses a queue's configuration read from Redis (exclusive queues refuse jobs
without an exclusivity value, blocked queues refuse every job, ``id_from``); the gateway that changes it
forgets it at once."""
QUEUE_CONFIG_CACHE_MAX = 10_000
WORKER_SEEN_EVERY_S = 5.0
WORKER_NAMES_PER_TOKEN = 100
"""Distinct HTTP worker names one token has noted in the presence set per gateway process at once: each
is a member of a shared Redis sorted set for an hour (``jqruntime.stores.presence.seen``) and a row the
dashboard reads, and a claim names any worker it likes (review M7)."""
WORKER_NAME_FORGET_S = presence.FORGET_S
"""A name not seen for this long no longer counts in its token's names (the presence set forgets it too)."""
WORKER_QUEUES_PER_NAME = 32
"""Queues one HTTP worker name's presence record notes per gateway process (a silent worker is judged per
queue it claims from); a claim from one more still works, unnoted."""
GRAPH_KEY_CHECK_S = 10.0
"""How often a gateway checks the graph key it signs with against Consul's (at its next graph)."""
READY_TTL_S = 1.0
"""How long ``/readyz``'s Kafka answer is reused: probes and anyone else asking cost at most one metadata
look-up per routed topic per second per process, however often they ask."""
READY_LOOKUP_S = 2.0
"""How long one readiness look-up of a topic's metadata may take."""


@dataclass(slots=True)
class _Seen:
    """An HTTP worker name as this gateway process noted it in the presence set."""

    at: float = float("-inf")
    """When its heartbeat was last noted (the loop's clock)."""
    queues: dict[str, float] = field(default_factory=dict)
    """Queue it claims from → when a claim from it was last noted (-inf: only that it serves it)."""


@dataclass
class Gate:
    settings: GateSettings
    routing: RoutingSettings
    kafka: KafkaSettings
    engine: Engine
    redis_client: RedisClient
    """The engine's Redis, for the keys the gateway keeps beside the queues (stage counters, idempotency
    records, HTTP workers' presence, push-dispatch configurations)."""
    consul_settings: ConsulSettings
    cron_settings: CronSettings
    far: FarSettings
    history_settings: HistorySettings
    long_polls: LongPolls
    queue_bounds: QueueBounds = field(default_factory=lambda: load(QueueBounds))
    """What a queue's configuration may ask for (``JOBQ_QUEUE_MAX_*``)."""
    relay_keys: RelayKeys = field(default_factory=RelayKeys)
    """Where the relays watch the queues' rate limits (``JOBQ_RELAY_KV_PREFIX``)."""
    _consul: consul.aio.Consul | None = None
    _history: HistoryStore | None = None
    _history_off: bool = False
    _workers_seen: dict[str, dict[str, _Seen]] = field(default_factory=dict)
    """token → worker name → what was noted of it and when."""
    _workers_full: set[str] = field(default_factory=set)
    """Tokens whose names are over the cap (logged once until they have room again)."""
    _producers: dict[str, AsyncProducer] = field(default_factory=dict)
    _topics: dict[str, tuple[float, int]] = field(default_factory=dict)
    """topic → (when seen, partition count)."""
    _queue_configs: dict[str, tuple[float, QueueConfig | None]] = field(default_factory=dict)
    _config_lookups: dict[str, asyncio.Future[QueueConfig | None]] = field(default_factory=dict)
    _produced: dict[str, int] = field(default_factory=dict)
    _flusher: asyncio.Task[None] | None = None
    _graph_key: tuple[float, bytes] | None = None
    """When the graph key was last checked against Consul's, and the key."""

    async def report_node(self, queue: str, job_id: str) -> None:
        """The job ended here: when it is a graph node's (its id ``<graph>:<node>[@run]``), hand its outcome
        to the graph now, as a Python pool does after its write (the next nodes are released before the
        answer). A failure leaves the outcome in the queue's ``gdone`` for the scheduler's repair."""
        if ":" not in job_id:  # no graph node's job: skip the look-up
            return
        try:
            await self.engine.graphs.report_finished(queue, [job_id])
        except Exception as exc:
            log.warning("graph report left to the scheduler", job_id=job_id, error=repr(exc))

    _history_pool: HistoryPool | None = None
    _archive_misses: MissCache | None = None
    _ready: tuple[float, dict[str, str]] | None = None
    """When readiness was last learnt, and each routed topic's problem (its error code) then."""
    _ready_lookup: asyncio.Task[dict[str, str]] | None = None

    def count_produced(self, topic: str, n: int) -> None:
        """Add to the shared ``produced`` counter in Redis: summed here and written every
        :data:`PRODUCED_FLUSH_S` (one command per topic, not one per request); kept for the next flush
        while Redis is away — enqueues never depend on Redis."""
        self._produced[topic] = self._produced.get(topic, 0) + n
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="gate:produced")

    async def _flush_loop(self) -> None:
        POOL_HOLDER.set(None)  # made inside the first enqueue's request: its writes are nobody's share
        while True:
            await asyncio.sleep(PRODUCED_FLUSH_S)
            await self._flush()

    async def _flush(self) -> None:
        pending, self._produced = self._produced, {}
        for topic, n in pending.items():
            try:
                await stages.add(self.redis_client, topic, {"produced": n})
            except Exception:
                self._produced[topic] = self._produced.get(topic, 0) + n

    async def check_topic(self, topic: str, max_age_s: float = TOPIC_TTL_S) -> int:
        """Refuse fast (TopicMissing) when a routed topic does not exist, instead of letting the write
        wait out its delivery timeout; returns its partition count (partitions are ``0..n-1``). What was
        learnt in the last ``max_age_s`` is not looked up again."""
        seen = self._topics.get(topic)
        if seen is not None and time.monotonic() - seen[0] < max_age_s:
            return seen[1]
        lookup = asyncio.to_thread(self.producer("all").partitions, topic, METADATA_TIMEOUT_S)
        try:  # librdkafka honours its timeout; this bound only guards the request against a stuck call
            async with asyncio.timeout(METADATA_TIMEOUT_S + 2):
                partitions = await lookup
        except TimeoutError:
            raise ProduceFailed(f"no metadata for {topic!r} from Kafka in time") from None
        self._topics[topic] = (time.monotonic(), len(partitions))
        return len(partitions)

    async def partition_count(self, topic: str, wanted: Collection[int]) -> int:
        """The topic's partition count for checking explicit ``wanted`` partitions: a partition beyond
        the cached count makes a fresh lookup (at most every :data:`PARTITIONS_RECHECK_S`)."""
        count = await self.check_topic(topic)
        if any(p >= count for p in wanted):
            count = await self.check_topic(topic, PARTITIONS_RECHECK_S)
        return count

    async def queue_config(self, queue: str) -> QueueConfig | None:
        """The queue's configuration, reused for :data:`QUEUE_CONFIG_TTL_S`; None when Redis did
        not answer within :data:`QUEUE_CONFIG_TIMEOUT_S` (the caller skips its check: enqueues never
        depend on Redis). A failure is remembered like an answer, so an outage costs one wait per queue
        and TTL, not one per request. One look-up per queue at a time: concurrent requests share it, and
        once a queue was looked up, a request past the TTL is answered from the last one while the next is
        under way (only a queue's first enqueue waits for Redis)."""
        now = time.monotonic()
        cached = self._queue_configs.get(queue)
        if cached is not None and now - cached[0] < QUEUE_CONFIG_TTL_S:
            return cached[1]
        lookup = self._config_lookups.get(queue)
        if lookup is None:
            lookup = self._config_lookups[queue] = asyncio.ensure_future(self._look_up_config(queue))
            lookup.add_done_callback(lambda _: self._config_lookups.pop(queue, None))
        if cached is not None:
            return cached[1]
        return await asyncio.shield(lookup)

    async def _look_up_config(self, queue: str) -> QueueConfig | None:
        config: QueueConfig | None = None
        try:
            async with asyncio.timeout(QUEUE_CONFIG_TIMEOUT_S):
                config = await self.engine.reads.queue_config(queue)
        except Exception as exc:  # Redis down, slow or refusing: skip the check, never the enqueue
            log.warning("queue configuration unavailable; check skipped", queue=queue, error=repr(exc))
        if len(self._queue_configs) >= QUEUE_CONFIG_CACHE_MAX:  # queue names come from requests
            self._queue_configs.clear()
        self._queue_configs[queue] = (time.monotonic(), config)
        return config

    async def saw_worker(
        self, name: str, token: str, queue: str, *, claimed: bool = False, filtered: bool = False
    ) -> None:
        """An HTTP worker claimed from ``queue`` here with the token named ``token`` (``claimed``: and got
        jobs): counted in ``jobq status`` as alive, and its presence record notes the queue it serves and
        its last claim from it (:func:`jqruntime.stores.presence.seen`: a silent worker is judged by them).
        Noted at most every :data:`WORKER_SEEN_EVERY_S` per name, and per queue for a claim; never fails
        the claim. Names come from requests, so one token notes at most :data:`WORKER_NAMES_PER_TOKEN` of
        them per process at once (a name silent for :data:`WORKER_NAME_FORGET_S` frees its place), each
        with at most :data:`WORKER_QUEUES_PER_NAME` queues; past either the claim still works, unnoted,
        and the names' cap is logged once until the token has room again."""
        now = time.monotonic()
        names = self._workers_seen.setdefault(token, {})
        seen = names.get(name)
        if seen is None:
            if len(names) >= WORKER_NAMES_PER_TOKEN:
                for old in [n for n, s in names.items() if now - s.at >= WORKER_NAME_FORGET_S]:
                    del names[old]
                if len(names) >= WORKER_NAMES_PER_TOKEN:
                    if token not in self._workers_full:
                        self._workers_full.add(token)
                        log.warning(
                            "http worker names of a token over the cap; further names are not noted",
                            token=token,
                            cap=WORKER_NAMES_PER_TOKEN,
                            worker=name,
                        )
                    return
            self._workers_full.discard(token)
            seen = names[name] = _Seen()
        last = seen.queues.get(queue)
        if last is None:
            note = len(seen.queues) < WORKER_QUEUES_PER_NAME  # the first claim from it: serving it from now
        else:
            note = claimed and now - last >= WORKER_SEEN_EVERY_S
        if not note and now - seen.at < WORKER_SEEN_EVERY_S:
            return
        seen.at = now
        if note:
            seen.queues[queue] = now if claimed else float("-inf")
        try:
            await presence.seen(
                self.redis_client,
                "http-worker",
                name,
                queue if note else None,
                claimed=claimed,
                filtered=filtered,
            )
        except Exception as exc:  # Redis trouble shows on the claim itself
            log.debug("http worker presence not noted", worker=name, error=repr(exc))

    def forget_queue_config(self, queue: str) -> None:
        """Drop the cached configuration (this gateway just changed it)."""
        self._queue_configs.pop(queue, None)

    def producer(self, acks: Literal["all", "leader"]) -> AsyncProducer:
        """One idempotent ``acks=all`` producer, and a ``leader`` one created when a queue first needs it."""
        if acks not in self._producers:
            self._producers[acks] = AsyncProducer(
                self.kafka,
                acks=acks,
                delivery_timeout_ms=self.settings.produce_timeout_ms,
                extra=self.settings.produce_options(),
            )
        return self._producers[acks]

    async def unschedule_far(self, queue: str, *job_ids: str) -> None:
        """Tombstone far-future jobs in the schedule topic (Kafka confirms them all, ``acks=all``)."""
        topic = self.far.topic
        await self.producer("all").produce_many(
            [Record(topic, None, schedule_key(queue, i)) for i in job_ids]
        )

    def history(self) -> HistoryStore | None:
        """The history tables (the archive ``GET`` falls back to, the job search), None until
        ``jobq history run`` made them (``JOBQ_HISTORY_PATH``)."""
        if self._history is None:
            root = self.history_settings.root
            if not root.is_dir() or self._history_off:
                return None
            try:
                self._history = HistoryStore(root, QueryLimits.of(self.history_settings))
            except MissingExtra as exc:  # the tables are there, duckdb is not: no archive, said once
                log.warning("history tables present but not readable; archive fallback off", error=str(exc))
                self._history_off = True
                return None
        return self._history

    def history_pool(self) -> HistoryPool:
        """Where this process runs its history queries (``JOBQ_HISTORY_QUERY_SLOTS`` at once, half of them
        per token; past that a 429 ``gateway_busy``)."""
        if self._history_pool is None:
            self._history_pool = HistoryPool(
                self.history_settings.query_slots, busy, setting="JOBQ_HISTORY_QUERY_SLOTS"
            )
        return self._history_pool

    def archive_misses(self) -> MissCache:
        """(queue, id) pairs the history had no job for the last few seconds (``historypool.MISS_TTL_S``)."""
        if self._archive_misses is None:
            self._archive_misses = MissCache()
        return self._archive_misses

    async def readiness(self) -> dict[str, str]:
        """Each routed topic Kafka could not show (topic → error code: ``topic_missing``,
        ``kafka_unavailable``); empty when ready. Learnt at most every :data:`READY_TTL_S` (concurrent
        askers share one look-up), on the default executor, never the history's; the error text of Kafka's
        client is logged, not returned."""
        now = time.monotonic()
        if self._ready is not None and now - self._ready[0] < READY_TTL_S:
            return self._ready[1]
        if self._ready_lookup is None or self._ready_lookup.done():
            self._ready_lookup = asyncio.create_task(self._look_ready(), name="gate:readiness")
        return await asyncio.shield(self._ready_lookup)

    async def _look_ready(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        producer = self.producer("all")
        for topic in self.routing.topics():
            try:
                await asyncio.to_thread(producer.partitions, topic, READY_LOOKUP_S)
            except JobqError as exc:
                log.warning("topic not ready", topic=topic, code=exc.code, error=exc.message)
                problems[topic] = exc.code
        self._ready = (time.monotonic(), problems)
        return problems

    def _consul_client(self) -> consul.aio.Consul:
        """The Consul client, made on first use (only the cron and configuration routes need it)."""
        if self._consul is None:
            self._consul = consul_client(self.consul_settings)
        return self._consul

    def cron(self) -> CronStore:
        """The cron schedules in Consul."""
        return CronStore(self._consul_client(), self.cron_settings.kv_prefix)

    async def graph_key(self) -> bytes:
        """The deployment's graph key (``jqcore.admission``), read from Consul on first use and checked
        against it again every :data:`GRAPH_KEY_CHECK_S`: put back if Consul lost it, taken from there if
        it was made anew meanwhile. While Consul does not answer, the key at hand signs."""
        now = time.monotonic()
        if self._graph_key is None:
            self._graph_key = (now, await self.configs().graph_key())
        elif now - self._graph_key[0] >= GRAPH_KEY_CHECK_S:
            key = self._graph_key[1]
            self._graph_key = (now, key)  # one check per period, however many graphs wait on it
            try:
                self._graph_key = (now, await self.configs().graph_key(known=key))
            except BackendUnavailable as exc:
                log.warning("graph key not checked against Consul's", error=exc.message)
        return self._graph_key[1]

    def rates(self) -> RateStore:
        """The queues' live rate limits in Consul (:mod:`jqruntime.stores.rates`)."""
        return RateStore(self._consul_client(), self.relay_keys)

    def configs(self) -> ConfigStore:
        """The durable copy of the queues' configurations and the kinds' options in Consul
        (:mod:`jqruntime.stores.config`)."""
        return ConfigStore(self._consul_client(), self.cron_settings.kv_prefix)

    async def close(self) -> None:
        await self.long_polls.close()
        await cancel_and_wait(self._ready_lookup)
        if self._history_pool is not None:
            self._history_pool.close()
        if self._consul is not None:
            await close_consul(self._consul)
            self._consul = None
        # repeated cancels: redis-py may turn one into an error the flush loop carries on after (seen: a
        # gateway whose stop waited forever on this loop after a broker pause)
        await cancel_and_wait(self._flusher)
        self._flusher = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self._flush()
        for p in self._producers.values():
            await asyncio.to_thread(p.close, 5.0)
        self._producers.clear()


GATE = web.AppKey("gate", Gate)
