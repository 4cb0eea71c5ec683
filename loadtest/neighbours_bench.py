"""``./run bench neighbours``: one queue never holds another (issue 56's acceptance benchmark).

Two queues on one topic (3 partitions) through a relay process and two worker processes (``jobq worker``)
on a stack of its own (or the one it is handed): the **neighbour**, a plain queue fed open loop at a fixed
rate, and a **held** exclusive queue (100 exclusivity values) with a backlog of ``backlog`` jobs (50,000 by
default, the issue's number), held in each of three ways in turn:

* ``memory``: over its memory budget — its workers' claims paused (its jobs pile up in Redis), its own
  ``memory_budget`` an eighth of what its backlog takes (at the bytes per job the neighbour's records
  measure); on a stack of its own Redis's ``maxmemory`` is set so that the whole backlog in Redis would
  fill it (the global guard stops at 90 %);
* ``paused``: paused at the relay (its Consul rate ``paused``, as ``jobq queue pause`` writes it);
* ``rate``: limited to 5 jobs/s (``5/s``), its holding lane draining at that rate meanwhile.

For each case: the held queue is held, its backlog produced, and the relay reads past it (every record
written or set aside into the holding lane); then the neighbour runs **alone** (the held queue receives
nothing, and its paused or over-budget jobs move nowhere; a limited one's lane drains at 5/s) and
**beside** the held queue's arrivals (as many jobs/s as the neighbour's, each stepping aside), ``window_s``
each, alternately in ``slices`` slices (alone, beside; beside, alone; ...) so that both sides see the same
machine — on a shared machine, back-to-back windows differ by more than the promise.

The neighbour's **accepted → started** of each job: from its envelope's stamp (the producer's, as the
gateway stamps a job it accepts; the Kafka hop and the relay's are inside) to the ``started_at`` Redis
dated its claim with — the Redis-dated ``enqueued_at`` (the relay's write) cannot be the start, as the relay
is the hop a held queue could slow. Reported: p50 and p99 of each side, the p99 beside over the p99 alone
(the promise: at most 1.5×), the p99 of its two hops split at the Redis-dated write (the relay's: accepted
→ written; the claim's: written → started), the relay process's CPU (% of a core), and what else loaded
the machine meanwhile (the load average, Redis's forks).

Then the case is **released** (budget lifted and claims resumed; the pause lifted; the limit lifted) and the
held queue's every job must run: its handler (:mod:`loadtest.neighbours_app`) pushes each run's job id on a
list in Redis, so "ran once" is each id there exactly once and "in order per exclusivity key" is each key's
ids in the order they were produced (an exclusive queue runs one job of a key at a time). The relay's
global memory guard must never have held a batch (``jobq_relay_held_seconds_total{reason="memory"}`` of
the topic, read from the relay's ``/metrics``, stays 0).

Everything — the load generator, Kafka, Redis, the relay and the workers — shares this machine's cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import consul
import redis.asyncio as aioredis
from confluent_kafka import Consumer, TopicPartition

from jqcore.envelope import encode, new_envelope, record_key
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import job_topics
from jqengine import Engine, QueueConfig, memory_info
from jqruntime.kafka import AsyncProducer, Record
from jqruntime.topicadmin import ensure
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, Scope, service_argv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Children, http_ok
from jqweb.overview import held_rows
from loadtest.costs import process_clock
from loadtest.neighbours_app import NOOP, RECORDED, ran_key
from loadtest.report import Report, until
from loadtest.stacks import bench_stack

__all__ = ["CASES", "Sizes", "run"]

APP = "loadtest.neighbours_app:registry"
PARTITIONS = 3
KEYS = 100
"""Exclusivity values of the held queue's jobs (job ``i`` has value ``k{i % KEYS}``)."""
CASES = ("memory", "paused", "rate")
"""In this order: ``memory`` first, so that on its own stack ``maxmemory`` is sized from a Redis that holds
little but the backlog to come."""
LIMIT = "5/s"
BOUND = 1.5
"""The promise: the neighbour's p99 beside a held queue at most this many times its p99 alone."""
NEIGHBOUR_CONCURRENCY, HELD_CONCURRENCY = 16, 32
PRODUCE_CHUNK = 5000


@dataclass(frozen=True)
class Sizes:
    backlog: int
    """The held queue's jobs produced before the neighbour's window beside it."""
    rate: float
    """The neighbour's jobs per second (and the held queue's, during that window)."""
    window_s: float
    """The neighbour's time alone and beside, each (alternately, in ``slices`` slices)."""
    slices: int


FULL = Sizes(50_000, 200.0, 10.0, 5)
QUICK = Sizes(300, 50.0, 0.2, 1)


@dataclass
class Held:
    """One case's held queue and the jobs produced for it so far (job ``i``: id ``h<i>``)."""

    case: str
    queue: str
    produced: int = 0

    def record(self, topic: str) -> Record:
        i = self.produced
        self.produced += 1
        env = new_envelope(self.queue, RECORDED, None, id=f"h{i:07d}", excl=f"k{i % KEYS}")
        return Record(topic, encode(env), record_key(env))


@dataclass
class Bench:
    """The running pipeline of one run: its topic, queues, processes and clients."""

    ep: Endpoints
    tag: str
    own_stack: bool
    procs: Children
    log_dir: Path
    metrics_url: str
    client: aioredis.Redis
    producer: AsyncProducer
    consul: consul.Consul
    offsets: Consumer
    scope: Scope = field(init=False)

    def __post_init__(self) -> None:
        self.scope = Scope("bench", self.tag)

    @property
    def topic(self) -> str:
        return self.scope.name

    @property
    def neighbour(self) -> str:
        return f"{self.topic}.neighbour"

    def held_queue(self, case: str) -> str:
        return f"{self.topic}.{case}"

    def rate_key(self, queue: str) -> str:
        return f"jobq-bench/{self.tag}/queue-rates/{queue}"

    @property
    def engine(self) -> Engine:
        return Engine(self.client)

    def check(self) -> None:
        if dead := self.procs.dead():
            raise RuntimeError(f"a pipeline process exited: {dead} (logs in {self.log_dir})")


@asynccontextmanager
async def _pipeline(ep: Endpoints, own_stack: bool, warm_up: int) -> AsyncIterator[Bench]:
    """The topic (with its holding lane), the held queues' configuration, a relay and two worker pools;
    ``warm_up`` neighbour jobs through them (the lock taken, the workers claiming, a job's bytes known)."""
    tag = f"nb{secrets.token_hex(3)}"
    scope = Scope("bench", tag)
    kafka = KafkaSettings(bootstrap=ep.kafka_bootstrap)
    await asyncio.to_thread(ensure, kafka, job_topics([scope.name], PARTITIONS))
    client = aioredis.Redis.from_url(ep.redis_url or "")
    for case in CASES:
        await Engine(client).admin.configure_queue(
            f"{scope.name}.{case}", QueueConfig(mode="exclusive", excl_key="excl")
        )
    port = free_port()
    spec = PipelineEnv(
        ep.exports(),
        scope=scope,
        log_level="warning",
        settings={"JOBQ_RELAY_LOCK_DELAY_S": "0", "JOBQ_RELAY_METRICS_PORT": str(port)},
    )
    log_dir = Path(tempfile.mkdtemp(prefix=f"bench-{tag}-"))
    procs = Children(grace_s=30.0)
    host, consul_port = ep.consul_addr.rsplit(":", 1)
    offsets = Consumer({"bootstrap.servers": ep.kafka_bootstrap, "group.id": f"bench-{tag}.{scope.name}"})
    bench = Bench(
        ep,
        tag,
        own_stack,
        procs,
        log_dir,
        f"http://127.0.0.1:{port}/metrics",
        client,
        AsyncProducer(kafka, linger_ms=1),
        consul.Consul(host=host, port=int(consul_port)),
        offsets,
    )
    held = ",".join(bench.held_queue(c) for c in CASES)
    roles = [
        ("jqrelay", service_argv("relay"), spec.relay()),
        ("worker-n", worker_argv(bench.neighbour, app=APP, concurrency=NEIGHBOUR_CONCURRENCY), spec.worker()),
        ("worker-h", worker_argv(held, app=APP, concurrency=HELD_CONCURRENCY), spec.worker()),
    ]
    try:
        for name, argv, env in roles:
            procs.start(name, argv, output=log_dir / f"{name}.log", env=env)
        await procs.members[0].wait_ready_async(http_ok(bench.metrics_url), timeout_s=60)
        await _neighbour_window(bench, warm_up, 100.0, None)
        yield bench
    finally:
        await asyncio.to_thread(procs.stop)
        await asyncio.to_thread(offsets.close)
        bench.producer.close()
        await client.aclose()
    shutil.rmtree(log_dir)  # the processes' logs are kept (and named in the error) only when a run fails


@dataclass
class Waits:
    """The neighbour's jobs of one window, each split at its Redis-dated write (ms)."""

    total: list[float]
    """accepted → started."""
    relay: list[float]
    """accepted → written (``enqueued_at``): the Kafka hop and the relay's."""
    claim: list[float]
    """written → started: the wait for a worker's claim."""


async def _neighbour_window(bench: Bench, n: int, rate: float, held: Held | None) -> Waits:
    """``n`` neighbour jobs open loop at ``rate`` (job ``i`` sent at ``t0 + i / rate`` whatever happened to
    the others), with one job of ``held`` beside each when given; each neighbour job's waits once all have
    started."""
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.05
    stamps: dict[str, int] = {}
    sends = []
    for i in range(n):
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        env = new_envelope(bench.neighbour, NOOP, None)
        stamps[env.id] = env.enqueued_at
        records = [Record(bench.topic, encode(env), record_key(env))]
        if held is not None:
            records.append(held.record(bench.topic))
        sends.append(asyncio.create_task(bench.producer.produce_many(records)))
    await asyncio.gather(*sends)
    ids = list(stamps)
    times: dict[str, tuple[int, int]] = {}

    async def all_started() -> bool:
        missing = [i for i in ids if i not in times]
        for job in await bench.engine.reads.get_jobs(bench.neighbour, missing):
            if job is not None and job.started_at:
                times[job.id] = (job.enqueued_at or 0, job.started_at)
        return len(times) == len(ids)

    await until(all_started, "the neighbour's jobs started", 60 + n / 50, alive=bench.check)
    return Waits(
        [float(times[i][1] - stamps[i]) for i in ids],
        [float(times[i][0] - stamps[i]) for i in ids],
        [float(times[i][1] - times[i][0]) for i in ids],
    )


def _caught_up(bench: Bench) -> bool:
    """Whether the relay has committed the topic up to its end (every record written or set aside)."""
    md = bench.offsets.list_topics(bench.topic, timeout=10)
    parts = [TopicPartition(bench.topic, p) for p in md.topics[bench.topic].partitions]
    done = sum(max(0, tp.offset) for tp in bench.offsets.committed(parts, timeout=10))
    ends = sum(bench.offsets.get_watermark_offsets(tp, timeout=10)[1] for tp in parts)
    return done >= ends


async def _held_for(bench: Bench, queue: str) -> str:
    """Why the relay's snapshot (``jobq status``) says ``queue`` is held."""
    reasons: list[str] = []

    async def listed() -> bool:
        rows = await held_rows(bench.client)
        reasons[:] = [r["reason"] for r in rows if r["topic"] == bench.topic and r["queue"] == queue]
        return bool(reasons)

    await until(listed, f"{queue} shown held", 30, alive=bench.check)
    return reasons[0]


async def _guard_held_s(bench: Bench) -> float:
    """Seconds the relay's global memory guard held the topic's batches (its ``/metrics``)."""
    async with aiohttp.ClientSession() as http, http.get(bench.metrics_url) as r:
        text = await r.text()
    if "# TYPE jobq_relay_held_seconds_total counter" not in text:
        raise RuntimeError(f"the relay's /metrics has no jobq_relay_held_seconds_total: {text[:200]!r}")
    total = 0.0
    for line in text.splitlines():
        labels = ('reason="memory"', f'topic="{bench.topic}"')
        if line.startswith("jobq_relay_held_seconds_total{") and all(x in line for x in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class MemoryHold:
    """What the memory case changed, to undo at its release."""

    maxmemory_before: int
    maxmemory: int
    peak_usage: float = 0.0


async def _hold(bench: Bench, held: Held, sizes: Sizes, per_job: float) -> MemoryHold | None:
    """Hold ``held`` as its case says; ``per_job``: Redis bytes a job takes (sizes the memory case)."""
    queue = held.queue
    if held.case == "paused":
        bench.consul.kv.put(bench.rate_key(queue), "paused")
    elif held.case == "rate":
        bench.consul.kv.put(bench.rate_key(queue), LIMIT)
    else:
        need = int(sizes.backlog * per_job)
        config = QueueConfig(mode="exclusive", excl_key="excl", memory_budget=need // 8)
        await bench.engine.admin.configure_queue(queue, config)
        await bench.engine.admin.pause(queue)
        info = await memory_info(bench.client)
        before, used = int(info.get("maxmemory", 0)), int(info["used_memory"])
        # The whole backlog would fill Redis. Set only where what Redis will hold — what it holds now, the
        # queue at its budget (overshot by up to a batch: twice it, say) and the neighbour's records still
        # to come (kept for the queue's retention) — stays under half of it, below the relay's pool (70 %):
        # under that pressure a queue is held to a fair share of the pool, and the neighbour's finished
        # records alone would hold it until they are collected.
        later = 2 * sizes.rate * sizes.window_s * per_job
        maxmemory = used + need if bench.own_stack and used + need // 4 + later <= (used + need) / 2 else 0
        if maxmemory:
            await bench.client.config_set("maxmemory", maxmemory)
        return MemoryHold(before, maxmemory)
    return None


async def _release(bench: Bench, held: Held, memory: MemoryHold | None) -> None:
    if memory is None:
        bench.consul.kv.delete(bench.rate_key(held.queue))
        return
    if memory.maxmemory:
        await bench.client.config_set("maxmemory", memory.maxmemory_before)
    await bench.engine.admin.configure_queue(held.queue, QueueConfig(mode="exclusive", excl_key="excl"))
    await bench.engine.admin.pause(held.queue, False)


async def _sample_usage(bench: Bench, memory: MemoryHold) -> None:
    """Redis's highest ``used_memory / maxmemory`` while the memory case holds (until cancelled)."""
    while True:
        info = await memory_info(bench.client)
        memory.peak_usage = max(memory.peak_usage, int(info["used_memory"]) / memory.maxmemory)
        await asyncio.sleep(0.1)


@dataclass
class Ran:
    """What the held queue's runs say, after its release."""

    jobs: int
    missing: int
    duplicated: int
    out_of_order: int


async def _ran(bench: Bench, held: Held, timeout_s: float) -> Ran:
    """Wait until every job of ``held`` ran (its ids on the handler's list); judge the list."""
    key = ran_key(held.queue)

    async def all_ran() -> bool:
        return int(await bench.client.llen(key)) >= held.produced

    await until(all_ran, f"{held.queue}: every job ran after the release", timeout_s, alive=bench.check)
    ids = [int(raw[1:]) for raw in await bench.client.lrange(key, 0, -1)]
    last: dict[int, int] = {}
    out_of_order = 0
    for i in ids:
        k = i % KEYS
        if last.get(k, -1) > i:
            out_of_order += 1
        last[k] = max(last.get(k, -1), i)
    unique = set(ids)
    return Ran(
        held.produced,
        held.produced - len(unique & set(range(held.produced))),
        len(ids) - len(unique),
        out_of_order,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def _forks(bench: Bench) -> int:
    """Forks Redis made so far (AOF rewrites: a child copying the data set, on this machine's cores)."""
    return int((await bench.client.info("stats"))["total_forks"])


@dataclass
class Side:
    """One side of a case (the neighbour alone, or beside the held queue's arrivals) over its slices."""

    waits: Waits = field(default_factory=lambda: Waits([], [], []))
    loads: list[float] = field(default_factory=list)
    forks: int = 0
    seconds: float = 0.0
    relay_cpu_s: float = 0.0

    async def slice(self, bench: Bench, n: int, rate: float, held: Held | None) -> None:
        forks, relay_cpu = await _forks(bench), process_clock(bench.procs.members[0].pid)
        cpu, started = relay_cpu(), time.perf_counter()
        waits = await _neighbour_window(bench, n, rate, held)
        self.relay_cpu_s += relay_cpu() - cpu
        self.seconds += time.perf_counter() - started
        self.forks += await _forks(bench) - forks
        self.loads.append(os.getloadavg()[0])
        self.waits.total += waits.total
        self.waits.relay += waits.relay
        self.waits.claim += waits.claim


async def _case(bench: Bench, case: str, sizes: Sizes) -> dict[str, float | str]:
    n = max(1, int(sizes.rate * sizes.window_s / sizes.slices))
    held = Held(case, bench.held_queue(case))
    found = await bench.engine.reads.memory(bench.neighbour)  # its records and their events
    memory = await _hold(bench, held, sizes, found.bytes / max(1, found.jobs))
    sampler = asyncio.create_task(_sample_usage(bench, memory)) if memory and memory.maxmemory else None
    alone, beside = Side(), Side()
    shown: asyncio.Task[str] | None = None
    try:
        started = time.perf_counter()
        for first in range(0, sizes.backlog, PRODUCE_CHUNK):
            chunk = min(PRODUCE_CHUNK, sizes.backlog - first)
            await bench.producer.produce_many([held.record(bench.topic) for _ in range(chunk)])
        await until(
            lambda: asyncio.to_thread(_caught_up, bench),
            f"{case}: the relay past the backlog",
            60 + sizes.backlog / 500,
            alive=bench.check,
        )
        aside_s = time.perf_counter() - started
        shown = asyncio.create_task(_held_for(bench, held.queue))  # the snapshot is rewritten each second
        for k in range(sizes.slices):  # alone, beside; beside, alone; ...: both see the same machine
            for side in (alone, beside) if k % 2 == 0 else (beside, alone):
                await side.slice(bench, n, sizes.rate, held if side is beside else None)
        reason = await shown
        guard_s = await _guard_held_s(bench)
    finally:
        for task in (sampler, shown):
            if task is not None:
                task.cancel()
    peak = memory.peak_usage if memory else 0.0
    await _release(bench, held, memory)
    released = time.perf_counter()
    ran = await _ran(bench, held, 120 + held.produced / 100)
    return {
        "held for": reason,
        "alone p50": _pct(alone.waits.total, 50),
        "alone p99": _pct(alone.waits.total, 99),
        "beside p50": _pct(beside.waits.total, 50),
        "beside p99": _pct(beside.waits.total, 99),
        "p99 ratio": _pct(beside.waits.total, 99) / max(_pct(alone.waits.total, 99), 1.0),
        "relay hop p99 alone": _pct(alone.waits.relay, 99),
        "relay hop p99 beside": _pct(beside.waits.relay, 99),
        "claim hop p99 alone": _pct(alone.waits.claim, 99),
        "claim hop p99 beside": _pct(beside.waits.claim, 99),
        "backlog read past": aside_s,
        "drained after release": time.perf_counter() - released,
        "load average alone": sum(alone.loads) / len(alone.loads),
        "load average beside": sum(beside.loads) / len(beside.loads),
        "relay CPU alone": alone.relay_cpu_s / alone.seconds * 100,
        "relay CPU beside": beside.relay_cpu_s / beside.seconds * 100,
        "Redis forks alone": alone.forks,
        "Redis forks beside": beside.forks,
        "held jobs": ran.jobs,
        "missing": ran.missing,
        "duplicated": ran.duplicated,
        "out of order": ran.out_of_order,
        "guard held": guard_s,
        "peak memory": peak * 100,
        "maxmemory": memory.maxmemory if memory else 0,
    }


UNITS = {
    "alone p50": "ms",
    "alone p99": "ms",
    "beside p50": "ms",
    "beside p99": "ms",
    "p99 ratio": "×",
    "relay hop p99 alone": "ms",
    "relay hop p99 beside": "ms",
    "claim hop p99 alone": "ms",
    "claim hop p99 beside": "ms",
    "backlog read past": "s",
    "drained after release": "s",
    "load average alone": "",
    "load average beside": "",
    "relay CPU alone": "% of a core",
    "relay CPU beside": "% of a core",
    "Redis forks alone": "forks",
    "Redis forks beside": "forks",
    "held jobs": "jobs",
    "missing": "jobs",
    "duplicated": "runs",
    "out of order": "runs",
    "guard held": "s",
    "peak memory": "% of maxmemory",
    "maxmemory": "bytes",
}
"""Each figure of a case (``<case>: <name>``) and its unit."""


def _summary(results: dict[str, dict[str, float | str]], sizes: Sizes) -> str:
    lines = [
        f"The neighbour at {sizes.rate:g} jobs/s, {sizes.window_s:g} s alone and {sizes.window_s:g} s "
        f"beside the held queue's arrivals ({sizes.rate:g} jobs/s more on the topic), alternately in "
        f"{sizes.slices} slices each, once the held queue's {sizes.backlog:,}-job backlog was read past: "
        "accepted → started in ms, its two hops' p99 alone → beside (relay: accepted → written to Redis; "
        "claim: written → started), the relay process's CPU, the machine's load average and Redis's forks "
        "(AOF rewrites) alone → beside.",
        "",
        "| case | held for | alone p50 | alone p99 | beside p50 | beside p99 | p99 beside / alone "
        "| relay hop p99 | claim hop p99 | relay CPU % | load | forks | held jobs | ran once, in order "
        "| guard held (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for case, r in results.items():
        ok = r["missing"] == r["duplicated"] == r["out of order"] == 0
        facts = (
            "yes"
            if ok
            else f"no: {r['missing']} missing, {r['duplicated']} twice, {r['out of order']} out of order"
        )
        within = "" if float(r["p99 ratio"]) <= BOUND else f" (over {BOUND:g}×)"
        cells = [case, r["held for"], *(f"{r[k]:.0f}" for k in ("alone p50", "alone p99", "beside p50"))]
        cells += [f"{r['beside p99']:.0f}", f"{r['p99 ratio']:.2f}×{within}"]
        cells += [
            f"{r[f'{hop} hop p99 alone']:.0f} → {r[f'{hop} hop p99 beside']:.0f}"
            for hop in ("relay", "claim")
        ]
        cells += [f"{r['relay CPU alone']:.0f} → {r['relay CPU beside']:.0f}"]
        cells += [f"{r['load average alone']:.1f} → {r['load average beside']:.1f}"]
        cells += [
            f"{r['Redis forks alone']:.0f} → {r['Redis forks beside']:.0f}",
            f"{r['held jobs']:,}",
            facts,
        ]
        lines.append(f"| {' | '.join(str(c) for c in cells)} | {r['guard held']:g} |")
    return "\n".join(lines)


def run(
    quick: bool = False,
    endpoints: Endpoints | None = None,
    backlog: int | None = None,
) -> Report:
    base = QUICK if quick else FULL
    sizes = dataclasses.replace(base, backlog=base.backlog if backlog is None else backlog)
    report = Report(
        "neighbours",
        {
            "quick": quick,
            "slices": sizes.slices,
            "backlog": sizes.backlog,
            "rate": sizes.rate,
            "window_s": sizes.window_s,
            "keys": KEYS,
            "partitions": PARTITIONS,
            "limit": LIMIT,
        },
    )
    results: dict[str, dict[str, float | str]] = {}

    async def main(ep: Endpoints) -> None:
        warm_up = int(sizes.rate * sizes.window_s / sizes.slices)
        async with _pipeline(ep, own_stack=endpoints is None, warm_up=warm_up) as bench:
            for case in CASES:
                results[case] = await _case(bench, case, sizes)

    with bench_stack("neighbours", endpoints) as ep:
        asyncio.run(main(ep))
    for case, r in results.items():
        for name, unit in UNITS.items():
            report.add(f"{case}: {name}", unit, [float(r[name])])
        report.notes.append(f"{case}: held for {r['held for']}")
    memory = results["memory"]
    if memory["maxmemory"]:
        report.notes.append(
            f"memory: maxmemory {int(memory['maxmemory']):,} bytes (the whole backlog in Redis would fill "
            f"it); peak {memory['peak memory']:.0f} % while held"
        )
    else:
        report.notes.append("memory: no maxmemory set (a shared stack, or a backlog too small to size it)")
    report.notes.append(
        "one relay process, a worker process per queue (concurrency 16 and 32), 3 partitions; "
        "every process and server on this machine"
    )
    report.summary = _summary(results, sizes)
    report.sections.append("## Neighbours\n\n" + report.summary)
    return report
