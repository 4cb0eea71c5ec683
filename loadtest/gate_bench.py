"""``jobq bench gate``: HTTP enqueue through a gateway process into Kafka (acks=all), on a throw-away stack.

* single-job enqueue at saturation: 64 concurrent clients in a closed loop → requests/s;
* open-loop latency at a fixed arrival rate (2,500 req/s; ``--quick``: 500): each request is due at
  ``t0 + i / rate`` and its latency is measured from that due time, so a stalled gateway shows up in the
  percentiles instead of silently slowing the load (no coordinated omission); HDR histogram p50/p99;
* batch enqueue: 1,000 jobs per request, 4 concurrent clients → jobs/s.

The load generator runs in this process and shares the machine's two cores with the gateway and Kafka.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
from hdrh.histogram import HdrHistogram

from jqcore.kafka import ensure_topics
from jqcore.settings import KafkaSettings
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Children, http_ok, python_m
from loadtest.rawhttp import RawHttp
from loadtest.report import Report
from loadtest.stacks import bench_stack

__all__ = ["run"]

TOKEN = "bench-token"
TOPIC = f"bench.gate{os.getpid()}"


@contextmanager
def _gateway(ep: Endpoints) -> Iterator[str]:
    """A gateway process on a free port, ready; its URL. Stopped (TERM, grace, KILL) on exit."""
    ensure_topics(KafkaSettings(bootstrap=ep.kafka_bootstrap), [TOPIC], partitions=3)
    port = free_port()
    env = {
        **os.environ,
        "JOBQ_GATE_PORT": str(port),
        "JOBQ_GATE_TOKENS": TOKEN,
        "JOBQ_KAFKA_BOOTSTRAP": ep.kafka_bootstrap,
        "JOBQ_REDIS_URL": ep.redis_url or "",
        "JOBQ_DEFAULT_TOPIC": TOPIC,
        "JOBQ_LOG_LEVEL": "warning",
    }
    url = f"http://127.0.0.1:{port}"
    with Children(grace_s=30.0) as children:
        gateway = children.start("gateway", python_m("kafkagate"), output="inherit", env=env)
        gateway.wait_ready(http_ok(url + "/readyz"), timeout_s=30, interval_s=0.2)
        yield url


async def _closed_loop(
    http: RawHttp, request: bytes, jobs_per_request: int, seconds: float, clients: int
) -> float:
    """``clients`` loops each sending ``request`` again as soon as the last answer came; jobs/s accepted."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            status, _ = await http.send(request)
            if status == 202:
                done += jobs_per_request

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done / (time.perf_counter() - started)


async def _open_loop(
    http: RawHttp, request: bytes, rate: float, seconds: float
) -> tuple[float, float, float]:
    hist = HdrHistogram(1, 60_000_000, 3)  # microseconds
    errors = 0
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.1
    total = int(rate * seconds)

    async def one(due: float) -> None:
        nonlocal errors
        try:
            status, _ = await http.send(request)
            if status != 202:
                errors += 1
        except OSError:
            errors += 1
        hist.record_value(max(1, int((loop.time() - due) * 1_000_000)))

    tasks = []
    for i in range(total):
        due = t0 + i / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    return (
        hist.get_value_at_percentile(50) / 1000,
        hist.get_value_at_percentile(99) / 1000,
        errors / total * 100,
    )


async def _round(base: str, quick: bool) -> dict[str, float]:
    seconds, rate = (2.0, 500.0) if quick else (10.0, 2500.0)
    host, port = base.removeprefix("http://").rsplit(":", 1)
    path = "/v1/queues/bench/jobs"
    async with RawHttp(host, int(port), 128, {"Authorization": f"Bearer {TOKEN}"}) as http:
        single = http.request("POST", path, orjson.dumps({"kind": "noop", "args": {"n": 1}}))
        out = {"single enqueue at saturation": await _closed_loop(http, single, 1, seconds, 64)}
        p50, p99, err = await _open_loop(http, http.request("POST", path, b'{"kind": "noop"}'), rate, seconds)
        out[f"p50 at {rate:g} req/s"], out[f"p99 at {rate:g} req/s"] = p50, p99
        out[f"errors at {rate:g} req/s"] = err
        jobs = {"jobs": [{"kind": "noop", "args": i} for i in range(1000)]}
        batch = http.request("POST", path, orjson.dumps(jobs))
        out["batch enqueue (1000/request)"] = await _closed_loop(http, batch, 1000, seconds, 4)
    return out


UNITS = {"single enqueue at saturation": "req/s", "batch enqueue (1000/request)": "jobs/s"}


def run(quick: bool = False, endpoints: Endpoints | None = None) -> Report:
    reps = 1 if quick else 3
    report = Report("gate", {"reps": reps, "quick": quick, "acks": "all", "partitions": 3})
    samples: dict[str, list[float]] = {}
    with bench_stack("gate", endpoints) as ep, _gateway(ep) as base:
        for _ in range(reps):
            for name, value in asyncio.run(_round(base, quick)).items():
                samples.setdefault(name, []).append(value)
    for name, values in samples.items():
        unit = UNITS.get(name, "%" if name.startswith("errors") else "ms")
        report.add(name, unit, values)
    report.notes.append(
        "one gateway process; the load generator (plain keep-alive streams, pre-built requests) shares "
        "the 2 cores; latency from each request's due time"
    )
    return report
