"""Killing the broker mid-test fails clearly and never hangs; the stack comes back.

"Clearly" is checked by what is reported (the dead server named with its log tail; a delivery report
that carries an error), never by how fast: on a loaded machine every step may take longer. A hang
is bounded by librdkafka's delivery timeout (plus slack) and by pytest-timeout."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from jqstack.errors import StackError
from jqstack.supervise import alive, wait_until
from jqstack.testing.backends import NativeTestStack, SessionStack

pytestmark = [pytest.mark.faults, pytest.mark.kills_servers]

HANG_S = 60
"""Slack past librdkafka's own delivery timeout: reaching it means no report came (a hang), not slowness."""


def _produce_one(bootstrap: str, topic: str, timeout_ms: int) -> Any:
    """The delivery report's error (None: delivered), or a string when librdkafka gave no report at all
    within its own delivery timeout plus ``HANG_S``."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": timeout_ms,
            "enable.idempotence": True,
            "log_level": 0,
        }
    )
    result: list[Any] = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: result.append(err))
    producer.flush(timeout_ms / 1000 + HANG_S)
    return result[0] if result else "no delivery report"


def test_killed_broker_fails_clearly_then_recovers(stack: SessionStack, make_topic: Any) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    topic = make_topic("faults", partitions=1)
    broker = stack.stack.of_kind("kafka")[0]
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    wait_until(lambda: not alive(broker.pid), what="the broker to die", timeout_s=60)
    try:
        with pytest.raises(StackError, match="kafka-1") as info:
            stack.check()
        assert "log tail" in str(info.value)

        err = _produce_one(stack.endpoints.kafka_bootstrap, topic, timeout_ms=3000)
        assert isinstance(err, KafkaError), f"a produce to a dead broker must report an error, got {err!r}"
    finally:
        stack.stack.up(timeout_s=180)
    stack.check()
    assert _produce_one(stack.endpoints.kafka_bootstrap, topic, timeout_ms=60_000) is None
