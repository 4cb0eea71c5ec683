"""The history pipeline: lifecycle events from Kafka into Parquet tables, with Structured Streaming.

``jobq history run`` starts :func:`run_history`. The query reads the events topic (``jqcore.events``: each
value a JSON array of events, or one event object in a record shipped before events were batched), parses
each value with a fixed schema into one row per event and hands every micro-batch to :class:`HistoryBatches`
(``foreachBatch``), which writes under the history root:

* ``events/day=YYYY-MM-DD/batch=<tag>/``: the batch's events (one copy of each ``(queue, id, v)``), one
  folder per UTC day of ``at``;
* ``current/seg=b<tag>/``: the latest event of each job of the batch, plus ``first_at`` (its first event
  in the batch) and ``accepted_at`` (from its enqueue event);
* now and then ``current/seg=c<tag>/``: a compaction of all segments (below);

and deletes ``events/day=...`` folders older than the retention. ``jqruntime.stores.history.HistoryStore``
reads the tables with DuckDB; ``docs/history.md`` has the layout and the argument in full.

Exactly once as seen by readers. Kafka delivery and Spark's replays are at least once: a batch whose
files were written but whose commit did not reach the checkpoint runs again on restart, with the same
batch id and the same offsets. Every write is therefore an overwrite of folders named after the batch
(``partitionOverwriteMode=dynamic``: only the batch's own folders are replaced), and the readers keep one
row per ``(queue, id, v)`` (the highest ``v`` per job in ``current``), so any superset of the intended rows
reads the same. The batch tag is ``<query id>-<batch id>``: the query id (from the checkpoint's
``metadata``) keeps a second pipeline over the same root - or a new checkpoint after the old one was lost
- from overwriting the first one's batch 0 with different events.

Compaction. Each batch adds a segment to ``current``; when there are more than ``compact_after``, they are
read together, reduced to the highest ``v`` per job (``first_at``: the smallest, ``accepted_at``: the
largest), jobs whose terminal event is older than the retention are dropped, the result is written as
``seg=c<tag>`` and the segments read are deleted. A replayed batch finding its ``c`` segment already
there leaves it alone (it was complete: Spark moves a written partition folder into place in one rename)
and deletes nothing, so a replay never destroys a compaction; rewriting its ``b`` segment only adds rows
the readers already have. One pipeline per root: two running at once could compact away each other's
segments while they are being written.

Data loss. The events topic has a retention of its own: ``failOnDataLoss=false`` lets the query go on
past offsets Kafka already deleted (Spark logs a warning naming them) instead of stopping the history for
good; the history then misses those events, as it would have anyway.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as sf
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from jqcore import metrics
from jqcore.events import FIELDS, PAYLOAD_FIELDS, TERMINAL
from jqcore.log import get_logger
from jqcore.settings.kafka import KafkaSettings
from jqruntime.stores.history import (
    COLUMN_OF,
    CURRENT_COLUMNS,
    CURRENT_DIR,
    EVENT_COLUMNS,
    EVENTS_DIR,
    PAYLOAD_COLUMNS,
)
from jqspark.options import kafka_settings, spark_kafka_options

__all__ = [
    "COMPACT_AFTER",
    "CURRENT_SCHEMA",
    "EVENT_SCHEMA",
    "QUERY_NAME",
    "RECORD_SCHEMA",
    "HistoryBatches",
    "expire_days",
    "latest_per_job",
    "observe_progress",
    "parse_events",
    "progress_lag",
    "run_history",
    "start_history",
]

log = get_logger("jqspark.history")

QUERY_NAME = "jobq-history"
COMPACT_AFTER = 32
"""Segments of ``current`` above which a batch compacts them (each reader call reads every segment)."""

_DAY_MS = 86_400_000


def _spark_type(t: type) -> StringType | LongType:
    return StringType() if t is str else LongType()


EVENT_SCHEMA = StructType([StructField(name, _spark_type(t)) for name, t in (*FIELDS, *PAYLOAD_FIELDS)])
"""An event's JSON value (``jqcore.events.FIELDS`` and ``PAYLOAD_FIELDS``, with the fields' own names)."""

CURRENT_SCHEMA = StructType(
    [StructField(name, _spark_type(t)) for name, t in (*CURRENT_COLUMNS, *PAYLOAD_COLUMNS)]
)
"""A ``current`` segment's columns (``jqruntime.stores.history.CURRENT_COLUMNS``, then
``PAYLOAD_COLUMNS``)."""


RECORD_SCHEMA = ArrayType(EVENT_SCHEMA)
"""An events record's value (``jqcore.events.decode_record``): a JSON array of events. Spark's ``from_json``
reads a single event object (a record shipped before events were batched) as an array of one."""


def parse_events(records: DataFrame) -> DataFrame:
    """Kafka records (a ``value`` column) -> event rows, one per event of each record
    (:data:`RECORD_SCHEMA`), with the tables' column names plus ``day`` (the UTC date of ``at_ms``,
    independent of the session's time zone). A value that is not an event (no ``id``, ``queue``, ``v`` or
    ``at``) is skipped; a missing optional field becomes ``""`` / ``0`` (the payload fields, too, on the
    events that carry none)."""
    events = sf.explode(sf.from_json(sf.col("value").cast("string"), RECORD_SCHEMA))
    parsed = records.select(events.alias("e")).select("e.*")
    required = sf.col("id").isNotNull() & sf.col("queue").isNotNull()
    required = required & sf.col("v").isNotNull() & sf.col("at").isNotNull()
    columns = [
        sf.coalesce(sf.col(f"`{name}`"), sf.lit("" if t is str else 0)).alias(COLUMN_OF.get(name, name))
        for name, t in (*FIELDS, *PAYLOAD_FIELDS)
    ]
    rows = parsed.where(required).select(*columns)
    return rows.withColumn("day", sf.date_from_unix_date(sf.floor(sf.col("at_ms") / _DAY_MS).cast("int")))


def latest_per_job(rows: DataFrame, first_at: str = "at_ms") -> DataFrame:
    """One row per ``(queue, id)``: the one with the highest ``v``, with ``first_at`` the smallest of the
    ``first_at`` column (``at_ms`` for event rows) and ``accepted_at`` the largest over the job's rows; the
    payload is the chosen row's (of two copies of one version, one with a payload wins). Columns:
    ``jqruntime.stores.history.CURRENT_COLUMNS`` then ``PAYLOAD_COLUMNS``."""
    job = Window.partitionBy("queue", "id")
    latest = job.orderBy(sf.col("v").desc(), sf.col("envelope").desc_nulls_last())
    ranked = rows.select(
        *[sf.col(c) for c, _ in EVENT_COLUMNS if c != "accepted_at"],
        sf.max("accepted_at").over(job).alias("accepted_at"),
        sf.min(first_at).over(job).alias("first_at"),
        *[sf.col(c) for c, _ in PAYLOAD_COLUMNS],
        sf.row_number().over(latest).alias("_rank"),
    )
    return ranked.where(sf.col("_rank") == 1).select(*[c for c, _ in (*CURRENT_COLUMNS, *PAYLOAD_COLUMNS)])


def _overwrite(df: DataFrame, path: Path, partitions: Sequence[str]) -> None:
    """Write ``df`` under ``path``, replacing only the partition folders it has rows for."""
    (
        df.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(*partitions)
        .parquet(str(path))
    )


def _segments(root: Path) -> list[Path]:
    folder = root / CURRENT_DIR
    return sorted(p for p in folder.glob("seg=*") if p.is_dir()) if folder.is_dir() else []


def expire_days(root: Path, retention_days: int, today: date) -> list[str]:
    """Delete the ``events/day=...`` folders more than ``retention_days`` before ``today``; their names."""
    cutoff = today - timedelta(days=retention_days)
    gone: list[str] = []
    for folder in sorted((root / EVENTS_DIR).glob("day=*")):
        try:
            day = date.fromisoformat(folder.name.removeprefix("day="))
        except ValueError:
            continue  # not ours
        if day < cutoff:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder.name)
    return gone


class HistoryBatches:
    """The ``foreachBatch`` function: writes one micro-batch of parsed events (see the module doc)."""

    def __init__(
        self, spark: SparkSession, *, root: Path, checkpoint: Path, retention_days: int, compact_after: int
    ) -> None:
        self.spark = spark
        self.root = root
        self.checkpoint = checkpoint
        self.retention_days = retention_days
        self.compact_after = compact_after
        self._query_id = ""

    def query_id(self) -> str:
        """The first 8 characters of the query's id, which Spark keeps in the checkpoint's ``metadata``
        (written when the query starts, before its first batch; the same after every restart)."""
        if not self._query_id:
            meta = json.loads((self.checkpoint / "metadata").read_text().splitlines()[0])
            self._query_id = str(meta["id"]).replace("-", "")[:8]
        return self._query_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        tag = f"{self.query_id()}-{batch_id:09d}"
        batch.persist()
        try:
            if not batch.isEmpty():
                events = batch.dropDuplicates(["queue", "id", "v"]).withColumn("batch", sf.lit(tag))
                _overwrite(events.repartition("day"), self.root / EVENTS_DIR, ["day", "batch"])
                segment = latest_per_job(batch).withColumn("seg", sf.lit(f"b{tag}")).coalesce(1)
                _overwrite(segment, self.root / CURRENT_DIR, ["seg"])
        finally:
            batch.unpersist()
        now = datetime.now(UTC)
        segments = _segments(self.root)
        if len(segments) > self.compact_after:
            self.compact(segments, f"c{tag}", int(now.timestamp() * 1000) - self.retention_days * _DAY_MS)
        gone = expire_days(self.root, self.retention_days, now.date())
        if gone:
            log.info("history retention", deleted=gone)

    def compact(self, segments: list[Path], name: str, cutoff_ms: int) -> None:
        """Replace ``segments`` by one segment ``name`` holding each job's latest row, minus the jobs that
        ended before ``cutoff_ms``. A ``name`` already there is a replay's: nothing is done."""
        if (self.root / CURRENT_DIR / f"seg={name}").exists():
            log.info("history compaction already done (replayed batch)", segment=name)
            return
        rows = self.spark.read.schema(CURRENT_SCHEMA).parquet(*[str(p) for p in segments])
        latest = latest_per_job(rows, first_at="first_at")
        expired: Column = sf.col("to_state").isin(*sorted(TERMINAL)) & (sf.col("at_ms") < cutoff_ms)
        _overwrite(latest.where(~expired).withColumn("seg", sf.lit(name)), self.root / CURRENT_DIR, ["seg"])
        for folder in segments:
            shutil.rmtree(folder, ignore_errors=True)
        log.info("history compaction", segment=name, replaced=len(segments))


def start_history(
    spark: SparkSession,
    *,
    kafka: KafkaSettings | None = None,
    bootstrap: str | None = None,
    topic: str,
    root: Path,
    checkpoint: Path | None = None,
    trigger_s: float,
    retention_days: int,
    available_now: bool = False,
    starting_offsets: str = "earliest",
    compact_after: int = COMPACT_AFTER,
    max_offsets_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the history query: ``topic`` into the tables under ``root``. Kafka is ``kafka`` (jobq's
    settings: TLS, SASL, mapped by :func:`jqspark.options.spark_kafka_options`) or ``bootstrap`` (a
    plaintext cluster's ``host:port,...``).

    ``checkpoint`` (default ``root/_checkpoint``) is the query's progress: keep it to resume where it
    stopped. ``trigger_s`` is the micro-batch interval; ``available_now`` processes what the topic holds
    now, in as many batches as ``max_offsets_per_trigger`` asks, then stops (``jobq history run --once``).
    ``starting_offsets`` applies to a new checkpoint only (Spark's ``startingOffsets``).
    """
    settings = kafka_settings(kafka if kafka is not None else bootstrap)
    if settings is None or (kafka is not None and bootstrap is not None):
        raise ValueError("give kafka (settings) or bootstrap (a plaintext cluster): one of them")
    checkpoint = checkpoint or root / "_checkpoint"
    root.mkdir(parents=True, exist_ok=True)
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings))
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "false")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    batches = HistoryBatches(
        spark, root=root, checkpoint=checkpoint, retention_days=retention_days, compact_after=compact_after
    )
    writer = (
        parse_events(reader.load())
        .writeStream.queryName(QUERY_NAME)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(batches)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{max(1, round(trigger_s * 1000))} milliseconds")
    log.info(
        "history query starting",
        topic=topic,
        root=str(root),
        checkpoint=str(checkpoint),
        once=available_now,
        note="failOnDataLoss=false: events the topic's retention deleted before they were read are skipped",
    )
    return writer.start()


def progress_lag(progress: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """From a streaming query's progress report: the records not read yet (each source's ``latestOffset``
    minus its ``endOffset``, summed over partitions; None when Spark did not say) and the report's Unix
    time."""
    lag: int | None = None
    for source in progress.get("sources") or []:
        latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
        if latest is None or end is None:
            continue
        lag = (lag or 0) + sum(max(0, n - end.get(key, 0)) for key, n in latest.items())
    stamp = progress.get("timestamp")
    at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    return lag, at


def _offsets(raw: Any) -> dict[tuple[str, str], int] | None:
    """``{"topic": {"0": 12, ...}}`` (a dict or its JSON text) → {(topic, partition): offset}."""
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, dict):
        return None
    return {(t, p): int(n) for t, parts in data.items() if isinstance(parts, dict) for p, n in parts.items()}


def observe_progress(progress: Any) -> None:
    """Set ``jobq_history_lag_records`` and ``jobq_history_progress_timestamp_seconds`` from the query's
    last progress (pyspark's ``StreamingQueryProgress``, or the dict older versions return)."""
    if progress is None:
        return
    data = json.loads(progress.json) if hasattr(progress, "json") else progress
    lag, at = progress_lag(data)
    if lag is not None:
        metrics.HISTORY_LAG.set(lag)
    if at is not None:
        metrics.HISTORY_PROGRESS_TIME.set(at)


STOP_POLL_S = 1
"""How often a running history checks its ``stop`` event."""
MAX_PER_BATCH = 10_000
"""Records per micro-batch at most when ``run_history`` catches up on a long topic: the tables grow batch
by batch (readers see progress) instead of in one long first batch. A record holds a shipping round's
events of one partition (up to ``JOBQ_EVENTS_BATCH``; one in a record of before events were batched)."""


def run_history(
    spark: SparkSession,
    *,
    kafka: KafkaSettings | None = None,
    bootstrap: str | None = None,
    topic: str,
    root: Path,
    checkpoint: Path | None = None,
    trigger_s: float,
    retention_days: int,
    once: bool = False,
    starting_offsets: str = "earliest",
    compact_after: int = COMPACT_AFTER,
    stop: threading.Event | None = None,
    max_offsets_per_trigger: int | None = MAX_PER_BATCH,
) -> None:
    """Run the history query until it ends (``once``: when it has caught up), ``stop`` is set (a signal
    handler's way to end it: it only sets the event, never interrupts a call into the JVM) or the process
    is interrupted; the query is stopped between batches and the next run resumes from the checkpoint. A
    failed query raises Spark's ``StreamingQueryException``."""
    started = time.monotonic()
    query = start_history(
        spark,
        kafka=kafka,
        bootstrap=bootstrap,
        topic=topic,
        root=root,
        checkpoint=checkpoint,
        trigger_s=trigger_s,
        retention_days=retention_days,
        available_now=once,
        starting_offsets=starting_offsets,
        compact_after=compact_after,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )
    try:
        while not query.awaitTermination(STOP_POLL_S):
            observe_progress(query.lastProgress)
            if stop is not None and stop.is_set():
                break
    finally:
        if query.isActive:
            query.stop()
        log.info("history query ended", seconds=round(time.monotonic() - started, 1))
