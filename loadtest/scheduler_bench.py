"""``./run bench scheduler``: the far-future tier at a million jobs (Dynein's timing).

``N`` far-future jobs (1M; ``--quick``: 2k) are written as a relay writes them — the record into the
compacted schedule topic (with its ``jobq-run-at`` header), an index entry into Redis — in 12 queues,
their ``run_at`` spread evenly over a window ``W`` (9 min; quick 6 s) that starts a horizon ``H`` (60 s;
quick 3 s) after the load is expected to end (120 s; quick 4 s). Then three ``python -m jqsched``
processes build their partitions' index from the topic and move each job into Redis a horizon ahead; the
one owning the most partitions is SIGKILLed at 40 % of the window (the survivors build its partitions
from the topic). Two claimer processes (:mod:`loadtest.sched_claimer`) take every job as soon as it is
claimable and record its start. The schedulers ship the lifecycle events, as shipped (``events=False``:
the tier alone, the figure measured before events were on by default).

Figures: lateness (start − run_at) p50/p99/max; early starts, jobs run twice, jobs never run (all must be
0); Redis bytes per far-future job (its index entry, ``MEMORY USAGE``, and the ``used_memory`` growth with
its ``far`` event); each scheduler's peak RSS; index build rate (records/s, from the schedulers' logs);
the re-deal time after the SIGKILL; the machine's load.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import TopicSpec
from jqengine import Engine, RedisClient
from jqengine.keys import QueueKeys
from jqruntime.kafka import AsyncProducer, schedule_record
from jqruntime.stores import farscan
from jqruntime.stores.membership import deal_evenly, live_members
from jqruntime.topicadmin import ensure
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, service_argv
from jqstack.supervise import Children
from loadtest.report import Report
from loadtest.sched_claimer import claim_process
from loadtest.stacks import bench_stack

__all__ = ["run"]

QUEUES = 12
CLAIMERS = 2
BATCH = 5_000
LOADERS = 4
STALE_S = 3.0
PARTITIONS = 24
DRAIN_S = 120.0
"""How long after the last run_at the claimers may still take jobs (then the rest never ran)."""


async def _used_memory(client: RedisClient) -> int:
    return int((await client.info("memory"))["used_memory"])


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _load(
    ep: Endpoints, client: RedisClient, queues: list[str], n: int, first_ms: int, window_ms: int, topic: str
) -> dict[str, float]:
    """Write the jobs as a relay does; returns Redis's bytes per far job."""
    engine = Engine(client)
    producer = AsyncProducer(KafkaSettings(bootstrap=ep.kafka_bootstrap))
    before = await _used_memory(client)

    async def batch(start: int) -> None:
        envs = [
            new_envelope(queues[i % len(queues)], "noop", None, run_at=first_ms + i * window_ms // n)
            for i in range(start, min(n, start + BATCH))
        ]
        records = [schedule_record(topic, e.queue, e.id, e.run_at or 0, encode(e)) for e in envs]
        by_queue: dict[str, list[tuple[str, int]]] = {}
        for e in envs:
            by_queue.setdefault(e.queue, []).append((e.id, e.run_at or 0))
        await producer.produce_many(records)
        for queue, items in by_queue.items():
            await engine.schedule_far(queue, items)
        if (start + BATCH) % 100_000 == 0:
            print(f"... loaded {start + BATCH:,} of {n:,} jobs", file=sys.stderr, flush=True)

    try:  # a few batches in flight: a batch's delivery reports are awaited while the next is built
        starts = list(range(0, n, BATCH))
        for i in range(0, len(starts), LOADERS):
            await asyncio.gather(*(batch(s) for s in starts[i : i + LOADERS]))
    finally:
        await asyncio.to_thread(producer.close, 30.0)
    grown = await _used_memory(client) - before
    for queue in queues:  # their "far" events: shipped long ago in a deployment, not by these schedulers
        await client.delete(QueueKeys(queue).events)
    # as after a scheduler generation that kept this Redis: the index entries are known to be there
    partitions = list(range(PARTITIONS))
    await farscan.begin(client, topic, partitions)
    await farscan.mark(client, topic, partitions, now_ms())
    index = 0
    for queue in queues:
        index += int(await client.memory_usage(QueueKeys(queue).far, samples=0) or 0)
    return {
        "Redis bytes per far-future job": index / n,
        "Redis used_memory growth per far-future job (with its event)": grown / n,
    }


def _build_rates(folder: Path, names: list[str]) -> dict[str, float]:
    """Records/s of the index builds (a round: the partitions an instance gained together), from the
    schedulers' JSON logs: the first round (all three at once, sharing the machine) and the rounds after
    the SIGKILL (a survivor building the partitions it gained)."""
    first: list[float] = []
    later: list[float] = []
    for name in names:
        rounds = []
        for line in (folder / f"{name}.log").read_text(errors="replace").splitlines():
            if "schedule partitions indexed" in line:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                rounds.append((int(doc.get("records", 0)), float(doc.get("per_s", 0))))
        if rounds:
            first.append(rounds[0][1])
            later += [rate for records, rate in rounds[1:] if records >= 1000]
    out = {"index build rate per scheduler (first builds, 3 at once)": min(first) if first else 0.0}
    if later:
        out["index build rate (a survivor, after the SIGKILL)"] = min(later)
    return out


def _lateness(folder: Path, n: int) -> dict[str, float]:
    values = array("q")
    claimed = again = 0
    for i in range(CLAIMERS):
        with (folder / f"claimer{i}.lat").open("rb") as f:
            values.frombytes(f.read())
        counts = json.loads((folder / f"claimer{i}.json").read_text())
        claimed += counts["claimed"]
        again += counts["again"]
    ordered = sorted(values)

    def pct(p: float) -> float:
        return float(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]) if ordered else 0.0

    return {
        "lateness p50": pct(50),
        "lateness p95": pct(95),
        "lateness p99": pct(99),
        "lateness max": float(ordered[-1]) if ordered else 0.0,
        "early starts": float(sum(1 for v in values if v < 0)),
        "jobs started more than 1 s late": float(sum(1 for v in values if v > 1000)),
        "jobs run twice": float(again),
        "jobs never run": float(n - claimed),
    }


SCALES = {"quick": (2_000, 6.0, 3.0, 4.0), "full": (1_000_000, 540.0, 60.0, 120.0)}
"""jobs, window W (s), horizon H (s), the load's expected time (s): the first run_at is H after it."""


async def _round(
    ep: Endpoints, scale: tuple[int, float, float, float], folder: Path, events: bool
) -> dict[str, float]:
    n, window_s, horizon_s, load_s = scale
    prefix = f"bench{os.getpid()}s"
    topic, queues = f"{prefix}.schedule", [f"{prefix}.q{i}" for i in range(QUEUES)]
    spec = PipelineEnv(
        {"JOBQ_REDIS_URL": ep.redis_url or "", "JOBQ_KAFKA_BOOTSTRAP": ep.kafka_bootstrap},
        log_level="info",
        log_format="json",
        settings={
            "JOBQ_SCHEDULER_GROUP": prefix,
            "JOBQ_SCHEDULER_CRON": "false",
            "JOBQ_SCHEDULER_EVENTS": str(events).lower(),
            "JOBQ_SCHEDULER_STALE_S": str(STALE_S),
            "JOBQ_FAR_TOPIC": topic,
            "JOBQ_FAR_HORIZON_S": str(horizon_s),
        },
    )
    kafka = KafkaSettings(bootstrap=ep.kafka_bootstrap)
    await asyncio.to_thread(ensure, kafka, [TopicSpec(topic, "schedule", PARTITIONS)])
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    client = aioredis.Redis.from_url(ep.redis_url or "", socket_timeout=90)
    loaded_at = time.monotonic()
    first = now_ms() + int((load_s + horizon_s) * 1000)
    out = await _load(ep, client, queues, n, first, int(window_s * 1000), topic)
    out["load time"] = time.monotonic() - loaded_at
    if now_ms() > first - horizon_s * 1000:
        print("warning: loading ran past the first move (run_at - horizon)", file=sys.stderr)
    names = ["s1", "s2", "s3"]
    ctx = multiprocessing.get_context("spawn")
    stop, progress = ctx.Event(), ctx.Value("q", 0)
    claimers = [
        ctx.Process(
            target=claim_process,
            args=(ep.redis_url or "", queues[i::CLAIMERS], stop, progress, str(folder / f"claimer{i}")),
            name=f"claimer{i}",
        )
        for i in range(CLAIMERS)
    ]
    with Children(grace_s=10) as children:
        procs = {
            name: children.start(
                name,
                service_argv("scheduler"),
                env=spec.scheduler(name, queues=f"{prefix}*"),
                output=folder / f"{name}.log",
            )
            for name in names
        }
        for c in claimers:
            c.start()
        watch = _Watch(procs)
        await watch.until(first / 1000 + window_s * 0.4)
        # the one owning the most schedule partitions (rendezvous: as the three see each other)
        dealt = deal_evenly([f"{topic}/{p}" for p in range(PARTITIONS)], names)
        victim = max(names, key=lambda m: list(dealt.values()).count(m))
        procs[victim].signal(signal.SIGKILL)
        killed = time.monotonic()
        while len(await live_members(client, prefix, STALE_S)) > 2:  # noqa: ASYNC110 - other processes' state
            await asyncio.sleep(0.05)
        out["re-deal after SIGKILL"] = time.monotonic() - killed
        await watch.until(first / 1000 + window_s + DRAIN_S, lambda: progress.value >= n)
        stop.set()
        for c in claimers:
            await asyncio.to_thread(c.join, 60)
    out.update(_lateness(folder, n))
    for name in names:
        out[f"scheduler {name} peak RSS"] = watch.peak[name] / 1024
    out.update(_build_rates(folder, names))
    out["load average (1 min, max)"] = watch.load_avg
    for queue in queues:  # every key of the bench's queues (job records too: a shared stack stays small)
        found: list[Any] = []
        async for key in client.scan_iter(match=f"{QueueKeys(queue).prefix}*", count=5000):
            found.append(key)
            if len(found) >= 5000:
                await client.unlink(*found)
                found = []
        if found:
            await client.unlink(*found)
    await client.aclose()
    return out


class _Watch:
    """Samples the schedulers' RSS (and peak, ``VmHWM``) and the machine's load while waiting."""

    def __init__(self, procs: dict[str, Any]) -> None:
        self.procs = procs
        self.peak = dict.fromkeys(procs, 0)
        self.load_avg = os.getloadavg()[0]

    async def until(self, deadline: float, done: Callable[[], bool] = lambda: False) -> None:
        while time.time() < deadline and not done():
            for name, p in self.procs.items():
                if p.running():
                    self.peak[name] = max(self.peak[name], _rss_kib(p.pid), _rss_kib(p.pid, "VmHWM"))
            self.load_avg = max(self.load_avg, os.getloadavg()[0])
            await asyncio.sleep(0.5)


UNITS = {
    "re-deal after SIGKILL": "s",
    "load time": "s",
    "Redis bytes per far-future job": "bytes",
    "Redis used_memory growth per far-future job (with its event)": "bytes",
    "early starts": "jobs",
    "jobs run twice": "jobs",
    "jobs never run": "jobs",
    "jobs started more than 1 s late": "jobs",
    "index build rate per scheduler (first builds, 3 at once)": "records/s",
    "index build rate (a survivor, after the SIGKILL)": "records/s",
    "load average (1 min, max)": "",
}


def run(
    quick: bool = False,
    endpoints: Endpoints | None = None,
    scale: tuple[int, float, float, float] | None = None,
    events: bool = True,
) -> Report:
    """``scale``: (jobs, window s, horizon s, expected load s) instead of the quick or full one;
    ``events``: the schedulers ship the lifecycle events (as shipped; False: the tier alone)."""
    scale = scale or SCALES["quick" if quick else "full"]
    params = {"queues": QUEUES, "instances": 3, "claimers": CLAIMERS, "scale": scale, "events": events}
    report = Report("scheduler", params)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"jobq-bench-scheduler-{os.getpid()}"
    with bench_stack("scheduler", endpoints) as ep:
        figures = asyncio.run(_round(ep, scale, folder, events))
    for name, value in figures.items():
        unit = "MiB" if name.endswith("peak RSS") else UNITS.get(name, "ms")
        report.add(name, unit, [value])
    report.notes.append(
        "lateness = claim time - run_at in ms, for every job (two claimer processes, 12 queues, 3 scheduler "
        "processes, one SIGKILLed at 40 % of the window); every job is a far-future one, written as a "
        "relay writes it (schedule topic record + Redis index entry) before the schedulers start"
    )
    report.notes.append("Redis bytes per far-future job: MEMORY USAGE (SAMPLES 0) of the index HASHes / N")
    report.notes.append(f"scheduler logs and claimer files in {folder}")
    return report
