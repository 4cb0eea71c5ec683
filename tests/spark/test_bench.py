"""The Spark benchmark with its quick sizes, so the harness cannot rot (no speed asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from loadtest import spark_bench

pytestmark = pytest.mark.spark


def test_spark_scenario_runs_and_saves_a_report(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBQ_RESULTS_DIR", str(tmp_path))
    report = spark_bench.run(quick=True)  # its own Kafka broker; the session's Spark is reused
    saved = json.loads((report.save() / "results.json").read_text())
    figures = saved["figures"]
    assert set(figures) == {
        "batch write to Kafka",
        "envelope build only (noop sink)",
        "streaming query to Kafka (availableNow)",
    }
    assert all(f["median"] > 0 for f in figures.values())
    assert not spark.sparkContext._jsc.sc().isStopped(), "the caller's session is left running"
