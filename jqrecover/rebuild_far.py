"""The rebuild's far-future tier (:mod:`jqrecover.rebuild`): jobs due beyond the horizon go back where
the relay sends them."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from confluent_kafka import KafkaException

from jqcore.envelope import Envelope
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import FarSettings
from jqcore.topics import schedule_topic
from jqengine import Engine
from jqrecover.errors import ReplayError
from jqrecover.rebuild_read import Kept, Key, TopicReport, existing_topics, kafka_error
from jqrecover.replay import Point, iter_records, plan, tool_consumer
from jqruntime.kafka import AsyncProducer, parse_schedule_key, schedule_record
from jqruntime.topicadmin import ensure

__all__ = ["FarTier"]


class FarTier:
    """The far-future tier. A job due beyond the horizon goes where the relay sends it (``jqrelay.topic``):
    its record, bytes unchanged, in the compacted schedule topic, and an index entry in Redis. That topic
    survived the loss, so it is read first (:meth:`read_tier`): a job whose record is still there only
    gets its index entry back; one whose latest record is a tombstone was unscheduled (a job moved into
    Redis was due within the horizon, so it is not due beyond it now) and is skipped, whatever the events
    say; one the topic never had (the relay had not read it) is written there first (Kafka confirms)."""

    def __init__(self, kafka: KafkaSettings, far: FarSettings, now: int) -> None:
        self.kafka, self.far = kafka, far
        self.cut = now + int(far.horizon_s * 1000)
        self.tier: dict[Key, bool] = {}
        """``(queue, id)`` → True: the topic holds its record; False: its tombstone."""
        self.producer: AsyncProducer | None = None

    def due_later(self, env: Envelope) -> bool:
        return self.far.enabled and env.run_at is not None and env.run_at > self.cut

    def read_tier(self, keys: Collection[Key]) -> None:
        """The schedule topic's latest record of each of ``keys`` (blocking)."""
        if not keys:
            return
        consumer = tool_consumer(self.kafka)
        try:
            if not existing_topics(consumer, [self.far.topic]):
                return
            ranges = plan(consumer, self.far.topic, Point(offset=0), None, None)
            for _, msg in iter_records(consumer, self.far.topic, ranges):
                key = parse_schedule_key(msg.key())
                if key is not None and key in keys:
                    self.tier[key] = msg.value() is not None
        except (ReplayError, KafkaException) as exc:
            raise kafka_error(exc) from exc
        finally:
            consumer.close()

    def unscheduled(self, env: Envelope) -> bool:
        return self.tier.get((env.queue, env.id)) is False

    async def split(self, engine: Engine, items: list[Kept], report: TopicReport) -> list[Kept]:
        """Put the jobs due beyond the horizon in the tier; the others are returned for the engine."""
        due_later = [x for x in items if self.due_later(x[2])]
        if not due_later:
            return items
        missing = [x for x in due_later if (x[2].queue, x[2].id) not in self.tier]
        if missing:
            if self.producer is None:
                await asyncio.to_thread(ensure, self.kafka, [schedule_topic(self.far)])
                self.producer = AsyncProducer(self.kafka)
            topic = self.far.topic
            await self.producer.produce_many(
                [schedule_record(topic, e.queue, e.id, e.run_at or 0, msg.value()) for _, msg, e in missing]
            )
            self.tier.update(((e.queue, e.id), True) for _, _, e in missing)
        by_queue: dict[str, list[Kept]] = {}
        for x in due_later:
            by_queue.setdefault(x[2].queue, []).append(x)
        for queue, xs in by_queue.items():
            outcomes = await engine.schedule_far(queue, [(e.id, e.run_at or 0) for _, _, e in xs])
            for (r, _, _), outcome in zip(xs, outcomes, strict=True):
                if outcome == "scheduled":
                    report.far += 1
                else:  # held: Redis has the job already
                    r.duplicate += 1
        far_ids = {id(x) for x in due_later}
        return [x for x in items if id(x) not in far_ids]

    async def close(self) -> None:
        if self.producer is not None:
            await asyncio.to_thread(self.producer.close, 5.0)
