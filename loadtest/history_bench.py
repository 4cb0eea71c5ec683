"""``./run bench history``: what lifecycle events cost and how fresh the history is (``docs/history.md``).

One stack (Kafka + Redis on free ports; the smoke test passes the test session's), three parts:

1. **Drain, events off vs on.** ``./run bench drain``'s workload (:func:`loadtest.drain_bench.fill` /
   :func:`~loadtest.drain_bench.drain`: N pre-enqueued no-op jobs, 2 burst worker processes × concurrency
   50) on a queue with ``events_cap`` 0 (no events) and on one with the default cap, in pairs (off, on),
   (on, off), (off, on) (quick: one pair). One scheduler process (``python -m jqsched``: timers + event
   shipper; cron and the far tier off) runs through every round and ships the on-queues' streams to a
   bench topic; the enqueue events are shipped before the clock starts, so the drain pays for its own 2
   events per job (``running``, ``completed``) as they are written, shipped and trimmed. Figures: jobs/s
   of each and the on/off ratio per pair; CPU seconds per 1k jobs of the workers, Redis, the scheduler
   and Kafka (Kafka: own stack only) over the drain; the stream's peak backlog during the drain (sampled
   every 0.1 s), the time from the drain's end until the shipper had everything (empty stream), events
   dropped.
2. **Shipping rate of one scheduler.** N jobs enqueued and drained the same way on a queue no scheduler
   owns (cap above 3N): its stream keeps every event, checked against the sum of the jobs' versions.
   Then one scheduler process starts for it; the stream is sampled every 20 ms, and events/s = the
   backlog at the first sample below the full count over the time from that sample to the empty stream
   (the process start-up is left out). The topic's events (decoded from its records) must reach the
   count; events per Kafka record is reported.
3. **History lag.** :func:`jqspark.history.start_history` (trigger 1 s, a local[2] Spark session in this
   process) over a scheduler's topic while jobs flow to 2 worker processes, open loop
   (``Engine.enqueue_batch`` every 10 ms with the jobs due by then), at each of ``Sizes.rates`` (500,
   1,000 and 2,000 jobs/s; quick: 300) for ``Sizes.seconds`` (90 s; quick: 3 s), one after the other,
   each followed by its catch-up, after an unmeasured 30-s flow at the first rate (Spark's first batches
   are slow). Every 2 s (quick: 1 s) a sample through :class:`jqruntime.stores.history.HistoryStore` (the
   raw ``events_files`` view filtered to the newest batch folders; DuckDB still opens every file's
   footer, so a read costs more as folders pile up): lag = now − the newest ``at_ms``
   visible, rows visible; plus the stream's backlog and jobs finished. Per rate, over the last two thirds
   of its flow: lag p50/p99/max, jobs/s enqueued and finished, events/s indexed (rows visible per
   second), Spark's micro-batch durations (from its progress reports) and rows/s while a batch runs;
   then the time from the flow's end until every event is visible (the deduplicated ``events`` view). A
   rate counts as sustained when it went in and was finished within 5 % and indexed within 10 % (3
   events per job). ``lag.png``: lag and stream backlog over time (and the backlog during the last
   events-on drain).

Everything (Kafka's JVM, Spark's JVM, Redis, workers, the scheduler, the generator) shares this
machine's cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jqcore.envelope import new_envelope
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import TopicSpec
from jqengine import Engine, QueueConfig
from jqengine.keys import QUEUES_KEY, QueueKeys
from jqruntime.stores.history import HistoryStore
from jqruntime.topicadmin import ensure
from jqspark import spark_session
from jqspark.history import start_history
from jqstack.manager import Endpoints, Stack, StackSpec
from jqstack.pipeline import PipelineEnv, service_argv, worker_argv
from jqstack.provision import ensure_spark_jars
from jqstack.supervise import Child, Children
from loadtest import drain_bench
from loadtest.cpu import cpu_s
from loadtest.report import Report
from loadtest.stacks import up_timed
from loadtest.topics import events_in

__all__ = ["run"]

CONCURRENCY = 50
EVENTS_PARTITIONS = 6
TRIGGER_S = 1.0
SHARED_DB = 7
DEFAULT_CAP = QueueConfig().events_cap


@dataclass(frozen=True)
class Sizes:
    drain_jobs: int
    pairs: int
    ship_jobs: int
    ship_reps: int
    rates: tuple[float, ...]
    """Jobs/s of the history flows, one after the other (each followed by its catch-up)."""
    seconds: float
    """Length of each flow."""
    warm_s: float
    """An unmeasured flow at the first rate before them (Spark's first batches are slow: JIT)."""
    sample_s: float
    """Seconds between lag samples (each reads the history through HistoryStore: not free)."""


QUICK = Sizes(2_000, pairs=1, ship_jobs=1_000, ship_reps=1, rates=(300.0,), seconds=3, warm_s=0, sample_s=1)
FULL = Sizes(
    100_000,
    pairs=3,
    ship_jobs=100_000,
    ship_reps=3,
    rates=(500, 1_000, 2_000),
    seconds=90,
    warm_s=30,
    sample_s=2,
)


_T0: list[float] = []


def waiting_events(client: redis.Redis, queue: str) -> int:
    """Events of ``queue`` not shipped yet (stats ``events_waiting``; a stream entry holds a script call's
    events, so its length counts calls, not events)."""
    return int(client.hget(QueueKeys(queue).stats, "events_waiting") or 0)


def _say(text: str) -> None:
    """A progress line, with the seconds since the run's first one."""
    if not _T0:
        _T0.append(time.monotonic())
    print(f"... history bench {time.monotonic() - _T0[0]:5.0f} s: {text}", file=sys.stderr, flush=True)


@contextmanager
def _servers(endpoints: Endpoints | None) -> Iterator[tuple[Endpoints, int | None]]:
    """``endpoints`` (no Kafka pid) or a fresh Kafka + Redis on free ports (and Kafka's pid), purged after.

    On servers passed in, the queues live in Redis database :data:`SHARED_DB`: scheduler instances of
    others on those servers (their groups keep every queue by default) would otherwise own and ship these
    queues' events to their own topic."""
    if endpoints is not None:
        url = urlsplit(endpoints.redis_url or "")
        yield replace(endpoints, redis_url=urlunsplit(url._replace(path=f"/{SHARED_DB}"))), None
        return
    stack = Stack(StackSpec(name=f"bench-history-{os.getpid()}", redis_mode="single", fixed_ports=False))
    stack.servers = [s for s in stack.servers if s.kind in ("kafka", "redis")]  # no Consul: cron is off
    try:
        _say("starting Kafka and Redis")
        up_timed(stack)
        kafka, single = stack.of_kind("kafka")[0], stack.of_kind("redis")[0]
        yield (
            Endpoints(f"127.0.0.1:{kafka.port}", "", f"redis://127.0.0.1:{single.port}/0"),
            kafka.pid,
        )
    finally:
        stack.down(purge=True)


@dataclass
class Bench:
    """The servers and names of one run."""

    ep: Endpoints
    kafka_pid: int | None
    prefix: str = field(default_factory=lambda: f"hb{os.getpid()}")
    logs: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / f"jobq-bench-history-{os.getpid()}"
    )

    topics: list[str] = field(default_factory=list)
    _client: redis.Redis | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.ep.redis_url or ""

    def sync_redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def backlog(self, queue: str) -> int:
        """Events of ``queue`` not shipped yet."""
        if self._client is None:
            self._client = self.sync_redis()
        return waiting_events(self._client, queue)

    def scheduler(self, children: Children, name: str, queues: str, topic: str) -> Child:
        """A ``python -m jqsched`` of a group of its own keeping ``queues`` and shipping to ``topic``."""
        spec = PipelineEnv(
            {"JOBQ_REDIS_URL": self.url, "JOBQ_KAFKA_BOOTSTRAP": self.ep.kafka_bootstrap},
            log_level="warning",
            settings={
                "JOBQ_SCHEDULER_GROUP": f"{self.prefix}-{name}",
                "JOBQ_SCHEDULER_CRON": "false",
                "JOBQ_SCHEDULER_FAR": "false",
                "JOBQ_EVENTS_TOPIC": topic,
                "JOBQ_EVENTS_PARTITIONS": str(EVENTS_PARTITIONS),
            },
        )
        self.logs.mkdir(parents=True, exist_ok=True)
        env = spec.scheduler(name, queues=queues)
        return children.start(name, service_argv("scheduler"), env=env, output=self.logs / f"{name}.log")

    def topic(self, name: str) -> str:
        """The events topic ``<prefix>.events.<name>`` (made by the scheduler; deleted by :meth:`close`)."""
        topic = f"{self.prefix}.events.{name}"
        self.topics.append(topic)
        return topic

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self.topics:  # on a stack passed in they would outlive the run
            admin = AdminClient({"bootstrap.servers": self.ep.kafka_bootstrap, "log_level": 0})
            for future in admin.delete_topics(self.topics, operation_timeout=15).values():
                with contextlib.suppress(Exception):
                    future.result(20)


async def _configure(url: str, queue: str, events_cap: int, paused: bool = True) -> None:
    client = aioredis.Redis.from_url(url)
    await Engine(client).admin.configure_queue(queue, QueueConfig(events_cap=events_cap, paused=paused))
    await client.aclose()


async def _drop(url: str, queue: str) -> None:
    """Delete every key of ``queue`` (its jobs too), outside any clock: each round starts from the same
    Redis, and a stack passed in keeps nothing of the run."""
    client = aioredis.Redis.from_url(url)
    keys: list[bytes] = []
    async for key in client.scan_iter(match=f"{QueueKeys(queue).prefix}*", count=2000):
        keys.append(key)
        if len(keys) >= 2000:
            await client.unlink(*keys)
            keys.clear()
    if keys:
        await client.unlink(*keys)
    await client.srem(QUEUES_KEY, queue)
    await client.aclose()


async def _stats(url: str, queue: str) -> dict[str, int]:
    client = aioredis.Redis.from_url(url)
    stats = await Engine(client).reads.queue_stats(queue)
    await client.aclose()
    return stats


def _wait(
    what: str,
    done: Callable[[], bool],
    timeout_s: float,
    every_s: float = 0.05,
    check: Children | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if check is not None and (dead := check.dead()):
            raise RuntimeError(f"history bench: {dead} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"history bench: no {what} within {timeout_s:.0f} s")
        time.sleep(every_s)


class BacklogSampler:
    """A thread sampling a queue's event backlog every ``every_s`` while it runs: (seconds, events)."""

    def __init__(self, bench: Bench, queue: str, every_s: float) -> None:
        self.bench, self.queue, self.every_s = bench, queue, every_s
        self.points: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backlog-sampler", daemon=True)

    def _run(self) -> None:
        client = self.bench.sync_redis()
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                self.points.append((time.monotonic() - started, waiting_events(client, self.queue)))
                self._stop.wait(self.every_s)
        finally:
            client.close()

    def __enter__(self) -> BacklogSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def peak(self) -> int:
        return max((n for _, n in self.points), default=0)


# ---- part 1: drain with events off and on ---------------------------------------------------------


def _drain_round(
    bench: Bench, queue: str, n: int, events_on: bool, sched: Child
) -> tuple[dict[str, float], list[tuple[float, int]]]:
    label = "on" if events_on else "off"
    asyncio.run(_configure(bench.url, queue, DEFAULT_CAP if events_on else 0))
    asyncio.run(drain_bench.fill(bench.url, queue, n))
    if events_on:  # the enqueue events go out before the clock: the drain pays for its own events only
        _wait("shipping of the enqueue events", lambda: bench.backlog(queue) == 0, 120)
    cpu = (cpu_s(sched.pid), cpu_s(bench.kafka_pid))
    with BacklogSampler(bench, queue, 0.1) as sampler:
        out = drain_bench.drain(bench.url, queue, n, CONCURRENCY)
    ended = time.monotonic()
    _wait("empty event stream after the drain", lambda: bench.backlog(queue) == 0, 300, every_s=0.01)
    caught_up = time.monotonic() - ended
    cpu = (cpu_s(sched.pid) - cpu[0], cpu_s(bench.kafka_pid) - cpu[1])
    figures = {f"drain, events {label}": out["drain"]}
    figures[f"worker CPU s per 1k jobs, events {label}"] = out["worker CPU s per 1k jobs"]
    figures[f"redis CPU s per 1k jobs, events {label}"] = out["redis CPU s per 1k jobs"]
    figures[f"scheduler CPU s per 1k jobs, events {label}"] = cpu[0] / n * 1000
    if bench.kafka_pid is not None:
        figures[f"kafka CPU s per 1k jobs, events {label}"] = cpu[1] / n * 1000
    if events_on:
        figures["event backlog peak during the drain"] = float(sampler.peak)
        figures["shipping done after the drain ended"] = caught_up
        figures["events dropped at the cap"] = float(
            asyncio.run(_stats(bench.url, queue)).get("events_dropped", 0)
        )
    asyncio.run(_drop(bench.url, queue))
    _say(f"drain, events {label}: {out['drain']:,.0f} jobs/s")
    return figures, sampler.points


def _drain_part(bench: Bench, sizes: Sizes) -> tuple[dict[str, list[float]], list[tuple[float, int]]]:
    samples: dict[str, list[float]] = {}
    points: list[tuple[float, int]] = []
    topic = bench.topic("d")
    with Children(grace_s=15.0) as children:
        sched = bench.scheduler(children, "sched-drain", f"{bench.prefix}.d*", topic)
        warm = f"{bench.prefix}.d-warm"  # the scheduler owns a queue, made its topic and producer: ready
        asyncio.run(_configure(bench.url, warm, DEFAULT_CAP))
        asyncio.run(drain_bench.fill(bench.url, warm, 10))
        _wait("a scheduler shipping events", lambda: bench.backlog(warm) == 0, 120, check=children)
        asyncio.run(_drop(bench.url, warm))
        for pair in range(sizes.pairs):
            for events_on in (False, True) if pair % 2 == 0 else (True, False):  # ABBA: drift cancels
                queue = f"{bench.prefix}.d{pair}{'on' if events_on else 'off'}"
                figures, series = _drain_round(bench, queue, sizes.drain_jobs, events_on, sched)
                for name, value in figures.items():
                    samples.setdefault(name, []).append(value)
                if events_on:
                    points = series
            on, off = samples["drain, events on"][-1], samples["drain, events off"][-1]
            samples.setdefault("drain ratio events on / off", []).append(on / off)
            _say(f"pair {pair + 1}/{sizes.pairs}: on/off = {on / off:.3f}")
    return samples, points


# ---- part 2: one scheduler's shipping rate ----------------------------------------------------------


async def _versions(url: str, queue: str, n: int) -> int:
    """The sum of the ``version`` of jobs ``d0`` .. ``d{n-1}`` (every transition is one event)."""
    client = aioredis.Redis.from_url(url)
    keys = QueueKeys(queue)
    total = 0
    for start in range(0, n, 5000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + 5000)):
            pipe.hget(keys.job(f"d{i}"), "version")
        total += sum(int(v or 0) for v in await pipe.execute())
    await client.aclose()
    return total


def _ship_round(bench: Bench, n: int, rep: int) -> dict[str, float]:
    queue, topic = f"{bench.prefix}.s{rep}", bench.topic(f"s{rep}")
    asyncio.run(_configure(bench.url, queue, 3 * n + 1000))
    asyncio.run(drain_bench.fill(bench.url, queue, n))
    drain_bench.drain(bench.url, queue, n, CONCURRENCY)
    produced = bench.backlog(queue)
    versions = asyncio.run(_versions(bench.url, queue, n))
    if produced != versions:
        raise RuntimeError(
            f"history bench: {produced} events in the stream, the jobs' versions sum to {versions}"
        )
    _say(f"shipping {produced:,} events with one scheduler")
    client = bench.sync_redis()
    with Children(grace_s=15.0) as children:
        sched = bench.scheduler(children, f"sched-ship{rep}", queue, topic)
        first: tuple[float, int, float] | None = None
        deadline = time.monotonic() + 300
        while True:
            left = waiting_events(client, queue)
            now = time.monotonic()
            if first is None and left < produced:
                first = (now, left, cpu_s(sched.pid))
            if left == 0:
                break
            if dead := children.dead():
                raise RuntimeError(f"history bench: {dead} exited while shipping")
            if now > deadline:
                raise RuntimeError(f"history bench: {left} events still unshipped after 300 s")
            time.sleep(0.02)
        cpu = cpu_s(sched.pid)
    client.close()
    assert first is not None
    seconds = max(now - first[0], 1e-3)
    records, in_topic = events_in(bench.ep.kafka_bootstrap, topic)
    if in_topic < produced:
        raise RuntimeError(f"history bench: {in_topic} events in the topic, {produced} shipped")
    asyncio.run(_drop(bench.url, queue))
    return {
        "events shipped per second, one scheduler": first[1] / seconds,
        "scheduler CPU s per 1k events shipped": (cpu - first[2]) / max(1, first[1]) * 1000,
        "events per job (enqueue, claim, complete)": produced / n,
        "events per Kafka record": in_topic / max(1, records),
    }


# ---- part 3: history lag under a steady flow --------------------------------------------------------


@dataclass
class Sample:
    t: float
    """Seconds since the flow started."""
    lag_s: float | None
    rows: int
    backlog: int
    finished: int


class Visible:
    """What the history shows, read through :class:`HistoryStore`: rows and the newest ``at_ms`` per
    ``events`` batch folder (copies included). A read lists the folders again but reads only the files of
    the newest batch seen so far and later ones (a batch's files land one folder at a time), so a sample
    costs the same after an hour as after a minute."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        self.per_batch: dict[str, tuple[int, int]] = {}

    def read(self) -> tuple[int | None, int]:
        """(newest ``at_ms`` or None, rows)."""
        since = max(self.per_batch, default="")
        where = f" WHERE batch >= '{since}'" if since else ""  # tags: <query id>-<9-digit batch id>
        sql = f"SELECT batch, count(*), max(at_ms) FROM events_files{where} GROUP BY batch"
        for batch, rows, newest in self.store.query(sql).rows:
            self.per_batch[str(batch)] = (int(rows), int(newest))
        newest = max((n for _, n in self.per_batch.values()), default=None)
        return newest, sum(r for r, _ in self.per_batch.values())


async def _enqueue_open_loop(engine: Engine, queue: str, rate: float, seconds: float, first: int) -> int:
    """Job ``i`` is due at ``t0 + i / rate``; every 10 ms the due ones go in one ``enqueue_batch``."""
    loop = asyncio.get_running_loop()
    total, sent, started = int(rate * seconds), 0, loop.time()
    while sent < total:
        due = min(total, int((loop.time() - started) * rate) + 1)
        if due > sent:
            k = min(due - sent, 1000)
            ids = range(first + sent, first + sent + k)
            await engine.enqueue_batch([new_envelope(queue, "demo.noop", None, id=f"h{i}") for i in ids])
            sent += k
        else:
            await asyncio.sleep(0.01)
    return sent


WARM_JOBS = 500


@dataclass
class Flow:
    """One steady flow at ``rate`` jobs/s and what was seen during it."""

    rate: float
    began: float
    """Epoch seconds."""
    samples: list[Sample] = field(default_factory=list)
    sent: int = 0
    sending_s: float = 0.0
    catch_up_s: float = 0.0
    batches: list[dict[str, float]] = field(default_factory=list)
    """Spark's micro-batches with input that began from this flow's start until the next flow."""

    def figures(self, seconds: float) -> dict[str, float]:
        window = [s for s in self.samples if s.t >= seconds / 3]
        lags = sorted(s.lag_s for s in window if s.lag_s is not None)
        first, last = window[0], window[-1]
        span = max(last.t - first.t, 1e-3)
        at = f" at {self.rate:g} jobs/s"
        out = {
            f"jobs enqueued per second{at}": self.sent / self.sending_s,
            f"jobs finished per second{at}": (last.finished - first.finished) / span,
            f"events indexed per second{at}": (last.rows - first.rows) / span,
            f"history lag p50{at}": _percentile(lags, 50),
            f"history lag p99{at}": _percentile(lags, 99),
            f"history lag max{at}": lags[-1],
            f"all events visible after the flow{at}": self.catch_up_s,
            f"event backlog max{at}": float(max(s.backlog for s in window)),
        }
        if self.batches:
            busy_s = sum(b["ms"] for b in self.batches) / 1000
            out[f"spark batch duration p50{at}"] = statistics.median(b["ms"] for b in self.batches) / 1000
            out[f"spark batch throughput (rows / batch time){at}"] = (
                sum(b["rows"] for b in self.batches) / busy_s
            )
        return out

    def sustained(self, seconds: float) -> bool:
        """The flow went in at its rate, the workers finished it, and the history indexed its 3 events per
        job as fast as they came (within 5 % / 10 %)."""
        f = self.figures(seconds)
        at = f" at {self.rate:g} jobs/s"
        return (
            f[f"jobs enqueued per second{at}"] >= 0.95 * self.rate
            and f[f"jobs finished per second{at}"] >= 0.95 * self.rate
            and f[f"events indexed per second{at}"] >= 0.9 * 3 * self.rate
        )


@dataclass
class LagRun:
    """Part 3 on running workers, scheduler and history query: a warm-up, then per rate a flow with its
    samples and the catch-up after it."""

    bench: Bench
    visible: Visible
    query: StreamingQuery
    queue: str
    sizes: Sizes
    procs: Children
    flows: list[Flow] = field(default_factory=list)
    batches: dict[int, dict[str, float]] = field(default_factory=dict)
    """Spark's micro-batches with input: batch id -> rows, ms, began (epoch s)."""
    query_ms: list[float] = field(default_factory=list)

    def _check(self, when: str) -> None:
        if (dead := self.procs.dead()) or self.query.exception() is not None:
            raise RuntimeError(f"history bench: a process ({dead}) or the query failed {when}")

    def _progress(self, every: bool = False) -> None:
        """Note Spark's latest micro-batch (``every``: all it still remembers) that had input."""
        if every:
            progresses = list(self.query.recentProgress)
        else:
            last = self.query.lastProgress
            progresses = [] if last is None else [last]
        for p in progresses:
            if p.numInputRows > 0:
                began = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
                ms = float(p.durationMs["triggerExecution"])
                self.batches[p.batchId] = {"rows": float(p.numInputRows), "ms": ms, "began": began}

    def _batch_done(self, timeout_s: float = 120.0) -> None:
        """Until no micro-batch runs (a batch's files are visible before its progress is posted), then
        note every batch Spark remembers."""
        deadline = time.monotonic() + timeout_s
        while self.query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.05)
        self._progress(every=True)

    async def _visible(self) -> tuple[int | None, int]:
        return await asyncio.to_thread(self.visible.read)

    async def _warm_up(self, engine: Engine) -> None:
        _say(f"warm-up: {WARM_JOBS} jobs through workers, scheduler, Kafka and the first Spark batches")
        jobs = [new_envelope(self.queue, "demo.noop", None, id=f"w{i}") for i in range(WARM_JOBS)]
        await engine.enqueue_batch(jobs)
        deadline = time.monotonic() + 240
        while (await self._visible())[1] < 3 * WARM_JOBS:
            self._check("in the warm-up")
            if time.monotonic() > deadline:
                raise RuntimeError("history bench: the warm-up's events were not indexed within 240 s")
            await asyncio.sleep(0.5)
        await asyncio.to_thread(self._batch_done)

    async def _sample(self, engine: Engine, flow: Flow, started: float, base_finished: int) -> Sample:
        t0 = time.monotonic()
        newest, rows = await self._visible()
        self.query_ms.append((time.monotonic() - t0) * 1000)
        lag = None if newest is None else (time.time() * 1000 - newest) / 1000
        backlog = (await engine.events.backlog([self.queue]))[self.queue]
        finished = (await engine.reads.depth(self.queue)).finished - base_finished
        await asyncio.to_thread(self._progress)
        sample = Sample(t0 - started, lag, rows, backlog, finished)
        flow.samples.append(sample)
        return sample

    async def _flow(self, engine: Engine, rate: float, seconds: float, first: int) -> Flow:
        flow = Flow(rate, time.time())
        base_finished = (await engine.reads.depth(self.queue)).finished
        started = next_print = time.monotonic()
        sending = asyncio.create_task(_enqueue_open_loop(engine, self.queue, rate, seconds, first))
        try:
            while not sending.done():
                s = await self._sample(engine, flow, started, base_finished)
                self._check("during the flow")
                if started + s.t >= next_print:
                    next_print += 10
                    lag = "-" if s.lag_s is None else f"{s.lag_s:.1f} s"
                    _say(
                        f"{rate:g} jobs/s, {s.t:.0f}/{seconds:.0f} s: lag {lag}, {s.rows:,} rows, "
                        f"{s.finished:,} jobs done, backlog {s.backlog:,}"
                    )
                await asyncio.sleep(max(0.0, self.sizes.sample_s - (time.monotonic() - started - s.t)))
            flow.sent = await sending
        finally:
            sending.cancel()
        flow.sending_s = time.monotonic() - started
        return flow

    async def _catch_up(self, expected: int, since: float) -> float:
        """Seconds from ``since`` until ``expected`` distinct events are visible."""
        deadline = since + 300
        while True:
            if (await self._visible())[1] >= expected:
                count = await asyncio.to_thread(self.store_count)
                if count >= expected:
                    return time.monotonic() - since
            self._check("after the flow")
            if time.monotonic() > deadline:
                raise RuntimeError(f"history bench: not all {expected} events visible 300 s after the flow")
            await asyncio.sleep(0.25)

    def store_count(self) -> int:
        """Distinct events in the history (the deduplicated ``events`` view)."""
        return int(self.visible.store.query("SELECT count(*) FROM events").rows[0][0])

    async def run(self) -> None:
        client = aioredis.Redis.from_url(self.bench.url, socket_timeout=30)
        engine = Engine(client)
        try:
            await self._warm_up(engine)
            jobs = WARM_JOBS
            warm = [(self.sizes.rates[0], self.sizes.warm_s)] if self.sizes.warm_s else []
            for i, (rate, seconds) in enumerate(
                [*warm, *((r, self.sizes.seconds) for r in self.sizes.rates)]
            ):
                flow = await self._flow(engine, rate, seconds, first=jobs)
                ended = time.monotonic()
                jobs += flow.sent
                what = "warm-up flow" if warm and i == 0 else "flow"
                _say(f"{rate:g} jobs/s: {what} done ({flow.sent:,} jobs); until all {3 * jobs:,} events show")
                flow.catch_up_s = await self._catch_up(3 * jobs, ended)
                await asyncio.to_thread(self._batch_done)
                if what == "flow":
                    self.flows.append(flow)
        finally:
            await client.aclose()
        for i, flow in enumerate(self.flows):
            until = self.flows[i + 1].began if i + 1 < len(self.flows) else float("inf")
            flow.batches = [b for _, b in sorted(self.batches.items()) if flow.began <= b["began"] < until]


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(q / 100 * (len(sorted_values) - 1)))
    return sorted_values[index]


def _stop_between_batches(query: StreamingQuery, timeout_s: float = 30.0) -> None:
    """Stop ``query`` while no micro-batch runs (stopping one mid-write interrupts it: a loud, harmless
    stack trace in the log). Everything is indexed by now, so the next batches are empty and short."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def _lag_part(bench: Bench, sizes: Sizes) -> LagRun:
    queue, topic = f"{bench.prefix}.h", bench.topic("h")
    kafka = KafkaSettings(bootstrap=bench.ep.kafka_bootstrap)
    ensure(kafka, [TopicSpec(topic, "events", EVENTS_PARTITIONS)])  # before the query subscribes
    asyncio.run(_configure(bench.url, queue, DEFAULT_CAP, paused=False))
    owned = SparkSession.getActiveSession() is None  # never stop a session the caller is using
    _say("starting Spark (local[2])")
    spark = spark_session(
        "jobq-bench-history",
        bench.ep.kafka_bootstrap,
        jars=ensure_spark_jars(),
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    env = PipelineEnv({"JOBQ_REDIS_URL": bench.url}, log_level="warning").worker()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="jobq-bench-history-") as tmp,
            Children(grace_s=15.0) as procs,
        ):
            bench.scheduler(procs, "sched-history", queue, topic)
            argv = worker_argv(queue, app="examples.demo_app:registry", concurrency=CONCURRENCY)
            for i in range(drain_bench.WORKERS):
                procs.start(f"worker-{i}", argv, output="inherit", env=env)
            root = Path(tmp) / "history"
            query = start_history(
                spark,
                bootstrap=bench.ep.kafka_bootstrap,
                topic=topic,
                root=root,
                trigger_s=TRIGGER_S,
                retention_days=30,
            )
            try:
                lag = LagRun(bench, Visible(HistoryStore(root)), query, queue, sizes, procs)
                asyncio.run(lag.run())
                return lag
            finally:
                _stop_between_batches(query)
    finally:
        if owned:
            spark.stop()
        asyncio.run(_drop(bench.url, queue))


# ---- the report -----------------------------------------------------------------------------------


def _unit(name: str) -> str:
    if name.startswith("drain ratio"):
        return "×"
    if name.startswith(("drain,", "jobs ", "highest sustained")):
        return "jobs/s"
    if name.startswith(("events shipped", "events indexed", "spark batch throughput")):
        return "events/s"
    if "CPU" in name or name.startswith(
        ("history lag", "shipping done", "all events visible", "spark batch")
    ):
        return "s"
    if name.startswith(("event backlog", "events dropped")):
        return "events"
    if name == "events per Kafka record":
        return "events/record"
    return "events/job"


def _plot(flows: list[Flow], drain_points: list[tuple[float, int]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7))
    for flow in flows:
        with_lag = [s for s in flow.samples if s.lag_s is not None]
        top.plot([s.t for s in with_lag], [s.lag_s for s in with_lag], label=f"{flow.rate:g} jobs/s")
        bottom.plot(
            [s.t for s in flow.samples], [s.backlog for s in flow.samples], label=f"{flow.rate:g} jobs/s"
        )
    top.set_xlabel("seconds since the flow started")
    top.set_ylabel("seconds")
    top.set_title(f"history lag: now − newest visible event (trigger {TRIGGER_S:g} s)")
    top.legend()
    label = "during the last events-on drain"
    bottom.plot([t for t, _ in drain_points], [n for _, n in drain_points], label=label, alpha=0.6)
    bottom.set_xlabel("seconds")
    bottom.set_ylabel("events in the Redis stream")
    bottom.set_title("unshipped events (one scheduler shipping)")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _notes(sizes: Sizes, med: dict[str, float], kafka_measured: bool, lag: LagRun) -> list[str]:
    below = 1 - med["drain, events on"] / med["drain, events off"]
    notes = [
        f"drain: {sizes.drain_jobs} demo.noop jobs, 2 worker processes x concurrency {CONCURRENCY}; "
        "alternating events off (events_cap 0) and on (default cap); one scheduler process running "
        f"(shipping the on-queues) throughout; medians: on is {below:.1%} below off (goal: at most 10 %)",
        "CPU per 1k jobs over the drain (workers: rusage incl. start-up; Redis: INFO cpu; scheduler and "
        "Kafka: /proc of their process)"
        + ("" if kafka_measured else "; Kafka not measured (a stack passed in)"),
        "shipping: every event already in the stream (enqueue + claim + complete per job), one "
        "`python -m jqsched` started for it; rate from its first trim to the empty stream",
        f"lag: `start_history` trigger {TRIGGER_S:g} s, local[2], shuffle partitions 2, in this process; "
        f"each flow open loop for {sizes.seconds:g} s into 2 workers; a sample every {sizes.sample_s:g} s "
        "(lag = now - newest at_ms in the history's event files, read with HistoryStore), figures over "
        f"the last two thirds of each flow; median sample read {statistics.median(lag.query_ms):.0f} ms",
    ]
    for flow in lag.flows:
        ok = "sustained" if flow.sustained(sizes.seconds) else "NOT sustained"
        f = flow.figures(sizes.seconds)
        at = f" at {flow.rate:g} jobs/s"
        sent, done = f["jobs enqueued per second" + at], f["jobs finished per second" + at]
        indexed = f["events indexed per second" + at]
        notes.append(
            f"{flow.rate:g} jobs/s: {ok} (enqueued {sent:,.0f}/s, finished {done:,.0f}/s, indexed "
            f"{indexed:,.0f} events/s of {3 * flow.rate:,.0f}; {len(flow.batches)} Spark batches)"
        )
    load = os.getloadavg()
    notes.append(f"load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)")
    return notes


def run(quick: bool = False, endpoints: Endpoints | None = None) -> Report:
    sizes = QUICK if quick else FULL
    _T0.clear()
    params: dict[str, Any] = {"quick": quick, **asdict(sizes), "trigger_s": TRIGGER_S}
    report = Report("history", {**params, "workers": drain_bench.WORKERS, "concurrency": CONCURRENCY})
    samples: dict[str, list[float]] = {}
    with _servers(endpoints) as (ep, kafka_pid):
        bench = Bench(ep, kafka_pid)
        try:
            _say(f"part 1: drain {sizes.drain_jobs:,} jobs, events off vs on, {sizes.pairs} pair(s)")
            drained, drain_points = _drain_part(bench, sizes)
            samples.update(drained)
            _say(f"part 2: one scheduler's shipping rate, {sizes.ship_jobs:,} jobs, {sizes.ship_reps} rep(s)")
            for rep in range(sizes.ship_reps):
                for name, value in _ship_round(bench, sizes.ship_jobs, rep).items():
                    samples.setdefault(name, []).append(value)
            rates = ", ".join(f"{r:g}" for r in sizes.rates)
            _say(f"part 3: history lag at {rates} jobs/s, {sizes.seconds:.0f} s each")
            lag = _lag_part(bench, sizes)
        finally:
            bench.close()
    for flow in lag.flows:
        for name, value in flow.figures(sizes.seconds).items():
            samples[name] = [value]
    sustained = [f.rate for f in lag.flows if f.sustained(sizes.seconds)]
    samples["highest sustained rate (of those tried)"] = [max(sustained, default=0.0)]
    for name, values in samples.items():
        report.add(name, _unit(name), values)
    report.notes += _notes(sizes, {f.name: f.median for f in report.figures}, kafka_pid is not None, lag)
    report.notes.append(f"scheduler logs in {bench.logs}")
    report.artifacts["lag.png"] = lambda path: _plot(lag.flows, drain_points, path)
    return report
