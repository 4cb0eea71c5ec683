"""With the broker unresponsive no 2xx is returned (a 503 within the produce timeout), and enqueues
resume once it is back."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from jqcore.routing import Route, RoutingSettings
from jqstack.testing.backends import NativeTestStack, SessionStack
from kafkagate.main import GateService

pytestmark = pytest.mark.faults


async def test_paused_broker_gives_503_then_enqueues_resume(
    stack: SessionStack,
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    token: str,
    topic_end: Callable[[str], int],
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    topic = make_topic("jobs", partitions=1)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    broker = stack.stack.of_kind("kafka")[0]
    assert broker.pid is not None
    path = f"/v1/queues/{prefix}.q/jobs"
    async with (
        make_gate(routing, produce_timeout_ms=2000) as svc,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        first = await http.post(svc.url + path, json={"kind": "k", "id": "before"})
        assert first.status == 202
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            during: Any = await http.post(svc.url + path, json={"kind": "k", "id": "during"})
            took = time.monotonic() - started
            body = await during.json()
            assert during.status == 503, body
            assert body["error"]["code"] == "kafka_unavailable"
            assert took < 30, "a hang guard, not a speed check: the 503 comes from the 2 s produce timeout"
        finally:
            os.kill(broker.pid, signal.SIGCONT)

        async def retry() -> tuple[int, str]:
            async with http.post(svc.url + path, json={"kind": "k", "id": "during"}) as after:
                return after.status, await after.text()

        # the broker is back: the client's retry of the same id goes through
        # (the broker is another process: polled)
        await eventually(retry, lambda answer: answer[0] == 202, 60)
    assert topic_end(topic) >= 2
