"""The overview asks Kafka again when a fresh broker's group coordinator is still loading or moving
(``NOT_COORDINATOR`` is not flagged retriable by librdkafka on ``committed()``, yet passes a moment later)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from jqweb.overview import _retriable


def test_coordinator_moves_are_asked_again_and_real_refusals_are_not() -> None:
    for code in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
        assert _retriable(KafkaException(KafkaError(code)))
    assert not _retriable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not _retriable(ValueError("not Kafka's"))
