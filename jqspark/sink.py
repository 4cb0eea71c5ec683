"""Writing the records of :func:`jqspark.to_kafka_records` into Kafka: a batch (backfill) or a stream.

Both use Spark's Kafka sink with a durable, idempotent producer (``acks=all``,
``enable.idempotence=true``): a write Spark reports done is on every in-sync replica, and the producer's
own retries never duplicate a record. The sink is still at-least-once across failures: a streaming batch
whose Kafka write finished but whose checkpoint commit did not is written again on restart, and a batch
job run twice writes twice. The deterministic job ids make those copies harmless (the engine stores the
first and counts the rest as duplicates while it is queued or running; give Spark-fed queues the
``finished`` dedup policy to absorb copies that arrive after the job finished). Routes with
``acks=leader`` are written with ``acks=all`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from jqcore.envelope import KAFKA_MAX_MESSAGE_BYTES
from jqcore.settings.common import ClientConfig
from jqcore.settings.kafka import KafkaSettings
from jqspark.options import kafka_settings, spark_kafka_options
from jqspark.records import RECORD_COLUMNS
from jqspark.session import SparkSetupError, session_kafka

__all__ = ["PRODUCER_DEFAULTS", "kafka_options", "write_batch", "write_stream"]

PRODUCER_DEFAULTS: dict[str, str] = {
    "kafka.acks": "all",
    "kafka.enable.idempotence": "true",
    "kafka.linger.ms": "5",
    # the largest job (1 MiB envelope) plus key, headers and framing: the same limit as every jobq producer
    "kafka.max.request.size": str(KAFKA_MAX_MESSAGE_BYTES),
}
"""Producer settings every write starts from (``options`` may add to them, e.g. ``kafka.batch.size``)."""

_REQUIRED = frozenset({"topic", "value"})
_ALLOWED = frozenset({*RECORD_COLUMNS, "partition"})


def kafka_options(
    records: DataFrame, kafka: KafkaSettings | str | None, options: Mapping[str, str] | None
) -> ClientConfig:
    """The sink's options: how to reach Kafka (``kafka``: settings or a plaintext bootstrap list; else
    the session's, :func:`jqspark.spark_session`) mapped by :func:`jqspark.options.spark_kafka_options`,
    the durable producer defaults, then ``options``. ``acks`` other than ``all`` is refused: it would
    drop the guarantee the gateway gives for the same jobs."""
    settings = kafka_settings(kafka if kafka else session_kafka(records.sparkSession))
    if settings is None:
        raise SparkSetupError(
            "no Kafka: pass kafka= (jobq's KafkaSettings) or bootstrap=, or create the session with "
            "jqspark.spark_session(app, kafka=...)"
        )
    opts = ClientConfig({**spark_kafka_options(settings), **PRODUCER_DEFAULTS, **(options or {})})
    if opts["kafka.acks"] not in ("all", "-1"):
        raise ValueError(f"kafka.acks must be all, not {opts['kafka.acks']!r}")
    return opts


def _check_columns(records: DataFrame) -> None:
    columns = set(records.columns)
    if not columns >= _REQUIRED or not columns <= _ALLOWED:
        raise ValueError(
            f"records need the columns {sorted(_REQUIRED)} and at most {sorted(_ALLOWED)} "
            f"(see jqspark.to_kafka_records), got {sorted(columns)}"
        )


def _kafka(kafka: KafkaSettings | None, bootstrap: str | None) -> KafkaSettings | str | None:
    if kafka is not None and bootstrap is not None:
        raise ValueError("give kafka (settings) or bootstrap (a plaintext cluster), not both")
    return kafka if kafka is not None else bootstrap


def write_batch(
    records: DataFrame,
    *,
    kafka: KafkaSettings | None = None,
    bootstrap: str | None = None,
    options: Mapping[str, str] | None = None,
) -> None:
    """Write a batch DataFrame of records (``df.write.format("kafka")``); returns once Kafka has them.
    ``kafka`` (settings, e.g. ``load(KafkaSettings)``) or ``bootstrap`` (a plaintext cluster) say where;
    neither: the session's."""
    if records.isStreaming:
        raise ValueError("write_batch needs a batch DataFrame; use write_stream for a streaming one")
    _check_columns(records)
    opts = kafka_options(records, _kafka(kafka, bootstrap), options)
    records.write.format("kafka").options(**opts).save()


def write_stream(
    records: DataFrame,
    *,
    checkpoint: str | Path,
    kafka: KafkaSettings | None = None,
    bootstrap: str | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start a streaming query writing records into Kafka (``writeStream.format("kafka")``).

    ``checkpoint`` is the query's progress (source offsets and committed batches): keep it for the life
    of the pipeline, and restart with the same one to resume where it stopped. ``trigger`` is passed to
    ``DataStreamWriter.trigger`` (``{"processingTime": "2 seconds"}``, ``{"availableNow": True}``);
    default: the next batch as soon as the previous one is done. ``kafka``/``bootstrap``: as for
    :func:`write_batch`.
    """
    if not records.isStreaming:
        raise ValueError("write_stream needs a streaming DataFrame; use write_batch for a batch one")
    _check_columns(records)
    writer = (
        records.writeStream.format("kafka")
        .options(**kafka_options(records, _kafka(kafka, bootstrap), options))
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
    )
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()
