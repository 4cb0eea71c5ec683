"""The local stack's brokers accept exactly the Kafka messages jobq's producers may send."""

from __future__ import annotations

from jqcore.envelope import KAFKA_MAX_MESSAGE_BYTES
from jqstack.servers import BROKER_MESSAGE_MAX_BYTES


def test_local_broker_limit_is_jobqs_kafka_limit() -> None:
    assert BROKER_MESSAGE_MAX_BYTES == KAFKA_MAX_MESSAGE_BYTES
