"""A gateway of two processes on one port (``JOBQ_GATE_PROCESSES=2``, ``SO_REUSEPORT``), run as
``python -m kafkagate`` against the session's Kafka and Redis: both processes serve, ``/metrics`` counts
the whole gateway, a killed process is restarted while the other keeps answering, SIGTERM stops all."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Child, alive, http_ok, python_m, start
from kafkagate.main import PROCESS_HEADER

Eventually = Callable[..., Awaitable[Any]]
TOKEN = "processes-token"


def _children(pid: int) -> set[int]:
    """The pids of ``pid``'s child processes (Linux ``/proc``)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(p) for p in text.split()}


@pytest.fixture
def gateway(
    endpoints: Endpoints, prefix: str, make_topic: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[Child, str]]:
    topic = make_topic("jobs")
    port = free_port()
    env = {
        **os.environ,
        "JOBQ_GATE_PROCESSES": "2",
        "JOBQ_GATE_PORT": str(port),
        "JOBQ_GATE_TOKENS": TOKEN,
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "JOBQ_CONSUL_ADDR": endpoints.consul_addr,
        "JOBQ_CRON_KV_PREFIX": f"jobq-test/{prefix}",
        "JOBQ_ROUTES": orjson.dumps([{"queues": f"{prefix}*", "topic": topic}]).decode(),
        "JOBQ_DEFAULT_TOPIC": "",
        "JOBQ_LOG_LEVEL": "info",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    url = f"http://127.0.0.1:{port}"
    child = start("gateway", python_m("kafkagate"), output=tmp_path / "gateway.log", env=env)
    try:
        child.wait_ready(http_ok(url + "/readyz"), timeout_s=60)
        yield child, url
    finally:
        child.stop(grace_s=40)


async def _enqueue(url: str, queue: str, n: int) -> list[str]:
    """``n`` single enqueues, each on a new connection (the kernel picks a process per connection); the
    process slot of every answer. Every one must be accepted."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:

        async def one(i: int) -> str:
            async with http.post(f"{url}/v1/queues/{queue}/jobs", json={"kind": "k", "args": i}) as resp:
                assert resp.status == 202, await resp.text()
                assert len((await resp.json())["ids"]) == 1
                return resp.headers[PROCESS_HEADER]

        return list(await asyncio.gather(*(one(i) for i in range(n))))


async def _accepted_count(url: str) -> float:
    """``jobq_gate_requests_total`` of 202 enqueues, as /metrics says (whichever process answers)."""
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as resp:
        text = await resp.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "jobq_gate_requests_total"
        and {k: v for k, v in sample.labels.items() if k != "token"}
        == {"route": "/v1/queues/{queue}/jobs", "method": "POST", "status": "202"}
    )


async def test_two_processes_share_the_port_restart_and_stop(
    gateway: tuple[Child, str], prefix: str, eventually: Eventually
) -> None:
    child, url = gateway
    queue = f"{prefix}.q"
    loop = asyncio.get_running_loop()

    async def until(check: Callable[[], bool], timeout_s: float = 60) -> None:
        await eventually(check, bool, timeout_s)

    # both processes bind (each needs a moment to start: /readyz answered from whichever was up first, and
    # on a loaded machine the other may still be importing); connections then spread over the two
    await until(lambda: len(_children(child.pid)) == 2)  # two gateway processes
    slots: set[str] = set()
    sent = 0
    deadline = loop.time() + 120
    while slots != {"1", "2"} and loop.time() < deadline:
        slots |= set(await _enqueue(url, queue, 20))
        sent += 20
    assert slots == {"1", "2"}, "both processes answered enqueues"
    # /metrics is the whole gateway's: every accepted enqueue counted, whichever process took it
    assert await _accepted_count(url) == sent

    # a process killed: the other keeps answering, the supervisor starts a new one in its slot
    before = _children(child.pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    # gone means reaped: a killed leader shows as a zombie while its other threads still exit, and its
    # listening socket takes (and resets) connections until the last one has
    await until(lambda: not Path(f"/proc/{victim}").exists())  # the victim reaped
    assert set(await _enqueue(url, queue, 20)) <= {"1", "2"}
    sent += 20
    await until(lambda: len(_children(child.pid)) == 2 and victim not in _children(child.pid))  # a new one
    slots = set()
    deadline = loop.time() + 60  # the new one may still be starting: until it binds, the other takes all
    while slots != {"1", "2"} and loop.time() < deadline:
        slots |= set(await _enqueue(url, queue, 20))
        sent += 20
    assert slots == {"1", "2"}, "the restarted process serves again"
    # the dead process's counts stay in the sum: no counter went backwards
    assert await _accepted_count(url) == sent
    assert child.running()

    # SIGTERM: every process drains and stops, the supervisor exits 0
    workers = _children(child.pid)
    os.kill(child.pid, signal.SIGTERM)  # the supervisor alone: it tells its processes
    assert await child.exited(40) == 0
    for pid in workers:
        await until(lambda pid=pid: not alive(pid), timeout_s=10)  # each gateway process gone
