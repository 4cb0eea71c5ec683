"""One local Spark session (local[2], loopback, no UI) shared by every Spark test of the run: it takes
~10 s to start, and a JVM per test would eat the CI budget. pyspark is part of the locked dependencies
(the ``spark`` extra); without it these tests fail at import, on purpose, rather than skip quietly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from jqspark import spark_session
from jqstack.provision import ensure_spark_jars


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session(
        "jobq-tests", jars=ensure_spark_jars(), conf={"spark.sql.shuffle.partitions": "2"}
    )
    try:
        yield session
    finally:
        session.stop()
