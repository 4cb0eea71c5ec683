"""The producers' batching settings (``JOBQ_GATE_PRODUCE_*``, ``JOBQ_EVENTS_PRODUCE_*``) as librdkafka
options; delivery guarantees are not among them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jqcore.settings.pipeline import EventSettings
from kafkagate.settings import GateSettings


def test_each_service_reads_its_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_GATE_PRODUCE_LINGER_MS", "7")
    monkeypatch.setenv("JOBQ_GATE_PRODUCE_COMPRESSION", "zstd")
    monkeypatch.setenv("JOBQ_EVENTS_PRODUCE_BATCH_MESSAGES", "500")
    assert GateSettings().produce_options() == {
        "linger.ms": 7,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "compression.type": "zstd",
    }
    assert EventSettings().produce_options() == {
        "linger.ms": 5,  # the shipper's own default: no request waits on it
        "batch.size": 1_000_000,
        "batch.num.messages": 500,
        "compression.type": "lz4",
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("JOBQ_GATE_PRODUCE_BATCH_BYTES", "4194304"),  # over the 2 MiB Kafka takes from jobq
        ("JOBQ_GATE_PRODUCE_COMPRESSION", "brotli"),
        ("JOBQ_GATE_PRODUCE_LINGER_MS", "-1"),
    ],
)
def test_values_librdkafka_or_kafka_would_refuse_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        GateSettings()
