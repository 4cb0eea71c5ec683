"""``./run bench scheduler``: the scheduler service under a large delayed load, with a far-future share.

``N`` delayed jobs (1M; ``--quick``: 3k) spread over the next ``SPREAD`` (10 min; quick 8 s) in 12
queues; those due beyond the horizon (half of the spread) go to the far-future tier as a relay would
write them (the record into the compacted schedule topic, an index entry into Redis), the rest straight
into the engine. Three ``python -m jqsched`` processes keep the timers and move the far jobs in; one is
killed with SIGKILL at 40 % of the spread. One claimer in this process takes every job as it becomes
claimable and records its lateness (claim time minus ``run_at``).

Figures: lateness p50/p99/max and early starts (goal: never early, p99 ≤ 100 ms); Redis bytes per
far-future job (its index entry) and per delayed job in Redis; the schedulers' peak RSS; the time from
the SIGKILL until the survivors see two members (the re-deal).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from hdrh.histogram import HdrHistogram

from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope
from jqcore.kafka import AsyncProducer, Record, schedule_key
from jqcore.membership import live_members
from jqcore.redisconn import RedisClient
from jqcore.settings import KafkaSettings
from jqcore.state import Engine
from jqcore.state.keys import QueueKeys
from jqcore.topicadmin import ensure
from jqcore.topics import TopicSpec
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, service_argv
from jqstack.supervise import Children
from loadtest.report import Report
from loadtest.stacks import bench_stack

__all__ = ["run"]

QUEUES = 12
BATCH = 1000
STALE_S = 3.0


async def _used_memory(client: RedisClient) -> int:
    return int((await client.info("memory"))["used_memory"])


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _load(
    ep: Endpoints,
    client: RedisClient,
    engine: Engine,
    queues: list[str],
    n: int,
    first_ms: int,
    spread_ms: int,
    cut_ms: int,
    topic: str,
) -> dict[str, float]:
    """Write the jobs; returns Redis bytes per far job and per delayed job."""
    producer = AsyncProducer(KafkaSettings(bootstrap=ep.kafka_bootstrap))
    near_bytes = far_bytes = 0
    near = far = 0
    try:
        for start in range(0, n, BATCH):
            envs = [
                new_envelope(queues[i % len(queues)], "noop", None, run_at=first_ms + i * spread_ms // n)
                for i in range(start, min(n, start + BATCH))
            ]
            far_envs = [e for e in envs if (e.run_at or 0) > cut_ms]
            near_envs = [e for e in envs if (e.run_at or 0) <= cut_ms]
            if far_envs:
                before = await _used_memory(client)
                await producer.produce_many(
                    [Record(topic, encode(e), schedule_key(e.queue, e.id)) for e in far_envs]
                )
                by_queue: dict[str, list[tuple[str, int]]] = {}
                for e in far_envs:
                    by_queue.setdefault(e.queue, []).append((e.id, e.run_at or 0))
                for queue, items in by_queue.items():
                    await engine.schedule_far(queue, items)
                far_bytes += await _used_memory(client) - before
                far += len(far_envs)
            if near_envs:
                before = await _used_memory(client)
                await engine.enqueue_batch(near_envs)
                near_bytes += await _used_memory(client) - before
                near += len(near_envs)
            if (start + BATCH) % 100_000 == 0:
                print(f"... loaded {start + BATCH:,} of {n:,} jobs", file=sys.stderr, flush=True)
    finally:
        await asyncio.to_thread(producer.close, 10.0)
    return {
        "Redis bytes per far-future job": far_bytes / max(1, far),
        "Redis bytes per delayed job in Redis": near_bytes / max(1, near),
    }


async def _claim_all(
    engine: Engine, queues: list[str], n: int, due: dict[str, int]
) -> tuple[HdrHistogram, int, int]:
    """Claim and complete every job as soon as it is claimable: the lateness histogram (ms), how many
    started early and how many were claimed a second time."""
    hist = HdrHistogram(1, 3_600_000, 3)
    early = again = first = 0
    while first < n:
        got = 0
        for queue in queues:
            claimed = await engine.claim(queue, 200)
            now = now_ms()
            for c in claimed:
                run_at = due.pop(c.id, None)
                if run_at is None:
                    again += 1
                    continue
                first += 1
                early += now < run_at
                hist.record_value(max(1, now - run_at))
            if claimed:
                await engine.complete_many(queue, [((c.id, c.attempt, c.token), None) for c in claimed])
            got += len(claimed)
        if not got:
            await engine.wait_for_work(queues, timeout_s=5)
    return hist, early, again


async def _round(ep: Endpoints, quick: bool, rep: int, folder: Path) -> dict[str, float]:
    n, spread_s = (3_000, 8.0) if quick else (1_000_000, 600.0)
    lead_s = 8.0 if quick else 420.0  # loading 1M jobs takes ~4-5 min here: the first is due after it
    prefix = f"bench{os.getpid()}s{rep}"
    topic, queues = f"{prefix}.schedule", [f"{prefix}.q{i}" for i in range(QUEUES)]
    horizon_s = lead_s + spread_s / 2
    spec = PipelineEnv(
        {"JOBQ_REDIS_URL": ep.redis_url or "", "JOBQ_KAFKA_BOOTSTRAP": ep.kafka_bootstrap},
        log_level="warning",
        settings={
            "JOBQ_SCHEDULER_GROUP": prefix,
            "JOBQ_SCHEDULER_CRON": "false",
            "JOBQ_SCHEDULER_STALE_S": str(STALE_S),
            "JOBQ_FAR_TOPIC": topic,
            "JOBQ_FAR_HORIZON_S": str(horizon_s),
            "JOBQ_FAR_RESCAN_S": str(horizon_s / 8),
        },
    )
    schedule = TopicSpec(topic, "schedule", 6)
    await asyncio.to_thread(ensure, KafkaSettings(bootstrap=ep.kafka_bootstrap), [schedule])
    client = aioredis.Redis.from_url(ep.redis_url or "", socket_timeout=90)
    engine = Engine(client)
    first = now_ms() + int(lead_s * 1000)
    out = await _load(
        ep, client, engine, queues, n, first, int(spread_s * 1000), now_ms() + int(horizon_s * 1000), topic
    )
    due: dict[str, int] = {}
    for queue in queues:  # what is in Redis now, plus the far index: every job's run_at by id
        for key in (QueueKeys(queue).delayed, QueueKeys(queue).far):
            pairs: list[Any] = await client.zrange(key, 0, -1, withscores=True)
            for job_id, score in pairs:
                due[job_id.decode()] = int(score)
    names = ["s1", "s2", "s3"]
    peak_rss = 0
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
        late_start = now_ms() - first
        if late_start > 0:
            print(f"warning: loading ran {late_start} ms past the first due time", file=sys.stderr)
        claimer = asyncio.create_task(_claim_all(engine, queues, len(due), due))
        kill_at = first / 1000 + spread_s * 0.4
        while time.time() < kill_at and not claimer.done():
            peak_rss = max(peak_rss, *(_rss_kib(p.pid) for p in procs.values()))
            await asyncio.sleep(0.5)
        procs["s1"].signal(signal.SIGKILL)
        killed = time.monotonic()
        while len(await live_members(client, prefix, STALE_S)) > 2:  # noqa: ASYNC110 - other processes' state
            await asyncio.sleep(0.05)
        out["re-deal after SIGKILL"] = time.monotonic() - killed
        while not claimer.done():
            peak_rss = max(peak_rss, *(_rss_kib(p.pid) for p in procs.values() if p.running()))
            await asyncio.sleep(0.5)
        hist, early, again = await claimer
    out["lateness p50"] = hist.get_value_at_percentile(50)
    out["lateness p99"] = hist.get_value_at_percentile(99)
    out["lateness max"] = hist.get_max_value()
    out["early starts"] = float(early)
    out["jobs run twice"] = float(again)
    out["scheduler peak RSS"] = peak_rss / 1024
    for queue in queues:
        keys = QueueKeys(queue)
        await client.delete(keys.delayed, keys.far, keys.ready, keys.done)
    await client.aclose()
    return out


UNITS = {
    "re-deal after SIGKILL": "s",
    "Redis bytes per far-future job": "bytes",
    "Redis bytes per delayed job in Redis": "bytes",
    "early starts": "jobs",
    "jobs run twice": "jobs",
    "scheduler peak RSS": "MiB",
}


def run(quick: bool = False, endpoints: Endpoints | None = None) -> Report:
    report = Report("scheduler", {"quick": quick, "queues": QUEUES, "instances": 3})
    samples: dict[str, list[float]] = {}
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"jobq-bench-scheduler-{os.getpid()}"
    with bench_stack("scheduler", endpoints) as ep:
        for name, value in asyncio.run(_round(ep, quick, 0, folder)).items():
            samples.setdefault(name, []).append(value)
    for name, values in samples.items():
        report.add(name, UNITS.get(name, "ms"), values)
    report.notes.append(
        "lateness = claim time - run_at in ms, for every job (one claimer, 12 queues, 3 scheduler "
        "processes, one SIGKILLed at 40 % of the spread; its queues wait up to the re-deal)"
    )
    report.notes.append(
        "far-future jobs written as a relay writes them (schedule topic + index entry); bytes from "
        "Redis used_memory deltas"
    )
    report.notes.append(f"scheduler logs in {folder}")
    return report
