"""``./run bench gate``: HTTP enqueue through a gateway into Kafka (acks=all), on a throw-away stack.

* single-job enqueue at saturation: 64 concurrent clients in a closed loop → requests/s, against a gateway
  of one process and against one of a process per core (``JOBQ_GATE_PROCESSES``, one port shared with
  ``SO_REUSEPORT``), measured alternately in each repetition, and their ratio;
* open-loop latency at a fixed arrival rate (2,500 req/s; ``--quick``: 500): each request is due at
  ``t0 + i / rate`` and its latency is measured from that due time, so a stalled gateway shows up in the
  percentiles instead of silently slowing the load (no coordinated omission); HDR histogram p50/p99;
* batch enqueue: 1,000 jobs per request, 4 concurrent clients → jobs/s.

The figures other than the multi-process one are of the one-process gateway. The load generator runs
in this process and shares the machine's two cores with the gateway and Kafka.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import orjson
from hdrh.histogram import HdrHistogram

from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import job_topics
from jqruntime.topicadmin import ensure
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, service_argv
from jqstack.procs import free_port
from jqstack.supervise import Children, http_ok
from kafkagate.main import PROCESS_HEADER
from loadtest.rawhttp import RawHttp
from loadtest.report import Report
from loadtest.stacks import bench_stack

__all__ = ["run"]

TOKEN = "bench-token"
TOPIC = f"bench.gate{os.getpid()}"
PATH = "/v1/queues/bench/jobs"
SINGLE = "single enqueue at saturation"
CORES = max(2, os.cpu_count() or 2)
"""Processes of the multi-process gateway: one per core (at least 2, so there is something to compare)."""


def _every_process_answers(url: str, processes: int) -> bool:
    """True once answers on fresh connections came from ``processes`` different gateway processes (the
    kernel picks a process per connection; one still starting gets none)."""
    seen = set()
    for _ in range(16 * processes):
        with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
            seen.add(response.headers.get(PROCESS_HEADER))
        if len(seen) == processes:
            return True
    return False


@contextmanager
def _gateway(ep: Endpoints, processes: int = 1) -> Iterator[str]:
    """A gateway of ``processes`` processes on a free port, every one ready; its URL. Stopped (TERM,
    grace, KILL) on exit."""
    ensure(KafkaSettings(bootstrap=ep.kafka_bootstrap), job_topics([TOPIC], sides=False))
    port = free_port()
    spec = PipelineEnv(
        {"JOBQ_KAFKA_BOOTSTRAP": ep.kafka_bootstrap, "JOBQ_REDIS_URL": ep.redis_url or ""},
        token=TOKEN,
        log_level="warning",
        settings={"JOBQ_DEFAULT_TOPIC": TOPIC},
    )
    env = spec.gateway(port, processes=processes)
    url = f"http://127.0.0.1:{port}"
    with Children(grace_s=30.0) as children:
        gateway = children.start("gateway", service_argv("gateway"), output="inherit", env=env)
        gateway.wait_ready(http_ok(url + "/readyz"), timeout_s=60, interval_s=0.2)
        if processes > 1:
            gateway.wait_ready(lambda: _every_process_answers(url, processes), timeout_s=60, interval_s=0.2)
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


def _raw(base: str) -> RawHttp:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return RawHttp(host, int(port), 128, {"Authorization": f"Bearer {TOKEN}"})


async def _single(base: str, seconds: float) -> float:
    """Single-job enqueues at saturation (req/s)."""
    async with _raw(base) as http:
        single = http.request("POST", PATH, orjson.dumps({"kind": "noop", "args": {"n": 1}}))
        return await _closed_loop(http, single, 1, seconds, 64)


async def _round(base: str, quick: bool) -> dict[str, float]:
    seconds, rate = (1.0, 500.0) if quick else (10.0, 2500.0)
    out = {SINGLE: await _single(base, seconds)}
    async with _raw(base) as http:
        p50, p99, err = await _open_loop(http, http.request("POST", PATH, b'{"kind": "noop"}'), rate, seconds)
        out[f"p50 at {rate:g} req/s"], out[f"p99 at {rate:g} req/s"] = p50, p99
        out[f"errors at {rate:g} req/s"] = err
        jobs = {"jobs": [{"kind": "noop", "args": i} for i in range(1000)]}
        batch = http.request("POST", PATH, orjson.dumps(jobs))
        out["batch enqueue (1000/request)"] = await _closed_loop(http, batch, 1000, seconds, 4)
    return out


MULTI = f"{SINGLE}, {CORES} processes"
RATIO = f"single enqueue scaling, {CORES} processes / 1"
UNITS = {SINGLE: "req/s", MULTI: "req/s", RATIO: "x", "batch enqueue (1000/request)": "jobs/s"}


def run(quick: bool = False, endpoints: Endpoints | None = None) -> Report:
    reps = 1 if quick else 3
    params = {"reps": reps, "quick": quick, "acks": "all", "partitions": 3, "processes": [1, CORES]}
    report = Report("gate", params)
    samples: dict[str, list[float]] = {}
    with bench_stack("gate", endpoints) as ep, ExitStack() as gateways:
        one = gateways.enter_context(_gateway(ep))
        many = gateways.enter_context(_gateway(ep, CORES))
        for base in (one, many):  # warm-up, not measured: the broker's first writes, the first connections
            asyncio.run(_single(base, 0.5 if quick else 1.0))
        for _ in range(reps):  # alternately, so a drift of the machine touches both alike
            figures = asyncio.run(_round(one, quick))
            figures[MULTI] = asyncio.run(_single(many, 1.0 if quick else 10.0))
            figures[RATIO] = figures[MULTI] / figures[SINGLE] if figures[SINGLE] else float("nan")
            for name, value in figures.items():
                samples.setdefault(name, []).append(value)
    for name, values in samples.items():
        unit = UNITS.get(name, "%" if name.startswith("errors") else "ms")
        report.add(name, unit, values)
    report.notes.append(
        f"figures of a one-process gateway unless named; '{MULTI}': JOBQ_GATE_PROCESSES={CORES} on one "
        "port (SO_REUSEPORT), both gateways up all along (the idle one costs next to nothing); the load "
        "generator (plain keep-alive streams, pre-built requests) shares the cores; latency from each "
        "request's due time"
    )
    return report
