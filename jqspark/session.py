"""A local Spark session that can write to Kafka: the connector jars from the cache, loopback only.

The Kafka connector (``spark-sql-kafka-0-10_2.13``) must match pyspark exactly; ``jobq`` resolves it once
with Maven (``jqstack.provision.ensure_spark_jars()``, cached under ``JOBQ_HOME``) and the caller passes
that folder here, so no job ever downloads anything at run time. Jars that pyspark already ships in its own
``jars/`` folder (scala-library, slf4j, hadoop-client, lz4, snappy...) are left out: two versions of one
library on the class path is a failure waiting for the wrong class to load first.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from jqcore.errors import JobqError
from jqcore.settings.kafka import KafkaSettings

__all__ = [
    "BOOTSTRAP_CONF",
    "REDACTION_REGEX",
    "SPARK_JSON_LOGS",
    "SparkSetupError",
    "connector_jars",
    "session_kafka",
    "spark_session",
]

BOOTSTRAP_CONF = "spark.jobq.kafka.bootstrap"
"""Session setting holding the Kafka bootstrap servers that ``write_batch``/``write_stream`` default to."""

REDACTION_REGEX = r"(?i)secret|password|token|access[.]key|jaas|keystore[.]key"
"""``spark.redaction.regex``: Spark's default plus the Kafka options that carry secrets without saying so
(``kafka.sasl.jaas.config``, ``kafka.ssl.keystore.key``), masked in Spark's UI, event logs and plans."""

_KAFKA: dict[str, KafkaSettings] = {}
"""The Kafka settings a session was created with, by application id (secrets stay out of Spark's conf)."""

_CONNECTOR = "spark-sql-kafka-0-10_2.13"
_VERSIONED = re.compile(r"^(?P<artifact>.+)-\d[^-]*(?:-[A-Za-z][^-]*)?$")


class SparkSetupError(JobqError):
    """The Spark session cannot be set up as asked (typically: the connector jars are missing)."""

    code = "spark_setup"


def _artifact(jar: str) -> str:
    stem = jar.removesuffix(".jar")
    match = _VERSIONED.match(stem)
    return match.group("artifact") if match else stem


def _bundled() -> set[str]:
    folder = Path(pyspark.__file__).resolve().parent / "jars"
    return {_artifact(p.name) for p in folder.glob("*.jar")}


def connector_jars(jars: str | Path | Iterable[str | Path]) -> list[str]:
    """Absolute paths for ``spark.jars``: the folder's ``*.jar`` (or the files given), minus the artifacts
    pyspark already bundles. Raises :class:`SparkSetupError` when the Kafka connector is not among them."""
    if isinstance(jars, str | Path):
        root = Path(jars)
        files = sorted(root.glob("*.jar")) if root.is_dir() else [root]
    else:
        files = [Path(j) for j in jars]
    bundled = _bundled()
    chosen = [str(p.resolve()) for p in files if _artifact(p.name) not in bundled]
    if not any(_artifact(Path(p).name) == _CONNECTOR for p in chosen):
        raise SparkSetupError(
            f"no {_CONNECTOR} jar in {jars}: resolve it with `jqstack.provision.ensure_spark_jars()` "
            f"(Maven, deploy/spark/pom.xml); it must match pyspark {pyspark.__version__} exactly"
        )
    return chosen


def spark_session(
    app_name: str,
    bootstrap: str | None = None,
    *,
    kafka: KafkaSettings | None = None,
    jars: str | Path | Iterable[str | Path],
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A Spark session with the Kafka connector, bound to loopback, without the web UI.

    ``kafka`` (jobq's Kafka settings: TLS, SASL; ``docs/security.md``) or ``bootstrap`` (a plaintext
    cluster's ``host:port,...``) is remembered as the default of :func:`jqspark.write_batch` /
    :func:`jqspark.write_stream` (the bootstrap servers in ``spark.jobq.kafka.bootstrap``, the settings in
    this process only: no secret enters Spark's configuration). ``jars`` is the folder
    ``ensure_spark_jars()`` returns. ``conf`` entries override the defaults set here. Like every
    ``getOrCreate``, this returns the already running session of the process if there is one (its jars and
    settings then stay as they were): start one session per process and share it.
    """
    if kafka is not None and bootstrap is not None:
        raise ValueError("give kafka (settings) or bootstrap (a plaintext cluster), not both")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {
        "spark.jars": ",".join(connector_jars(jars)),
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.redaction.regex": REDACTION_REGEX,
    }
    servers = kafka.bootstrap if kafka is not None else bootstrap
    if servers:
        settings[BOOTSTRAP_CONF] = servers
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    if kafka is not None:
        _KAFKA[session.sparkContext.applicationId] = kafka
    return session


def session_kafka(session: SparkSession) -> KafkaSettings | str | None:
    """The Kafka a session was created with: its settings, else its bootstrap servers, else None."""
    settings = _KAFKA.get(session.sparkContext.applicationId)
    return settings if settings is not None else session.conf.get(BOOTSTRAP_CONF, None)


SPARK_JSON_LOGS = {
    # Spark's own JSON layout for the driver JVM's log4j2 (its structured-logging switch is forced off for
    # pyspark, a "shell" to spark-submit); and no console progress bar
    "spark.driver.extraJavaOptions": (
        "-Dlog4j2.configurationFile=classpath:org/apache/spark/log4j2-json-layout.properties"
    ),
    "spark.ui.showConsoleProgress": "false",
}
"""``jobq history run``'s Spark settings with ``JOBQ_LOG_FORMAT=json``. What stays plain text: the JVM's
own ``WARNING: Using incubator modules`` line and Spark's two-line note on the default log level."""
