"""``./run bench floors``: each hop of jobq's path side by side with its floor (issue 58), as ratios.

A hop's floor (:mod:`loadtest.floors`) is the least code on the same libraries that keeps the hop's
promise; jobq's figure over the floor's says what jobq's features and its overhead cost on that hop. Every
hop runs jobq and its floor as one process each, on the same servers, with the same load tool and the
same jobs, alternately within each repetition (a drift of the shared machine touches both alike); the
ratio is taken per repetition (jobq / floor) and its median reported.

* **gateway**: 64 keep-alive connections in a closed loop (:class:`loadtest.rawhttp.RawHttp`, the gate
  bench's generator; ``hey -c 64`` does the same), one job per request, against one ``python -m
  kafkagate`` process and one :mod:`loadtest.floors.gateway` process, each producing to a topic of its own
  (3 partitions, acks=all, idempotent): requests/s, p50/p99 of each request's round trip, CPU µs per
  request of the gateway process, of its event loop's thread alone (the main thread: HTTP, the handler,
  every ``produce`` call; librdkafka's and the delivery-report threads are the rest) and of Kafka's JVM.
* **relay**: ``jobs`` jobq envelopes of the no-op ``floor.noop`` are produced to a fresh topic first; then
  ``python -m jqrelay`` (Consul lock, fenced writes) and :mod:`loadtest.floors.relay` (its own consumer
  group) each move all of them into Redis — jobq's queue, the floor's lease queue: jobs/s from the first
  write to the last (spawn → first write reported apart), CPU µs per job of the relay process and of Redis
  (``INFO cpu``).
* **worker**: the jobs the relays wrote are drained by one ``jobq worker`` process and one
  :mod:`loadtest.floors.worker` process, 16 slots each (``--burst``), the same job (one Redis round trip,
  an ``INCR`` counting it: :mod:`loadtest.floors.jobq_app`): spawn → first claim, jobs/s steady (from 1 %
  done to the last job: start-up excluded) and spawn → last job (start-up included), CPU µs per job of
  the worker and of Redis over the steady stretch. Beside it, the seconds of ``jobq --help`` and of the
  floor worker's ``--help`` (start-up of the command line).
* **whole path**: jobq's pipeline as ``./run bench e2e`` runs it (gateway, relay, 2 workers × 50, a
  scheduler shipping the lifecycle events; Consul) against the floors' (gateway, relay, 2 floor workers ×
  50), the same job: one job per HTTP request at a fixed rate (open loop; CPU from the first request to the
  last job done), then batches of 1,000 jobs per request from 4 clients (closed loop, at most
  :data:`BACKLOG` jobs waiting in the path; CPU over the window after a warm-up third, per job finished in
  it). CPU µs per job of every process on the path — the pipeline's processes from ``/proc`` with their
  trees, Kafka's JVM and Consul by their ports, Redis's ``INFO cpu`` —, their sum (the system total), and
  the end-to-end jobs/s of the batched phase.
* ``--hop worker`` (``./run bench floors --hop worker``): the worker hop alone, on a Redis of its own (no
  Kafka, no Consul: a run of minutes, not a quarter of an hour): both queues are filled directly, jobq's
  through the engine as its relay writes them, the floor's lease queue as its relay does, then drained as
  above, the systems alternately, ``reps`` times.
* ``--hop gateway``: the gateway hop alone (a stack, both gateways, their repetitions and profiles: minutes).
* ``--hop relay``: the relay hop alone (a stack, no gateways, workers or path; its repetitions: minutes).
* **profiles** (not ``--quick``): after the measured repetitions, ``py-spy`` records each gateway under
  the same closed loop, and jobq's relay, one worker and the scheduler under the batched path load.

Everything, the load generator included, shares this machine's cores; the load average is noted at each
repetition (other tenants' work shows there).
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path as Folder

import orjson
import redis
import redis.asyncio as aioredis
from confluent_kafka import Producer
from hdrh.histogram import HdrHistogram

from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import job_topics
from jqengine import Engine
from jqengine.keys import QueueKeys
from jqruntime.topicadmin import ensure
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, Scope, service_argv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Child, Children, http_ok, python_m
from loadtest import e2e_bench
from loadtest.costs import (
    CpuClock,
    CpuMeter,
    Profile,
    listening_pid,
    machine_busy_s,
    per_unit_us,
    process_clock,
    profile_section,
    record_profiles,
)
from loadtest.cpu import redis_cpu_s, thread_cpu_s, tree_cpu_s
from loadtest.floors import jobq_app
from loadtest.floors.lease import count_key
from loadtest.floors.lease import keys as floor_keys
from loadtest.floors.lease import write as floor_write
from loadtest.rawhttp import RawHttp
from loadtest.report import Report
from loadtest.stacks import bench_stack, redis_only
from loadtest.startup_bench import command_cost

__all__ = ["ALONE", "HOPS", "SYSTEMS", "Sizes", "run"]

TOKEN = e2e_bench.TOKEN
PARTITIONS = 3
SLOTS = 16
"""A worker process's concurrent jobs in the worker hop (jobq's ``--concurrency``, the floor's
``--slots``)."""
RELAY_BATCH = 500
"""Records per relay batch: jqrelay's default (``JOBQ_RELAY_BATCH``), given to the floor too."""
SYSTEMS = ("jobq", "floor")
HOPS = ("gateway", "relay", "worker", "start-up", "path, 1 job/request", "path, batched")
ALONE = ("gateway", "relay", "worker")
"""The hops ``--hop`` may run alone."""
PROFILE_S = 10.0
BACKLOG = 8_000
"""Jobs the batched phase lets wait in the path (answered, not yet done; 8 requests): beyond it its posters
wait. Without a bound the gateways answer faster than the pipeline finishes, and the CPU of the jobs
accepted into the growing backlog (the gateway's, Kafka's) is charged to the fewer jobs finished."""
WORKER_PROFILE_S = 4.0
"""Seconds of each worker's profile with ``--hop worker`` (its drain of :attr:`Sizes.jobs` lasts longer)."""


@dataclass(frozen=True)
class Sizes:
    reps: int
    gate_s: float
    """Seconds of each gateway's closed loop."""
    jobs: int
    """Jobs through the relay and worker hops."""
    rate: float
    """Jobs/s of the path's open loop (one job per request)."""
    rate_s: float
    batch_s: float
    """Seconds of the path's batched phase (the window is its last two thirds)."""


QUICK = Sizes(reps=1, gate_s=1.0, jobs=3_000, rate=200.0, rate_s=1.0, batch_s=3.0)
FULL = Sizes(reps=3, gate_s=10.0, jobs=50_000, rate=1000.0, rate_s=10.0, batch_s=30.0)


@dataclass
class Figures:
    """Samples per (hop, measure, system), and each figure's unit and which way is better."""

    samples: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)
    units: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, hop: str, measure: str, unit: str, jobq: float, floor: float) -> None:
        self.units[hop, measure] = unit
        for system, value in (("jobq", jobq), ("floor", floor)):
            self.samples.setdefault((hop, measure, system), []).append(value)
        ratio = jobq / floor if floor else float("nan")
        self.samples.setdefault((hop, measure, "ratio"), []).append(ratio)


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 600_000_000, 3)  # microseconds


def _kafka_pids(ep: Endpoints) -> list[int]:
    pids = [listening_pid(int(a.rsplit(":", 1)[1]), "java") for a in ep.kafka_bootstrap.split(",")]
    return [p for p in pids if p] if all(pids) else []


def _loadavg() -> float:
    return os.getloadavg()[0]


def _topic(ep: Endpoints, topic: str) -> None:
    ensure(KafkaSettings(bootstrap=ep.kafka_bootstrap), job_topics([topic], PARTITIONS, sides=False))


# ---- the gateway hop -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gate:
    url: str
    pid: int

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)


@contextmanager
def _gateways(ep: Endpoints, tag: str) -> Iterator[dict[str, Gate]]:
    """A jobq gateway and a floor gateway, one process each, every one producing to a topic of its own."""
    scope = Scope("bench", f"{tag}g")
    floor_topic = f"{scope.name}.floor"
    _topic(ep, scope.name)
    _topic(ep, floor_topic)
    spec = PipelineEnv(ep.exports(), scope=scope, token=TOKEN, log_level="warning")
    ports = {"jobq": free_port(), "floor": free_port()}
    argv = {
        "jobq": service_argv("gateway"),
        "floor": python_m("loadtest.floors.gateway", ep.kafka_bootstrap, floor_topic, str(ports["floor"])),
    }
    with Children(grace_s=30.0) as procs:
        gates = {}
        for system in SYSTEMS:
            child = procs.start(f"{system}-gateway", argv[system], env=spec.gateway(ports[system]))
            url = f"http://127.0.0.1:{ports[system]}"
            child.wait_ready(http_ok(url + "/readyz"), timeout_s=60, interval_s=0.2)
            gates[system] = Gate(url, child.pid)
        yield gates


async def _closed_loop(gate: Gate, seconds: float, clients: int = 64) -> tuple[int, float, HdrHistogram]:
    """``clients`` connections each sending the next one-job request as soon as its answer came: the
    requests answered 202, the seconds taken, each request's round trip."""
    hist, done = _hist(), 0
    async with RawHttp(*gate.address, clients, {"Authorization": f"Bearer {TOKEN}"}) as http:
        request = http.request("POST", "/v1/queues/bench/jobs", orjson.dumps({"kind": jobq_app.KIND}))
        deadline = time.perf_counter() + seconds

        async def client() -> None:
            nonlocal done
            while (sent := time.perf_counter()) < deadline:
                status, _ = await http.send(request)
                hist.record_value(max(1, int((time.perf_counter() - sent) * 1e6)))
                done += status == 202

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return done, time.perf_counter() - started, hist


def _gateway_round(gates: dict[str, Gate], kafka: list[int], seconds: float, figures: Figures) -> None:
    got: dict[str, dict[str, float]] = {}
    for system in SYSTEMS:
        gate = gates[system]
        clocks: dict[str, CpuClock] = {
            "gateway": process_clock(gate.pid),
            "gateway event loop": partial(thread_cpu_s, gate.pid),
            "kafka": process_clock(*kafka),
        }
        meter = CpuMeter({k: v for k, v in clocks.items() if k != "kafka" or kafka})
        before = meter.read()
        done, elapsed, hist = asyncio.run(_closed_loop(gate, seconds))
        cpu = per_unit_us(CpuMeter.used(before, meter.read()), done)
        got[system] = {
            "requests/s": done / elapsed,
            "p50": hist.get_value_at_percentile(50) / 1000,
            "p99": hist.get_value_at_percentile(99) / 1000,
            **{f"{name} CPU": us for name, us in cpu.items()},
        }
    units = {"requests/s": "req/s", "p50": "ms", "p99": "ms"}
    for measure in got["jobq"]:
        figures.add(
            "gateway", measure, units.get(measure, "µs/request"), got["jobq"][measure], got["floor"][measure]
        )


# ---- the relay and worker hops -------------------------------------------------------------------------
def _produce(ep: Endpoints, topic: str, queue: str, n: int) -> None:
    """``n`` envelopes of the no-op job for ``queue`` (keys: their ids), as the gateway writes them."""
    producer = Producer({"bootstrap.servers": ep.kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5})
    at = now_ms()
    for i in range(n):
        env = new_envelope(queue, jobq_app.KIND, None, id=f"f{i}", at_ms=at)
        while True:
            try:
                producer.produce(topic, encode(env), record_key(env))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("the relay hop's records were not all delivered")


def _pending_key(system: str, queue: str) -> str:
    return QueueKeys(queue).ready if system == "jobq" else floor_keys(queue)[0]


@dataclass(frozen=True)
class Mark:
    at: float
    count: int
    cpu: float
    redis: float


def _mark(client: redis.Redis, pid: int, count: Callable[[], int]) -> Mark:
    return Mark(time.perf_counter(), count(), tree_cpu_s([pid]), redis_cpu_s(client))


def _wait(child: Child, probe: Callable[[], bool], timeout_s: float, interval_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if child.returncode not in (None, 0):
            raise RuntimeError(f"{child.name} exited with {child.returncode} before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{child.name}: no {what} in {timeout_s:g} s")
        time.sleep(interval_s)


def _relay_one(ep: Endpoints, scope: Scope, system: str, n: int) -> dict[str, float]:
    """Spawn ``system``'s relay on the scope's topic; time and CPU until all ``n`` jobs are pending."""
    client = redis.Redis.from_url(ep.redis_url or "")
    key = _pending_key(system, scope.name)
    if system == "jobq":
        settings = {"JOBQ_RELAY_LOCK_DELAY_S": "0", "JOBQ_RELAY_BATCH": str(RELAY_BATCH)}
        env = PipelineEnv(ep.exports(), scope=scope, log_level="warning", settings=settings).relay()
        argv = service_argv("relay")
    else:
        env = dict(os.environ)
        argv = python_m(
            "loadtest.floors.relay",
            *(ep.kafka_bootstrap, scope.name, ep.redis_url or "", scope.name),
            *("--group", f"floor-{scope.tag}", "--batch", str(RELAY_BATCH)),
        )
    with Children(grace_s=30.0) as procs:
        spawned = time.perf_counter()
        child = procs.start(f"{system}-relay", argv, env=env)

        def pending() -> int:
            return int(client.zcard(key))

        _wait(child, lambda: pending() > 0, 120, 0.005, "first write")
        first = _mark(client, child.pid, pending)
        _wait(child, lambda: pending() >= n, 600, 0.01, f"{n} jobs pending")
        last = _mark(client, child.pid, pending)
    client.close()
    jobs = max(1, last.count - first.count)
    return {
        "jobs/s": jobs / (last.at - first.at),
        "relay CPU": (last.cpu - first.cpu) / jobs * 1e6,
        "Redis CPU": (last.redis - first.redis) / jobs * 1e6,
        "spawn → first write": first.at - spawned,
    }


def _worker_one(ep: Endpoints, queue: str, system: str, n: int) -> dict[str, float]:
    """Spawn ``system``'s worker (one process, :data:`SLOTS`, burst) on the ``n`` pending jobs of
    ``queue``: spawn → first claim, the steady stretch from 1 % done to the last job, spawn → last job."""
    url = ep.redis_url or ""
    client = redis.Redis.from_url(url)
    key, counter = _pending_key(system, queue), count_key(queue)
    argv, env = _worker_command(url, queue, system)

    def done() -> int:
        return int(client.get(counter) or 0)

    client.delete(counter)  # the queue's name is the same for both systems
    with Children(grace_s=30.0) as procs:
        spawned = time.perf_counter()
        child = procs.start(f"{system}-worker", argv, env=env)
        _first_claim(child, client, key, n)
        claimed = time.perf_counter()
        _wait(child, lambda: done() >= max(1, n // 100), 120, 0.005, "1 % done")
        first = _mark(client, child.pid, done)
        _wait(child, lambda: done() >= n, 600, 0.005, f"{n} jobs done")
        last = _mark(client, child.pid, done)
        child.wait(60)  # burst: it exits once the queue is empty
    client.close()
    jobs = max(1, last.count - first.count)
    return {
        "jobs/s steady": jobs / (last.at - first.at),
        "jobs/s spawn → last job": n / (last.at - spawned),
        "worker CPU": (last.cpu - first.cpu) / jobs * 1e6,
        "Redis CPU": (last.redis - first.redis) / jobs * 1e6,
        "spawn → first claim": claimed - spawned,
    }


def _first_claim(child: Child, client: redis.Redis, key: str, n: int) -> None:
    """Wait until the worker ``child`` claimed one of the ``n`` jobs pending under ``key``."""
    _wait(child, lambda: int(client.zcard(key)) < n, 120, 0.002, "first claim")


def _worker_command(url: str, queue: str, system: str) -> tuple[list[str], dict[str, str]]:
    """``system``'s worker on ``queue`` (one process, :data:`SLOTS`, burst): its argv and environment."""
    if system == "jobq":
        env = PipelineEnv({"JOBQ_REDIS_URL": url}, log_level="warning").worker()
        return worker_argv(queue, app="loadtest.floors.jobq_app:registry", concurrency=SLOTS, burst=True), env
    argv = python_m("loadtest.floors.worker", url, queue, "--slots", str(SLOTS), "--burst")
    return argv, dict(os.environ)


def _worker_profiles(ep: Endpoints, tag: str, n: int, seconds: float, folder: Folder) -> dict[str, Profile]:
    """Each system's worker draining ``n`` fresh jobs while py-spy records it for ``seconds`` (from its
    first claim; one system after the other)."""
    url = ep.redis_url or ""
    queue = Scope("bench", f"{tag}wp").name
    _fill(url, queue, n)
    client = redis.Redis.from_url(url)
    out: dict[str, Profile] = {}
    for system in SYSTEMS:
        argv, env = _worker_command(url, queue, system)
        with Children(grace_s=30.0) as procs:
            child = procs.start(f"{system}-worker", argv, env=env)
            _first_claim(child, client, _pending_key(system, queue), n)
            out |= asyncio.run(record_profiles({f"{system} worker": child.pid}, seconds, folder / system))
            child.wait(600)
    client.close()
    return out


def _relay_round(ep: Endpoints, tag: str, n: int, figures: Figures, rep: int) -> str:
    """The relay hop: ``n`` envelopes produced to a fresh topic, then moved into Redis by each system in
    turn; the queue (the topic's name) they wrote."""
    scope = Scope("bench", f"{tag}r")
    _topic(ep, scope.name)
    _produce(ep, scope.name, scope.name, n)
    order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
    _add_hop(figures, "relay", {system: _relay_one(ep, scope, system, n) for system in order})
    return scope.name


def _relay_and_worker_round(ep: Endpoints, tag: str, n: int, figures: Figures, rep: int) -> None:
    queue = _relay_round(ep, tag, n, figures, rep)
    order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
    _add_hop(figures, "worker", {system: _worker_one(ep, queue, system, n) for system in order})


def _relay_alone(endpoints: Endpoints | None, sizes: Sizes, figures: Figures, loads: list[str]) -> None:
    """``--hop relay``: the relay hop's repetitions on a stack of its own (``endpoints`` when given)."""
    tag = f"floors{os.getpid()}"
    with bench_stack("floors", endpoints) as ep:
        for rep in range(sizes.reps):
            load = f"{_loadavg():.1f}"
            _relay_round(ep, f"{tag}r{rep}", sizes.jobs, figures, rep)
            loads.append(f"{load} → {_loadavg():.1f}")


def _add_hop(figures: Figures, hop: str, got: dict[str, dict[str, float]]) -> None:
    for measure in got["jobq"]:
        unit = "jobs/s" if measure.startswith("jobs/s") else "s" if "→" in measure else "µs/job"
        figures.add(hop, measure, unit, got["jobq"][measure], got["floor"][measure])


def _fill(url: str, queue: str, n: int) -> None:
    """``n`` no-op jobs pending in jobq's ``queue`` and in the floor's lease queue of that name, written as
    their relays write them (jobq: the engine's ``enqueue_batch``; the floor: :func:`lease.write`)."""
    at = now_ms()
    envs = [new_envelope(queue, jobq_app.KIND, None, id=f"f{i}", at_ms=at) for i in range(n)]

    async def jobq() -> None:
        client = aioredis.Redis.from_url(url, socket_timeout=90)
        engine = Engine(client)
        for i in range(0, n, RELAY_BATCH):
            await engine.enqueue_batch(envs[i : i + RELAY_BATCH])
        await client.aclose()

    asyncio.run(jobq())
    with redis.Redis.from_url(url) as client:
        for i in range(0, n, RELAY_BATCH):
            pipe = client.pipeline(transaction=False)
            floor_write(pipe, queue, [(record_key(e), encode(e)) for e in envs[i : i + RELAY_BATCH]], at)
            pipe.execute()


def _worker_alone_round(ep: Endpoints, tag: str, n: int, figures: Figures, rep: int) -> None:
    """The worker hop on jobs written straight into Redis (``--hop worker``: no relay, no Kafka)."""
    queue = Scope("bench", f"{tag}w").name
    _fill(ep.redis_url or "", queue, n)
    order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
    _add_hop(figures, "worker", {system: _worker_one(ep, queue, system, n) for system in order})


def _startup_round(figures: Figures) -> None:
    jobq = statistics.median(command_cost(python_m("jobq", "--help"))[0] for _ in range(3))
    floor = statistics.median(command_cost(python_m("loadtest.floors.worker", "--help"))[0] for _ in range(3))
    figures.add("start-up", "--help (jobq; the floor worker)", "s", jobq, floor)


# ---- the whole path ------------------------------------------------------------------------------------
@dataclass
class Path:
    """A running path: where to post jobs, where its no-op jobs count themselves, its CPU clocks."""

    url: str
    queue: str
    redis_url: str
    clocks: dict[str, CpuClock]
    procs: Children
    profiled: dict[str, int] = field(default_factory=dict)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def check(self) -> None:
        if dead := self.procs.dead():
            raise RuntimeError(f"a path process exited: {dead}")


def _common_clocks(ep: Endpoints, sync_redis: redis.Redis) -> dict[str, CpuClock]:
    kafka = _kafka_pids(ep)
    clocks = {"kafka": process_clock(*kafka)} if kafka else {}
    clocks["redis"] = lambda: redis_cpu_s(sync_redis, children=True)
    return clocks


@asynccontextmanager
async def _jobq_path(ep: Endpoints, tag: str, sync_redis: redis.Redis) -> AsyncIterator[Path]:
    async with e2e_bench.pipeline(ep, tag, app="loadtest.floors.jobq_app:registry") as pipe:
        clocks = {
            name: process_clock(*(c.pid for c in pipe.role(role))) for name, role in e2e_bench.ROLES.items()
        }
        clocks |= _common_clocks(ep, sync_redis)
        if ep.consul_addr and (consul := listening_pid(int(ep.consul_addr.rsplit(":", 1)[1]), "consul")):
            clocks["consul"] = process_clock(consul)
        profiled = {name: pipe.role(role)[0].pid for name, role in e2e_bench.PROFILED.items()}
        yield Path(pipe.url, pipe.queue, ep.redis_url or "", clocks, pipe.procs, profiled)


@asynccontextmanager
async def _floor_path(ep: Endpoints, tag: str, sync_redis: redis.Redis) -> AsyncIterator[Path]:
    """The floors as a path: gateway → topic → relay → lease queue → 2 workers × 50 slots."""
    scope = Scope("bench", tag)
    await asyncio.to_thread(_topic, ep, scope.name)
    port, url = free_port(), ep.redis_url or ""
    roles = {
        "gateway": python_m("loadtest.floors.gateway", ep.kafka_bootstrap, scope.name, str(port)),
        "relay": python_m(
            "loadtest.floors.relay",
            ep.kafka_bootstrap,
            scope.name,
            url,
            scope.name,
            "--group",
            f"floor-{tag}",
        ),
    }
    worker = python_m("loadtest.floors.worker", url, scope.name, "--slots", str(e2e_bench.CONCURRENCY))
    procs = Children(grace_s=30.0)
    try:
        gateway = procs.start("floor-gateway", roles["gateway"])
        relay = procs.start("floor-relay", roles["relay"])
        workers = [procs.start(f"floor-worker-{i}", worker) for i in range(e2e_bench.WORKERS)]
        path_url = f"http://127.0.0.1:{port}"
        await gateway.wait_ready_async(http_ok(path_url + "/readyz"), timeout_s=60)
        clocks = {
            "gateway": process_clock(gateway.pid),
            "relay": process_clock(relay.pid),
            f"workers ({e2e_bench.WORKERS})": process_clock(*(w.pid for w in workers)),
        }
        clocks |= _common_clocks(ep, sync_redis)
        profiled = {"gateway": gateway.pid, "relay": relay.pid, "worker": workers[0].pid}
        path = Path(path_url, scope.name, url, clocks, procs, profiled)
        client = aioredis.Redis.from_url(url)
        try:  # warm-up: one job through the whole path (the relay has joined its group, the workers poll)
            await _post_and_wait(path, client, 1, 90)
        finally:
            await client.aclose()
        yield path
    finally:
        await asyncio.to_thread(procs.stop)


async def _post_and_wait(path: Path, client: aioredis.Redis, jobs: int, timeout_s: float) -> None:
    before = int(await client.get(count_key(path.queue)) or 0)
    async with RawHttp(*path.address, 1, {"Authorization": f"Bearer {TOKEN}"}) as http:
        status, body = await http.send(
            http.request("POST", f"/v1/queues/{path.queue}/jobs", orjson.dumps({"kind": jobq_app.KIND}))
        )
        if status != 202:
            raise RuntimeError(f"warm-up enqueue refused: {status} {body[:200]!r}")
    await _wait_count(path, client, before + jobs, timeout_s)


async def _wait_count(path: Path, client: aioredis.Redis, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while int(await client.get(count_key(path.queue)) or 0) < n:
        path.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.queue}: fewer than {n} jobs done in {timeout_s:g} s")
        await asyncio.sleep(0.02)


def _meter(path: Path) -> CpuMeter:
    return CpuMeter({**path.clocks, "generator": time.process_time, "machine": machine_busy_s})


def _system(per_job: dict[str, float]) -> dict[str, float]:
    """The path's processes (not the generator, not the machine) and their sum."""
    out = {k: v for k, v in per_job.items() if k not in ("generator", "machine")}
    return {**out, "system total": sum(out.values())}


async def _rate_phase(path: Path, rate: float, seconds: float) -> dict[str, float]:
    """One job per request at ``rate`` (open loop); CPU µs per job from the first request to the last job
    done, by process; and the p50/p99 of the 202 from each request's due time."""
    client = aioredis.Redis.from_url(path.redis_url)
    before = int(await client.get(count_key(path.queue)) or 0)
    meter = _meter(path)
    start = await asyncio.to_thread(meter.read)
    hist, total = _hist(), int(rate * seconds)
    loop = asyncio.get_running_loop()
    async with RawHttp(*path.address, 64, {"Authorization": f"Bearer {TOKEN}"}) as http:
        request = http.request("POST", f"/v1/queues/{path.queue}/jobs", orjson.dumps({"kind": jobq_app.KIND}))

        async def one(due: float) -> None:
            status, body = await http.send(request)
            if status != 202:
                raise RuntimeError(f"enqueue refused: {status} {body[:200]!r}")
            hist.record_value(max(1, int((loop.time() - due) * 1e6)))

        t0, tasks = loop.time() + 0.1, []
        for i in range(total):
            due = t0 + i / rate
            if (delay := due - loop.time()) > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(due)))
        await asyncio.gather(*tasks)
    await _wait_count(path, client, before + total, 120)
    used = CpuMeter.used(start, await asyncio.to_thread(meter.read))
    await client.aclose()
    return {
        **{f"CPU {k}": v for k, v in _system(per_unit_us(used, total)).items()},
        "202 p50 from due time": hist.get_value_at_percentile(50) / 1000,
        "202 p99 from due time": hist.get_value_at_percentile(99) / 1000,
    }


async def _batched_phase(
    path: Path, seconds: float, profile: tuple[float, Folder] | None = None, clients: int = 4
) -> tuple[dict[str, float], dict[str, Profile]]:
    """4 clients posting 1,000 jobs a request as fast as answered while fewer than :data:`BACKLOG` jobs
    wait in the path; over the window after a warm-up third: jobs finished per second and CPU µs per job
    finished, by process. ``profile`` (seconds, folder): then py-spy records the path's
    :attr:`Path.profiled` processes while the load goes on."""
    client = aioredis.Redis.from_url(path.redis_url)
    meter = _meter(path)
    body = orjson.dumps({"jobs": [{"kind": jobq_app.KIND} for _ in range(1000)]})
    stop, room = asyncio.Event(), asyncio.Event()
    posted = done = int(await client.get(count_key(path.queue)) or 0)
    marks: list[tuple[float, int, dict[str, float]]] = []
    profiles: dict[str, Profile] = {}
    started = time.perf_counter()

    async def poster(http: RawHttp) -> None:
        nonlocal posted
        request = http.request("POST", f"/v1/queues/{path.queue}/jobs", body)
        while not stop.is_set():
            await room.wait()
            posted += 1000
            await http.send(request)

    async def backlog() -> None:
        """Open the posters' way while the jobs answered and not yet done are fewer than BACKLOG."""
        nonlocal done
        while not stop.is_set():
            done = int(await client.get(count_key(path.queue)) or 0)
            if posted - done < BACKLOG:
                room.set()
            else:
                room.clear()
            await asyncio.sleep(0.01)
        room.set()

    async def window() -> None:
        nonlocal profiles
        try:
            for at in (started + seconds / 3, started + seconds):
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                done = int(await client.get(count_key(path.queue)) or 0)
                marks.append((time.perf_counter(), done, (await asyncio.to_thread(meter.read)).seconds))
            if profile is not None and path.profiled:
                profiles = await record_profiles(path.profiled, profile[0], profile[1], rate=250)
        finally:
            stop.set()

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with RawHttp(*path.address, clients, headers) as http, asyncio.TaskGroup() as tasks:
        tasks.create_task(window())
        tasks.create_task(backlog())
        for _ in range(clients):
            tasks.create_task(poster(http))
    path.check()
    await client.aclose()
    (t1, n1, c1), (t2, n2, c2) = marks
    used = {name: c2[name] - c1[name] for name in c1}
    figures = {f"CPU {k}": v for k, v in _system(per_unit_us(used, n2 - n1)).items()}
    return {"jobs/s end to end": (n2 - n1) / (t2 - t1), **figures}, profiles


_PATH_UNITS = {"jobs/s end to end": "jobs/s", "202 p50 from due time": "ms", "202 p99 from due time": "ms"}


async def _path_round(
    ep: Endpoints, tag: str, sizes: Sizes, figures: Figures, rep: int, profile: tuple[float, Folder] | None
) -> dict[str, Profile]:
    """Each system's path in turn (alternating the order per repetition): the open loop, then batches."""
    sync_redis = redis.Redis.from_url(ep.redis_url or "")
    got: dict[str, dict[str, dict[str, float]]] = {}
    profiles: dict[str, Profile] = {}
    paths = {"jobq": _jobq_path, "floor": _floor_path}
    try:
        for system in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
            async with paths[system](ep, f"{tag}p{system}", sync_redis) as path:
                single = await _rate_phase(path, sizes.rate, sizes.rate_s)
                own = (profile[0], profile[1] / system) if profile is not None else None
                batched, recorded = await _batched_phase(path, sizes.batch_s, own)
            got[system] = {"path, 1 job/request": single, "path, batched": batched}
            for name, p in recorded.items():
                p.name = f"{system} {name}"
                profiles[p.name] = p
    finally:
        sync_redis.close()
    for hop in ("path, 1 job/request", "path, batched"):
        measures = [m for m in got["jobq"][hop] if m in got["floor"][hop]]
        measures += [m for m in got["jobq"][hop] if m not in measures]
        for measure in measures:
            unit = _PATH_UNITS.get(measure, "µs/job")
            floor = got["floor"][hop].get(measure, float("nan"))
            figures.add(hop, measure, unit, got["jobq"][hop][measure], floor)
    return profiles


async def _gateway_profiles(gates: dict[str, Gate], seconds: float, folder: Folder) -> dict[str, Profile]:
    """Each gateway under the same closed loop while py-spy records it (one after the other)."""
    out: dict[str, Profile] = {}
    for system in SYSTEMS:
        load = asyncio.create_task(_closed_loop(gates[system], seconds + 2))
        out |= await record_profiles({f"{system} gateway": gates[system].pid}, seconds, folder / system)
        await load
    return out


def _writer(text: str) -> Callable[[Folder], None]:
    def write(path: Folder) -> None:
        path.write_text(text)

    return write


def _number(value: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _table(figures: Figures) -> str:
    lines = [
        "## Each hop beside its floor (medians; the ratio is jobq / floor per repetition, then its median)",
        "",
        "| hop | measure | unit | jobq | floor | jobq / floor |",
        "|---|---|---|---:|---:|---:|",
    ]
    for hop in HOPS:
        for (h, measure), unit in figures.units.items():
            if h != hop:
                continue
            med = {s: statistics.median(figures.samples[hop, measure, s]) for s in (*SYSTEMS, "ratio")}
            ratio = f"{med['ratio']:.2f}×" if math.isfinite(med["ratio"]) else "—"
            cells = [hop, measure, unit, _number(med["jobq"]), _number(med["floor"]), ratio]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _other_rounds(
    ep: Endpoints, tag: str, sizes: Sizes, figures: Figures, rep: int, folder: Folder | None
) -> dict[str, Profile]:
    """A repetition's rounds after the gateway's: relay and worker, start-up, the whole path (profiled in
    the last repetition when ``folder`` is given)."""
    _relay_and_worker_round(ep, tag, sizes.jobs, figures, rep)
    _startup_round(figures)
    at = (PROFILE_S, folder) if folder is not None and rep == sizes.reps - 1 else None
    return asyncio.run(_path_round(ep, tag, sizes, figures, rep, at))


def _worker_alone(
    endpoints: Endpoints | None, sizes: Sizes, figures: Figures, loads: list[str], folder: Folder | None
) -> dict[str, Profile]:
    """``--hop worker``: the worker hop's repetitions on a Redis of its own (``endpoints``' when given),
    then (``folder``) each worker's profile."""
    tag = f"floors{os.getpid()}"
    with nullcontext(endpoints.redis_url) if endpoints else redis_only("floors") as url:
        ep = Endpoints(kafka_bootstrap="", consul_addr="", redis_url=url)
        for rep in range(sizes.reps):
            load = f"{_loadavg():.1f}"
            _worker_alone_round(ep, f"{tag}r{rep}", sizes.jobs, figures, rep)
            loads.append(f"{load} → {_loadavg():.1f}")
        return {} if folder is None else _worker_profiles(ep, tag, sizes.jobs, WORKER_PROFILE_S, folder)


def run(
    quick: bool = False,
    endpoints: Endpoints | None = None,
    profile: bool | None = None,
    hop: str | None = None,
) -> Report:
    """The scenario; ``profile`` (default: not ``quick``) adds the py-spy profiles; ``hop`` (one of
    :data:`ALONE`): that hop alone."""
    if hop is not None and hop not in ALONE:
        raise ValueError(f"hop {hop!r}: only {', '.join(ALONE)} runs alone")
    sizes = QUICK if quick else FULL
    profile = not quick if profile is None else profile
    params = {**sizes.__dict__, "quick": quick, "slots": SLOTS, "profile": profile, "hop": hop or "every hop"}
    report = Report("floors", params)
    figures = Figures()
    loads: list[str] = []
    profiles: dict[str, Profile] = {}
    folder = Folder(tempfile.mkdtemp(prefix="jobq-bench-floors-"))
    tag = f"floors{os.getpid()}"
    try:
        if hop == "worker":
            profiles = _worker_alone(endpoints, sizes, figures, loads, folder if profile else None)
            return _report(report, figures, loads, profiles, sizes, hop=hop)
        if hop == "relay":
            _relay_alone(endpoints, sizes, figures, loads)
            return _report(report, figures, loads, {}, sizes, hop=hop)
        with bench_stack("floors", endpoints) as ep, _gateways(ep, tag) as gates:
            kafka = _kafka_pids(ep)
            for gate in gates.values():  # a warm-up, not measured: the first connections, the broker's writes
                asyncio.run(_closed_loop(gate, 0.5 if quick else 2.0))
            for rep in range(sizes.reps):
                load = f"{_loadavg():.1f}"
                _gateway_round(gates, kafka, sizes.gate_s, figures)
                if hop is None:
                    profiles |= _other_rounds(
                        ep, f"{tag}r{rep}", sizes, figures, rep, folder if profile else None
                    )
                loads.append(f"{load} → {_loadavg():.1f}")
            if profile:
                profiles = asyncio.run(_gateway_profiles(gates, PROFILE_S, folder)) | profiles
        return _report(report, figures, loads, profiles, sizes, hop=hop)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _report(
    report: Report,
    figures: Figures,
    loads: list[str],
    profiles: dict[str, Profile],
    sizes: Sizes,
    *,
    hop: str | None,
) -> Report:
    for (measured, measure, system), values in figures.samples.items():
        unit = "x" if system == "ratio" else figures.units[measured, measure]
        report.add(f"{measured}: {measure} — {system}", unit, values)
    report.params["load average (1 min) at each repetition's start → end"] = loads
    gateway = f"gateway: 64 connections, closed loop, {sizes.gate_s:g} s each"
    shapes = (
        f"the worker hop alone: {sizes.jobs:,} jobs written straight into a Redis of its own, one process "
        f"each, {SLOTS} slots (burst)"
        if hop == "worker"
        else f"the gateway hop alone: {gateway}"
        if hop == "gateway"
        else f"the relay hop alone: {sizes.jobs:,} envelopes produced to a fresh topic, then moved into "
        f"Redis by one process each, batches of {RELAY_BATCH}"
        if hop == "relay"
        else f"{gateway}; relay and worker: "
        f"{sizes.jobs:,} jobs, one process each, the worker {SLOTS} slots (burst); the path: 2 workers × "
        f"{e2e_bench.CONCURRENCY}, jobq's with its scheduler shipping events and Consul, "
        f"{sizes.rate:g} single requests/s for {sizes.rate_s:g} s, then 4 × 1,000-job requests for "
        f"{sizes.batch_s:g} s (window: the last two thirds)"
    )
    report.notes += [
        f"load average (1 min) at each repetition's start → end: {'; '.join(loads)}",
        shapes,
        "the job everywhere: one Redis round trip (INCR) that counts it; Redis CPU from INFO cpu (the "
        "path's with its forks), processes from /proc with their trees, Kafka's JVM by its port",
    ]
    report.summary = _table(figures)
    report.sections.append(report.summary)
    files = {name: f"profile-{name.replace(' ', '-')}.txt" for name, p in profiles.items() if not p.error}
    for name, file in files.items():
        report.artifacts[file] = _writer(profiles[name].raw)
    if profiles:
        intro = (
            f"py-spy record --nonblocking, {WORKER_PROFILE_S:g} s at 250 Hz from its first claim: each "
            f"worker draining {sizes.jobs:,} fresh jobs, one after the other."
            if hop == "worker"
            else f"py-spy record --nonblocking, {PROFILE_S:g} s at 250 Hz: each gateway alone under the "
            "gateway hop's closed loop; the path's processes (jobq: gateway, relay, one worker, the "
            "scheduler; floor: gateway, relay, one worker) under the batched load of the last repetition, "
            "after its CPU window."
        ) + " Self % = samples with the function on top of the stack; total % = anywhere on it."
        report.sections.append(
            "\n".join(["## Profiles", "", intro, profile_section(list(profiles.values()), files=files)])
        )
    return report
