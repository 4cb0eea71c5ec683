"""``jobq spark example``: a small Structured Streaming pipeline writing jobs into the local stack's Kafka.

Spark's ``rate-micro-batch`` source emits ROWS-PER-SECOND rows a second (``value`` 0, 1, 2...; unlike
``rate`` it does not catch up on the time a stopped pipeline was down); each becomes a ``demo.noop`` job
(the example handlers of ``examples.demo_app``) on QUEUE, routed by JOBQ_ROUTES / JOBQ_DEFAULT_TOPIC, written
by ``writeStream.format("kafka")`` with a checkpoint under ``JOBQ_HOME/spark/``. The job id is
``sx-<pipeline>-<value>``: the same row always gets the same id, so a batch Spark writes twice after a crash
is stored once. Running the command again resumes from the checkpoint (new values, new ids); ``--fresh``
starts a new pipeline (a new ``<pipeline>`` tag, so its ids do not collide with the old ones).
pyspark is imported only when the command runs: the rest of the CLI works without the ``spark`` extra.
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from jqcore.envelope import validate_name
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import job_topics
from jqruntime.topicadmin import ensure
from jqstack.paths import home
from jqstack.provision import ensure_spark_jars

__all__ = ["app", "example"]

app = typer.Typer(help="Spark as a jobq producer (needs the spark extra: pyspark).", no_args_is_help=True)
console = Console()


def _pipeline_tag(root: Path, fresh: bool) -> str:
    """The pipeline's id tag, kept beside its checkpoint (a new checkpoint gets a new tag)."""
    if fresh:
        shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    tag_file = root / "pipeline"
    if not tag_file.exists():
        tag_file.write_text(secrets.token_hex(4))
    return tag_file.read_text().strip()


def _stop_between_batches(query: Any, patience_s: float = 10.0) -> None:
    """Stop when no batch is being written (a batch cut short is written again on the next run: harmless
    thanks to the ids, but noisy in the log)."""
    deadline = time.monotonic() + patience_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def _rows_written(query: Any) -> int:
    return sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)


@app.command()
def example(
    seconds: Annotated[int, typer.Option(min=1, help="How long the stream runs.")] = 20,
    rows_per_second: Annotated[int, typer.Option(min=1, help="Rows (jobs) the rate source emits.")] = 20,
    queue: Annotated[str, typer.Option(help="Queue of the jobs (routed by JOBQ_ROUTES).")] = "demo.spark",
    fresh: Annotated[bool, typer.Option(help="Drop the checkpoint: a new pipeline, new ids.")] = False,
    create_topic: Annotated[bool, typer.Option(help="Create the routed topic when missing.")] = True,
) -> None:
    """Stream jobs from Spark's rate source into Kafka for SECONDS, then stop cleanly.

    Kafka comes from JOBQ_KAFKA_* (bootstrap, TLS, SASL; eval "$(jobq stack env)"). Run them with
    `jobq relay` and, from a checkout, `PYTHONPATH=. jobq worker --app examples.demo_app --queues QUEUE`.
    """
    from pyspark.sql import functions as sf

    from jqspark import spark_session, to_kafka_records, write_stream

    validate_name("queue", queue)
    kafka, routing = load(KafkaSettings), load(RoutingSettings)
    topic, _ = routing.route(queue)
    if create_topic:
        ensure(kafka, job_topics([topic], sides=False))
    root = home() / "spark" / f"example-{queue}"
    tag = _pipeline_tag(root, fresh)
    with console.status("starting Spark (local[2]; ~10 s)..."):
        spark = spark_session(
            "jobq-spark-example",
            kafka=kafka,
            jars=ensure_spark_jars(),
            conf={"spark.ui.showConsoleProgress": "false"},
            log_level="ERROR",
        )
    try:
        rows = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows_per_second)
            .load()
            .withColumn("job_id", sf.concat(sf.lit(f"sx-{tag}-"), sf.col("value").cast("string")))
        )
        records = to_kafka_records(rows, routing=routing, queue=queue, kind="demo.noop", id_col="job_id")
        query = write_stream(
            records,
            checkpoint=root / "checkpoint",
            query_name="jobq_spark_example",
            trigger={"processingTime": "1 second"},
        )
        console.print(f"streaming jobs to queue [bold]{queue}[/] (topic {topic}) for {seconds}s ...")
        query.awaitTermination(seconds)
        _stop_between_batches(query)
        failure = query.exception()
        if failure is not None:
            console.print(f"[red]the streaming query failed[/]: {failure}")
            raise typer.Exit(1)
        console.print(
            f"wrote {_rows_written(query)} jobs (pipeline {tag}, checkpoint {root / 'checkpoint'}); "
            "run them (from a checkout): jobq relay & "
            f"PYTHONPATH=. jobq worker --app examples.demo_app --queues {queue}"
        )
    finally:
        spark.stop()
