"""Relaying one topic from Kafka into Redis while this process holds the topic's lock.

Per term (see :mod:`jqrelay.elector`):

1. assign **all** partitions at the group's committed offsets (manual assignment: no group rebalances;
   the Consul lock decides who reads);
2. raise the term's fence in every known queue before the first write;
3. read the topic's holding lane back from Kafka and start its drain (:mod:`jqrelay.lane`);
4. loop: wait for Redis memory room → consume a batch (capped by the topic's live rate limit) → plan it:
   the records of queues that are held, paused, over their rate (:mod:`jqrelay.limits`) or over their
   memory budgets (:mod:`jqrelay.budgets`) step aside → wait for the topic's rate limiter → check the
   term is still trusted → write the rest with one engine call (fenced; Redis errors are retried with
   backoff forever, nothing is committed meanwhile) → wait until the masters written hold the batch on
   their replicas (``WAIT``; else write it again) → send malformed or refused records to
   ``<topic>.dead`` with the reason in headers (confirmed by Kafka) → produce the records that step aside
   to ``<topic>.held`` (confirmed by Kafka) and check the topic fence → commit each partition's offset
   only now, after Redis and Kafka accepted everything up to it (batches that set nothing aside are
   committed together, at most every :data:`COMMIT_EVERY_S`).

A refused fence ends the term at once (someone newer writes). Record values are handed to Redis as the
bytes Kafka holds; nothing is re-encoded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import consul.aio
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from tenacity import AsyncRetrying, retry_if_exception, retry_if_exception_type, wait_exponential

from jqcore import metrics
from jqcore.admission import Admission
from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.envelope import Envelope
from jqcore.errors import BackendUnavailable
from jqcore.log import get_logger, kafka_logging
from jqcore.routing import RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import FarSettings
from jqcore.testsignal import crash_point
from jqcore.topics import dead_topic, held_topic, retry_topic
from jqengine import Engine, EnqueueResult, FenceRejected, RedisClient, recording_writes
from jqrelay.backpressure import MemoryGuard
from jqrelay.batch import (
    Batch,
    RelaySignals,
    ReplicasBehind,
    TermEnded,
    ends_batch,
    held_retries,
    holds_batch,
    parse_batch,
    retriable,
    set_aside,
)
from jqrelay.budgets import QueueBudgets
from jqrelay.elector import Elector, ElectorConfig, Role, Term
from jqrelay.lag import report_lag
from jqrelay.lane import Lane, topic_fence
from jqrelay.limits import QueueRateLimits, RateLimit
from jqrelay.settings import RelaySettings
from jqruntime import tracing
from jqruntime.health import Readiness
from jqruntime.kafka import AsyncProducer, committed_offsets, schedule_record
from jqruntime.lifecycle import Service
from jqruntime.stores import stages
from jqruntime.stores.config import ConfigStore

__all__ = ["RelaySignals", "TopicRelay", "dead_topic", "retry_topic"]

log = get_logger("jqrelay.topic")

STOP_TIMEOUT_S = 15.0
IDLE_POLL_MIN_S, IDLE_POLL_MAX_S = 0.001, 0.01
"""Pause between non-blocking consume calls while nothing arrives (librdkafka prefetches meanwhile):
1 ms right after records came (a busy topic waits ~0.5 ms on average), growing by half per empty poll
to 10 ms on an idle one (≈100 cheap calls/s)."""
COMMIT_EVERY_S = 0.05
"""Least seconds between two commits of the topic's offsets (and saves of its stage counts) while batches
without aside records follow each other: at a trickle a batch holds a job or two, and a commit and a
Redis call per batch cost more than the batch. A commit waits at most this long (plus one idle poll);
what a failover re-reads meanwhile is written once (deduplicated). A batch that set records aside is
committed at once (the drain may take them only then)."""
GRAPH_KEYS_KEPT = 4
"""Graph keys a relay verifies signatures with: the one in Consul and the last ones it held before."""


@dataclasses.dataclass
class Uncommitted:
    """A term's offsets written and confirmed but not committed yet: each partition's last, since the
    commit sent ``at`` (monotonic seconds)."""

    at: float
    offsets: dict[int, int] = dataclasses.field(default_factory=dict)


class TopicRelay(Service):
    def __init__(
        self,
        topic: str,
        settings: RelaySettings,
        kafka: KafkaSettings,
        engine: Engine,
        redis: RedisClient,
        consul_client: consul.aio.Consul,
        dead_producer: AsyncProducer,
        guard: MemoryGuard,
        far: FarSettings,
        signals: RelaySignals | None = None,
        routing: RoutingSettings | None = None,
        budgets: QueueBudgets | None = None,
        kept_prefix: str = "jobq",
    ) -> None:
        super().__init__()
        self.budgets = budgets
        """Per-queue memory budgets, shared by the process's topics (None: only the global guard)."""
        self._routing = routing
        """Checks that each envelope's queue is routed to this topic (None: a topic no route names)."""
        self._graph_keys: tuple[bytes, ...] = ()
        """The deployment's graph key (``jqcore.admission``) first, then those this process held before
        it (a record signed with one before it was made anew still enters): learnt before the first term
        (a standby holds it too), read again at each term's start and when a signed graph does not
        verify. A key Consul lost (an agent that came back empty) is put back, never made anew."""
        self._admitting: Admission | None = None
        self._keys = ConfigStore(consul_client, kept_prefix)
        self.topic, self.settings, self.kafka, self.engine = topic, settings, kafka, engine
        self.redis = redis
        """The engine's Redis, for the stage counters (:mod:`jqruntime.stores.stages`)."""
        self.far = far
        self.dead_producer, self.guard = dead_producer, guard
        self.elector = Elector(
            consul_client,
            settings.lock_key(topic),
            settings.holder,
            ElectorConfig(ttl_s=settings.session_ttl_s, lock_delay_s=settings.lock_delay_s),
        )
        self.replicas = engine.replica_wait(settings.wait_replicas, settings.wait_replicas_ms)
        self.limit = RateLimit(consul_client, settings.rate_key(topic), topic)
        self.queue_limits = QueueRateLimits(consul_client, settings.queue_rates_folder(), topic)
        self.counts: dict[str, int] = {}
        self.lane_counts: dict[str, int] = {}
        """The drain's stage counts (records read from the holding lane and what became of them)."""
        self.lane: Lane | None = None
        """The current term's holding lane (None between terms and in shadow mode)."""
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._unsaved: dict[str, dict[str, int]] = {}
        self.signals = signals if signals is not None else RelaySignals()
        self.limit.signals, self.queue_limits.signals = self.signals.limit, self.signals.queue_limits
        self._committed: dict[int, int] = {}
        self.error: str | None = None
        """Why the last term's relay loop failed (Kafka or Redis trouble), until a consumer is made again."""

    # ---- lifecycle ------------------------------------------------------------------------------
    async def _start(self) -> None:
        metrics.RELAY_LEADER.labels(self.topic).set(0)  # standbys report 0, so "nobody leads" is visible
        await self.limit.start()
        await self.queue_limits.start()
        await self.elector.start()
        self._task = asyncio.create_task(self._run(), name=f"relay:{self.topic}")

    async def _stop(self) -> None:
        """Cooperative: the loop sees the flag within one idle poll (or one batch) and closes its consumer.
        Cancelling is only the fallback: a cancel racing a timeout inside ``asyncio.wait_for`` can be
        swallowed on Python 3.11, which left a relay unable to stop."""
        self._stopping = True
        if self._task is not None:
            done, _ = await asyncio.wait([self._task], timeout=STOP_TIMEOUT_S)
            if not done:
                log.warning("relay loop did not stop in time; cancelling", topic=self.topic)
                self._task.cancel()
                await asyncio.wait([self._task], timeout=STOP_TIMEOUT_S)
        await self.elector.stop()
        await self.queue_limits.stop()
        await self.limit.stop()

    def check(self, found: Readiness) -> None:
        """Add this topic's problems: its lock neither held nor waited for (Consul does not answer), or
        its term's relay loop failing while it holds the lock (Kafka or Redis trouble)."""
        role, error = self.elector.role, self.elector.error
        if role is Role.CANDIDATE and error is not None:
            found.add("lock_unavailable", f"{self.topic}: the lock is neither held nor waited for ({error})")
        if role is Role.LEADER and self.error is not None:
            found.add("relay_failing", f"{self.topic}: the lock is held but relaying fails ({self.error})")

    @property
    def stopping(self) -> bool:
        return self._stopping

    def count(self, stage: str, n: int = 1, *, lane: bool = False) -> None:
        """Count ``n`` records at ``stage``: the topic's, or with ``lane`` its holding lane's
        (``<topic>.held``: what the drain read and what became of it)."""
        if n:
            topic, counts = (held_topic(self.topic), self.lane_counts) if lane else (self.topic, self.counts)
            counts[stage] = counts.get(stage, 0) + n
            unsaved = self._unsaved.setdefault(topic, {})
            unsaved[stage] = unsaved.get(stage, 0) + n
            metrics.child(metrics.RELAY_RECORDS, topic, stage).inc(n)

    async def save_counts(self) -> None:
        """Add the stage counts since the last save to the shared ones in Redis (kept for the next try on
        failure)."""
        for topic in list(self._unsaved):
            unsaved = self._unsaved.pop(topic, None)  # taken before the await: the drain saves too
            if not unsaved:
                continue
            try:
                await stages.add(self.redis, topic, unsaved)
            except Exception as exc:
                log.warning("stage counters not saved yet", topic=topic, error=repr(exc))
                again = self._unsaved.setdefault(topic, {})
                for stage, n in unsaved.items():
                    again[stage] = again.get(stage, 0) + n
                return

    async def _run(self) -> None:
        while not self._stopping:
            if not self._graph_keys:
                await self._first_graph_key()
            if await self._wait_role(Role.LEADER) is not Role.LEADER:
                continue
            term = self.elector.trusted_term()
            if term is None:  # the term ended between the wake-up and now
                continue
            metrics.RELAY_LEADER.labels(self.topic).set(1)
            log.info("relaying", topic=self.topic, fence=term.fence, holder=self.settings.holder)
            try:
                await self._lead(term)
            except FenceRejected as exc:
                log.warning("fence refused; stepping down", topic=self.topic, error=str(exc))
                self.elector.step_down()
            except TermEnded:
                if self.stopping:
                    log.info("stopped mid-batch; nothing committed for it", topic=self.topic)
                else:
                    log.warning("term ended mid-batch; nothing committed", topic=self.topic)
            except Exception as exc:  # Kafka trouble: drop this term's consumer, start over if still leader
                log.error("relay loop failed", topic=self.topic, error=repr(exc))
                self.error = repr(exc)
                self.signals.stalled.signal("loop")
                await asyncio.sleep(1)
            finally:
                metrics.RELAY_LEADER.labels(self.topic).set(0)
            if self.elector.trusted_term() == term:
                continue
            await self._wait_role(Role.LOST, Role.CANDIDATE, Role.WAITING, Role.STOPPED)

    async def _wait_role(self, *roles: Role) -> Role | None:
        """The elector's role once it is one of ``roles`` — or None after a second (to look at the stop
        flag again). Short waits, never an unbounded one, so a stop is always noticed."""
        try:
            return await self.elector.wait_role(*roles, timeout_s=1.0)
        except TimeoutError:
            return None

    def trusted(self, term: Term) -> bool:
        return not self._stopping and self.elector.trusted_term() == term

    # ---- one term -------------------------------------------------------------------------------
    def _consumer(self) -> Consumer:
        group = f"{self.settings.group_prefix}.{self.topic}" + (".shadow" if self.settings.shadow else "")
        conf: dict[str, Any] = {
            **self.kafka.client_config(),
            **kafka_logging(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
            "on_commit": self._on_commit,
        }
        consumer = Consumer(conf)
        md = consumer.list_topics(self.topic, timeout=10)
        parts = sorted(md.topics[self.topic].partitions) if self.topic in md.topics else []
        if not parts:
            consumer.close()
            raise BackendUnavailable(f"topic {self.topic!r} has no partitions (does it exist?)")
        committed = committed_offsets(consumer, [TopicPartition(self.topic, p) for p in parts])
        self._committed = {tp.partition: max(tp.offset, 0) for tp in committed}
        consumer.assign(committed)  # OFFSET_INVALID (nothing committed) falls back to auto.offset.reset
        return consumer

    async def _lead(self, term: Term) -> None:
        # The consumer is only touched from the event loop, with non-blocking calls: librdkafka fetches in
        # its own threads, ``consume(n, 0)`` takes what has arrived, and commits are asynchronous (their
        # reports arrive through later consume calls; a lost commit only means a re-read, deduplicated).
        # Blocking consume() calls in worker threads were seen to hang for good on confluent-kafka 2.16.
        consumer = await asyncio.to_thread(self._consumer)  # metadata and offsets block: not on the loop
        self.error = None
        lag = asyncio.create_task(
            report_lag(self.topic, consumer, self._committed), name=f"relay-lag:{self.topic}"
        )
        lane = None if self.settings.shadow else Lane(self, term)
        uncommitted = Uncommitted(at=time.monotonic())
        try:
            await self._learn_graph_key()
            if lane is not None:
                await self.engine.raise_fence(
                    await self.engine.reads.queues(), fence=term.fence, source=self.topic
                )
                await topic_fence(self.redis, self.topic, term.fence)
                await lane.start()
                self.lane = lane
            idle = IDLE_POLL_MIN_S
            while self.trusted(term):
                if lane is not None:
                    lane.check()
                if lane is not None and not await self.guard.wait_for_room(
                    lambda: self.trusted(term) and not self.stopping, self.topic
                ):
                    break
                msgs = consumer.consume(self.limit.batch_cap(self.settings.batch), 0)
                if not msgs:
                    await self._settle(consumer, uncommitted, lane)
                    await asyncio.sleep(idle)
                    idle = min(idle * 1.5, IDLE_POLL_MAX_S)
                    continue
                idle = IDLE_POLL_MIN_S
                batch = await self.parse(msgs)
                if lane is None:
                    self.count("shadow", len(batch.envelopes))
                else:
                    await self._relay(batch, term, lane)
                if not self.trusted(term):
                    raise TermEnded
                uncommitted.offsets.update(batch.offsets)
                await self._settle(consumer, uncommitted, lane, now=lane is None or lane.pending)
                self._signal_batch()
        finally:
            await self._settle_last(consumer, uncommitted, lane, term)
            self.lane = None
            if lane is not None:
                await lane.stop()
            await cancel_and_wait(lag)
            consumer.close()

    async def _settle(
        self, consumer: Consumer, uncommitted: Uncommitted, lane: Lane | None, *, now: bool = False
    ) -> None:
        """With ``now`` or :data:`COMMIT_EVERY_S` after the last commit: commit the offsets past the
        batches written since (asynchronously: a lost commit only means a re-read), let the lane's drain
        take what they set aside, and save the stage counts."""
        at = time.monotonic()
        if not uncommitted.offsets or not (now or at - uncommitted.at >= COMMIT_EVERY_S):
            return
        offsets = [TopicPartition(self.topic, p, o + 1) for p, o in uncommitted.offsets.items()]
        uncommitted.offsets.clear()
        uncommitted.at = at
        consumer.commit(offsets=offsets, asynchronous=True)
        if lane is not None:
            lane.produced()
        await self.save_counts()

    async def _settle_last(
        self, consumer: Consumer, uncommitted: Uncommitted, lane: Lane | None, term: Term
    ) -> None:
        """At the term's end: commit what its batches wrote (and confirmed) since the last commit, while
        the term is still this relay's (else the next leader re-reads it: deduplicated)."""
        if self.elector.trusted_term() != term:
            return
        try:
            await self._settle(consumer, uncommitted, lane, now=True)
        except Exception as exc:  # a lost commit only means a re-read (deduplicated)
            log.warning("last offsets not committed", topic=self.topic, error=repr(exc))

    async def _relay(self, batch: Batch, term: Term, lane: Lane) -> None:
        """Plan the batch (what steps aside), write the rest (fenced, replicated), send refused records on,
        then set the rest aside (confirmed, topic fence checked): all before the caller commits."""
        await lane.plan(batch)
        if not await self.limit.acquire(len(batch.envelopes), lambda: self.trusted(term)):
            raise TermEnded
        with recording_writes() as written:
            await self.write(batch, term)
            await self.replicated(batch, term, written)
        await self.dead_letter(batch.dead)
        await self.dead_letter(batch.retry, retry=True)
        if batch.aside:
            crash_point("relay_after_direct")
        await lane.set_aside(batch)

    def _signal_batch(self) -> None:
        if self.signals.batch.enabled:  # a copy of the counts per batch only while a test listens
            self.signals.batch.signal(dict(self.counts))

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit report (served by the consume calls, on the event loop)."""
        if err is not None or not self.signals.committed.enabled:
            return
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                self._committed[tp.partition] = tp.offset
        self.signals.committed.signal(sum(self._committed.values()))

    async def _first_graph_key(self) -> None:
        """Learn the graph key before any term: a standby holds it too, to put back if Consul loses it
        (Consul away: the next round tries again)."""
        try:
            await self._learn_graph_key()
        except Exception as exc:
            log.warning("graph key not read", topic=self.topic, error=repr(exc))

    async def _learn_graph_key(self) -> None:
        """Read the graph key from Consul, putting back the one held if Consul lost it."""
        held = self._graph_keys
        key = await self._keys.graph_key(known=held[0] if held else None)
        if held and key != held[0]:
            log.warning("Consul holds another graph key than this relay's: both verify", topic=self.topic)
        self._graph_keys = (key, *(k for k in held if k != key))[:GRAPH_KEYS_KEPT]

    def _admission(self) -> Admission:
        """The topic's admission with the graph keys held now, its refusal counts at zero: kept from batch
        to batch (it remembers each queue's route)."""
        admission = self._admitting
        if admission is None or admission.keys != self._graph_keys:
            admission = self._admitting = Admission(self.topic, self._routing, self._graph_keys)
        admission.misrouted = admission.unsigned = 0
        return admission

    async def parse(self, msgs: Sequence[Message], *, lane: bool = False) -> Batch:
        """The batch of ``msgs`` (the topic's records, or with ``lane`` its holding lane's), admitted
        (:mod:`jqcore.admission`)."""
        admission = self._admission()
        batch = parse_batch(self.topic, msgs, admission)
        misrouted, unsigned = admission.misrouted, admission.unsigned
        if unsigned:  # a graph no key at hand verifies: the key may have been made anew
            held = self._graph_keys
            await self._learn_graph_key()
            if self._graph_keys != held:
                admission = self._admission()
                batch = parse_batch(self.topic, msgs, admission)
                misrouted = admission.misrouted
        batch.lane = lane
        if misrouted:
            metrics.child(metrics.RELAY_MISROUTED, self.topic).inc(misrouted)
        self.count("read", len(batch.envelopes) + len(batch.dead), lane=lane)
        return batch

    async def write(self, batch: Batch, term: Term) -> None:
        await self._split_far(batch, term)
        if not batch.envelopes:
            return
        # Tracing off: a shared no-op; on: a span per job whose envelope carries a sampled trace context.
        with tracing.relay_write_spans(self.topic, batch.envelopes) as spans:
            result = await self._write_engine(batch, term)
            spans.outcomes(result.outcomes)
        tally = Counter(o.outcome for o in result.outcomes)
        lane = batch.lane
        self.count("written", tally["stored"] + tally["delayed"], lane=lane)
        self.count("duplicate", tally["duplicate"], lane=lane)
        self.count("unscheduled", tally["canceled"] + tally["expired"], lane=lane)
        if tally["refused"]:
            batch.dead += [
                (batch.source[o.id], f"refused: {o.reason}")
                for o in result.outcomes
                if o.outcome == "refused"
            ]

    async def _write_engine(self, batch: Batch, term: Term) -> EnqueueResult:
        """One engine call for the batch; if a queue's state refuses it (a script failed on its keys, or
        this process failed on a job), queue by queue (a refusing queue's records are set aside for
        ``<topic>.retry``). Any other error of Redis holds the batch (:meth:`_enqueue`)."""
        origins = {i: batch.origin(i) for i in batch.source}
        try:
            return await self._enqueue(batch.envelopes, term, origins)
        except Exception as exc:  # one queue's state refuses the script: isolate it, keep the partition going
            if ends_batch(exc):
                raise
            log.error("batch write failed; writing queue by queue", topic=self.topic, error=repr(exc))
        result = EnqueueResult([])
        by_queue: dict[str, list[Envelope]] = {}
        for env in batch.envelopes:
            by_queue.setdefault(env.queue, []).append(env)
        for queue, envs in by_queue.items():
            try:
                part = await self._enqueue(envs, term, origins)
            except Exception as queue_exc:
                if ends_batch(queue_exc):
                    raise
                reason = f"queue {queue!r} refused the write: {queue_exc!r}"
                batch.retry += [(batch.source[e.id], reason) for e in envs]
                continue
            result.outcomes.extend(part.outcomes)
        return result

    async def _split_far(self, batch: Batch, term: Term) -> None:
        """Jobs due later than the horizon go to the schedule topic (keyed ``<queue>/<id>``, the record's
        bytes unchanged, ``run_at`` in a header for the schedulers' index; Kafka must confirm, retried
        forever like Redis writes) and get only an index entry in Redis; the rest of the batch stays for
        the engine. The offsets move past them only afterwards."""
        if not self.far.enabled:
            return
        cut = now_ms() + int(self.far.horizon_s * 1000)
        far = [e for e in batch.envelopes if e.run_at is not None and e.run_at > cut]
        if not far:
            return
        batch.envelopes, batch.far = [e for e in batch.envelopes if e.run_at is None or e.run_at <= cut], far
        records = [
            schedule_record(self.far.topic, e.queue, e.id, e.run_at or 0, batch.source[e.id].value())
            for e in far
        ]
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(retriable), wait=wait_exponential(multiplier=0.1, max=5)
        ):
            with attempt:
                await self.dead_producer.produce_many(records)
        await self._index_far(far, term)
        self.count("scheduled", len(far), lane=batch.lane)

    async def _index_far(self, far: Sequence[Envelope], term: Term) -> None:
        by_queue: dict[str, list[tuple[str, int]]] = {}
        for env in far:
            by_queue.setdefault(env.queue, []).append((env.id, env.run_at or 0))
        for queue, items in by_queue.items():
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(retriable), wait=wait_exponential(multiplier=0.1, max=5)
            ):
                with attempt:
                    if not self.trusted(term):
                        raise TermEnded
                    await self.engine.schedule_far(queue, items)

    async def replicated(self, batch: Batch, term: Term, written: set[str]) -> None:
        """Wait until the masters written hold the batch on their replicas (``JOBQ_RELAY_WAIT_REPLICAS``).
        Not in time (a replica behind, a master killed, its slots moved to the promoted replica): write
        the batch again — what Redis kept is a duplicate of the same record, what a failover lost is
        stored again — and wait again, with backoff, for as long as it takes (nothing is committed)."""
        why = await self.replicas.confirm(written)  # the first try without tenacity (see _enqueue)
        if why is None:
            return
        log.warning("batch not on the replicas yet; writing it again", topic=self.topic, why=why)
        behind = retry_if_exception_type(ReplicasBehind)
        async for attempt in held_retries(self.topic, self.signals, behind, "replicas"):
            with attempt:
                if attempt.retry_state.attempt_number == 1:  # the first try's answer, waited after
                    raise ReplicasBehind(why)
                await self._index_far(batch.far, term)
                if batch.envelopes:  # the outcomes were counted the first time
                    again = dataclasses.replace(batch, dead=[], retry=[], far=[], aside=[])
                    await self._write_engine(again, term)
                why = await self.replicas.confirm(written)
                if why is not None:
                    log.warning("batch not on the replicas yet; writing it again", topic=self.topic, why=why)
                    raise ReplicasBehind(why)

    async def _enqueue(
        self, envelopes: Sequence[Envelope], term: Term, origins: Mapping[str, str]
    ) -> EnqueueResult:
        """One fenced engine call, retried with backoff for as long as Redis is unreachable or answers
        with an error that does not refuse these queues' jobs (:func:`holds_batch`)."""
        try:  # the first try without tenacity's machinery (built per batch, it cost more than a small one)
            return await self._enqueue_once(envelopes, term, origins)
        except Exception as exc:
            first = exc
        async for attempt in held_retries(self.topic, self.signals, retry_if_exception(holds_batch), "write"):
            with attempt:
                if (
                    attempt.retry_state.attempt_number == 1
                ):  # the first try's failure, judged as tenacity does
                    raise first
                return await self._enqueue_once(envelopes, term, origins)
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    async def _enqueue_once(
        self, envelopes: Sequence[Envelope], term: Term, origins: Mapping[str, str]
    ) -> EnqueueResult:
        if not self.trusted(term):
            raise TermEnded
        with metrics.child(metrics.RELAY_BATCH_TIME, self.topic).time():
            return await self.engine.enqueue_batch(  # graphs: admitted by _parse
                envelopes, fence=term.fence, source=self.topic, origins=origins, graphs=True
            )

    async def dead_letter(
        self, dead: Sequence[tuple[Message, str]], *, retry: bool = False, lane: bool = False
    ) -> None:
        """Malformed and refused records go to ``<topic>.dead``, bytes unchanged, reason in headers;
        Kafka must confirm before the offsets move past them (retried forever, like Redis writes)."""
        if not dead:
            return
        to = retry_topic(self.topic) if retry else dead_topic(self.topic)
        records = set_aside(to, self.topic, dead, lane=lane)
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(retriable), wait=wait_exponential(multiplier=0.1, max=5)
        ):
            with attempt:
                await self.dead_producer.produce_many(records)
        self.count("retried" if retry else "dead", len(records), lane=lane)
        for _, reason in dead:
            log.warning("record sent on", topic=self.topic, to=records[0].topic, reason=reason)
