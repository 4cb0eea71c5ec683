"""Killing the broker mid-test fails clearly and fast, never hangs; the stack comes back."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from jobq.stack.backends import NativeTestStack, SessionStack
from jobq.stack.procs import alive, wait_until
from jqcore.errors import StackError

pytestmark = [pytest.mark.faults, pytest.mark.kills_servers]


def _produce_one(bootstrap: str, topic: str, timeout_ms: int) -> Any:
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
    producer.flush(timeout_ms / 1000 + 10)
    return result[0] if result else "no delivery report"


def test_killed_broker_fails_clearly_then_recovers(stack: SessionStack, make_topic: Any) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    topic = make_topic("faults", partitions=1)
    broker = stack.stack.of_kind("kafka")[0]
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    wait_until(lambda: not alive(broker.pid), what="the broker to die", timeout_s=10)

    started = time.monotonic()
    with pytest.raises(StackError, match="kafka-1") as info:
        stack.check()
    assert time.monotonic() - started < 5
    assert "log tail" in str(info.value)

    started = time.monotonic()
    err = _produce_one(stack.endpoints.kafka_bootstrap, topic, timeout_ms=3000)
    assert err is not None, "a produce to a dead broker must fail"
    assert time.monotonic() - started < 20

    stack.stack.up()
    stack.check()
    assert _produce_one(stack.endpoints.kafka_bootstrap, topic, timeout_ms=30000) is None
