"""The history's lag from a Structured Streaming progress report (``jqspark.history.progress_lag``):
what ``jobq history run`` exports as ``jobq_history_lag_records`` and
``jobq_history_progress_timestamp_seconds``."""

from __future__ import annotations

from datetime import UTC, datetime

from jqcore import metrics
from jqspark.history import observe_progress, progress_lag

PROGRESS = {
    "timestamp": "2026-11-25T10:00:05.250Z",
    "sources": [
        {
            "description": "KafkaV2[Subscribe[jobq.events]]",
            "endOffset": {"jobq.events": {"0": 100, "1": 40}},
            "latestOffset": '{"jobq.events": {"0": 130, "1": 40, "2": 5}}',
        }
    ],
}


def test_lag_sums_every_partition_behind_its_latest_offset() -> None:
    lag, at = progress_lag(PROGRESS)
    assert lag == 30 + 0 + 5, "a partition the batch never reached counts from 0"
    assert at == datetime(2026, 11, 25, 10, 0, 5, 250_000, tzinfo=UTC).timestamp()


def test_no_offsets_yet_is_no_lag_figure() -> None:
    assert progress_lag({"sources": [{"endOffset": None, "latestOffset": None}]}) == (None, None)


def test_observe_progress_sets_the_gauges() -> None:
    observe_progress(PROGRESS)
    assert metrics.HISTORY_LAG._value.get() == 35
    assert metrics.HISTORY_PROGRESS_TIME._value.get() == progress_lag(PROGRESS)[1]
    observe_progress(None)  # no batch yet: nothing changes
    assert metrics.HISTORY_LAG._value.get() == 35
