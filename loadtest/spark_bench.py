"""``./run bench spark``: rows/s of a Spark batch write of jobs into Kafka (``jqspark.write_batch``), and of a
streaming query (``jqspark.write_stream``, file source, ``availableNow`` trigger) doing the same.

A throw-away Kafka broker (only Kafka: no Consul or Redis is started) and one local[2] Spark session.
Each repetition turns N generated rows (``spark.range``: a counter and a short text as ``args``) into
envelope v1 records with :func:`jqspark.to_kafka_records` and writes them into a 3-partition topic with
``acks=all`` and the idempotent producer; the clock covers the whole Spark job (row generation, envelope
building, producing, waiting for the acks). A second figure times the same job into Spark's ``noop`` sink:
the Spark-side cost alone, so the difference is what Kafka costs. Every write is checked against the topic's
end offsets. A warm-up write of N/4 rows (not timed) creates the producer and warms the JIT first.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from jqcore.routing import RoutingSettings
from jqspark import PRODUCER_DEFAULTS, spark_session, to_kafka_records, write_batch, write_stream
from jqstack.manager import Stack, StackSpec
from jqstack.provision import ensure_spark_jars
from loadtest.report import Report
from loadtest.stacks import up_timed
from loadtest.topics import end_offsets

__all__ = ["run"]

PARTITIONS = 3
QUEUE = "bench.spark"


def _topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def _records(spark: SparkSession, n: int, first: int, topic: str) -> DataFrame:
    rows = spark.range(first, first + n).withColumn("text", sf.concat(sf.lit("row-"), sf.col("id")))
    routing = RoutingSettings(default_topic=topic)
    return to_kafka_records(rows, routing=routing, queue=QUEUE, kind="bench.noop", args_cols=["id", "text"])


def _round(spark: SparkSession, bootstrap: str, topic: str, n: int, first: int) -> dict[str, float]:
    before = end_offsets(bootstrap, topic)
    records = _records(spark, n, first, topic)
    started = time.perf_counter()
    write_batch(records, bootstrap=bootstrap)
    write_s = time.perf_counter() - started
    written = end_offsets(bootstrap, topic) - before
    if written != n:
        raise RuntimeError(f"spark bench: {written} records reached the topic, {n} were written")
    started = time.perf_counter()
    records.write.format("noop").mode("overwrite").save()
    build_s = time.perf_counter() - started
    return {"batch write to Kafka": n / write_s, "envelope build only (noop sink)": n / build_s}


def _stream_round(spark: SparkSession, bootstrap: str, topic: str, n: int, first: int, tmp: Path) -> float:
    """A streaming query (file source, ``availableNow``) turning N parquet rows into jobs in Kafka."""
    source = tmp / f"rows-{first}"
    rows = spark.range(first, first + n).withColumn("text", sf.concat(sf.lit("row-"), sf.col("id")))
    rows.write.parquet(str(source))
    stream = spark.readStream.schema(rows.schema).parquet(str(source))
    records = to_kafka_records(
        stream,
        routing=RoutingSettings(default_topic=topic),
        queue=QUEUE,
        kind="bench.noop",
        args_cols=["id", "text"],
    )
    before = end_offsets(bootstrap, topic)
    started = time.perf_counter()
    query = write_stream(
        records, checkpoint=tmp / f"checkpoint-{first}", bootstrap=bootstrap, trigger={"availableNow": True}
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    written = end_offsets(bootstrap, topic) - before
    if written != n:
        raise RuntimeError(f"spark bench (streaming): {written} records reached the topic, {n} expected")
    return n / elapsed


def run(quick: bool = False) -> Report:
    n, reps = (20_000, 1) if quick else (200_000, 3)
    report = Report(
        "spark",
        {"rows": n, "reps": reps, "partitions": PARTITIONS, "master": "local[2]", **PRODUCER_DEFAULTS},
    )
    stack = Stack(StackSpec(name=f"bench-spark-{os.getpid()}", fixed_ports=False))
    stack.servers = [s for s in stack.servers if s.kind == "kafka"]
    owned = SparkSession.getActiveSession() is None  # never stop a session the caller is using
    samples: dict[str, list[float]] = {}
    try:
        up_timed(stack)
        bootstrap = f"127.0.0.1:{stack.servers[0].port}"
        topic = f"bench.spark.{os.getpid()}"
        _topic(bootstrap, topic)
        spark = spark_session("jobq-bench-spark", bootstrap, jars=ensure_spark_jars())
        try:
            warm = max(1_000, n // 4)
            write_batch(_records(spark, warm, -warm, topic), bootstrap=bootstrap)  # warm-up: producer, JIT
            for rep in range(reps):
                for name, value in _round(spark, bootstrap, topic, n, rep * n).items():
                    samples.setdefault(name, []).append(value)
            with tempfile.TemporaryDirectory(prefix="jobq-bench-spark-") as tmp:
                for rep in range(reps):
                    rate = _stream_round(spark, bootstrap, topic, n, (reps + rep) * n, Path(tmp))
                    samples.setdefault("streaming query to Kafka (availableNow)", []).append(rate)
        finally:
            if owned:
                spark.stop()
    finally:
        stack.down(purge=True)
    for name, values in samples.items():
        report.add(name, "rows/s", values)
    report.notes.append(
        f"{n} rows per repetition into one {PARTITIONS}-partition topic of a single local broker; "
        "args {id, text}; envelopes of ~220 bytes; the clock includes generating and encoding the rows"
    )
    return report
