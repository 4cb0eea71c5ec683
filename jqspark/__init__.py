"""jqspark: Spark (batch and Structured Streaming) as a jobq producer.

::

    spark = spark_session("backfill", kafka=load(KafkaSettings), jars=ensure_spark_jars())
    records = to_kafka_records(df, queue="emails", kind="email.send", args_cols=["to", "subject"],
                               routing=RoutingSettings())
    write_batch(records)                                              # a backfill
    query = write_stream(records, checkpoint="/data/ckpt/emails")     # or a stream

Needs the ``spark`` extra (``pyspark==4.2.0``) and Spark's Kafka connector jars (see ``docs/spark.md``).
"""

from jqspark.options import spark_kafka_options
from jqspark.records import HEADER_KIND, HEADER_QUEUE, ID_PREFIX, RECORD_COLUMNS, to_kafka_records
from jqspark.session import BOOTSTRAP_CONF, SparkSetupError, connector_jars, session_kafka, spark_session
from jqspark.sink import PRODUCER_DEFAULTS, kafka_options, write_batch, write_stream

__all__ = [
    "BOOTSTRAP_CONF",
    "HEADER_KIND",
    "HEADER_QUEUE",
    "ID_PREFIX",
    "PRODUCER_DEFAULTS",
    "RECORD_COLUMNS",
    "SparkSetupError",
    "connector_jars",
    "kafka_options",
    "session_kafka",
    "spark_kafka_options",
    "spark_session",
    "to_kafka_records",
    "write_batch",
    "write_stream",
]
