"""``python -m loadtest.ship_ab BASELINE``: the event shipper's cost per job, this checkout's scheduler
against another checkout's, on one stack fed at a fixed rate, interleaved (issue 58).

``BASELINE`` is a checkout's root (``git archive <rev> | tar -x -C /tmp/base``). On a throw-away Kafka +
Consul + Redis (or the given endpoints), this process feeds one queue at ``rate`` jobs/s as the path does at
one job per request: every 10 ms a tick enqueues its jobs, one call each (an entry of one event each: the
relay's small batches at a trickle), then one ``settle_claim`` completes the last tick's jobs and claims
this tick's (a ``running`` and a ``completed`` entry of the tick's events). Meanwhile one scheduler process
(``python -m jqsched``, that queue its only one) ships the events; the trees take turns (``pairs`` pairs,
the order alternating), each turn a fresh process that first catches up, then is measured over
``window_s``: its CPU (``/proc``, with its tree) per job fed, Redis's (``INFO cpu``) and Kafka's JVM (by its
port) per job — those two include the feeding, the same for every turn, so their difference is the
shipping's —, the events topic's records per job (its end offsets), and from the scheduler's ``/metrics``
its reads of the stream a second and the events a read carried. ``off``: a third turn per pair, the
baseline's scheduler with its shipper off (``JOBQ_SCHEDULER_EVENTS=false``): what the rest of the scheduler
costs at that load, so the shipping's own cost is the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import redis.asyncio as aioredis
from confluent_kafka import Consumer, KafkaException, TopicPartition

from jqcore.envelope import new_envelope
from jqengine import Engine, Settle
from jqengine.keys import QueueKeys
from jqstack.manager import Endpoints
from jqstack.paths import repo_root
from jqstack.pipeline import PipelineEnv, Scope, service_argv
from jqstack.procs import free_port
from jqstack.supervise import Child, http_ok, start
from loadtest.costs import listening_pid
from loadtest.cpu import redis_cpu_s, tree_cpu_s
from loadtest.report import Report
from loadtest.stacks import bench_stack

__all__ = ["main"]

TICK_S = 0.01
CAUGHT_UP = 200
"""Stream entries at most for a scheduler to count as keeping up."""
SETTLE_S = 3.0
"""Seconds after a scheduler caught up before its window (a shorter window: as long): its start-up is not
the figure."""
OFF = "shipper off"


class Feeder:
    """Feeds one queue at a fixed rate (see the module's docstring); ``fed`` counts the jobs enqueued."""

    def __init__(self, url: str, queue: str, rate: float) -> None:
        self.url, self.queue, self.rate = url, queue, rate
        self.fed = 0
        self.running: list[Settle] = []

    async def run(self, stop: asyncio.Event) -> None:
        client = aioredis.Redis.from_url(self.url, max_connections=64)
        engine = Engine(client)
        t0, owed = time.monotonic(), 0.0
        while not stop.is_set():
            due = (time.monotonic() - t0) * self.rate
            n = min(32, int(due - self.fed))
            await asyncio.gather(
                *(engine.enqueue_batch([new_envelope(self.queue, "noop", None)]) for _ in range(n))
            )
            self.fed += n
            _, claimed = await engine.jobs.settle_claim(self.queue, self.running, 1000, lease_ms=60_000)
            self.running = [Settle((c.envelope.id, c.attempt, c.token)) for c in claimed]
            owed += TICK_S
            await asyncio.sleep(max(0.0, t0 + owed - time.monotonic()))
        await client.aclose()


def _records(bootstrap: str, topic: str) -> int:
    """Every record the topic holds (the sum of its partitions' end offsets)."""
    for _ in range(50):  # a topic just created: its leaders a moment later
        try:
            return _end_offsets(bootstrap, topic)
        except KafkaException:
            time.sleep(0.2)
    return _end_offsets(bootstrap, topic)


def _end_offsets(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ship-ab", "enable.auto.commit": False})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or not md.partitions:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    finally:
        c.close()


@contextmanager
def _scheduler(root: Path, env: dict[str, str], off: bool) -> Iterator[tuple[Child, int]]:
    """A scheduler process of the checkout at ``root`` (``off``: its shipper off); its metrics port."""
    port = free_port()
    env = {**env, "PYTHONPATH": str(root), "JOBQ_SCHEDULER_METRICS_PORT": str(port)}
    if off:
        env["JOBQ_SCHEDULER_EVENTS"] = "false"
    child = start(env["JOBQ_SCHEDULER_NAME"], service_argv("scheduler"), env=env, cwd=root)
    try:
        yield child, port
    finally:
        child.stop(15.0)


def _caught_up(sync: redis.Redis, queue: str, child: Child, timeout_s: float = 120) -> None:
    """Until the scheduler keeps the stream short (it ships what the feeder writes)."""
    deadline = time.monotonic() + timeout_s
    while int(sync.xlen(QueueKeys(queue).events)) > CAUGHT_UP:
        if child.proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited: {child.proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError("the scheduler did not catch up")
        time.sleep(0.2)


def _rounds(port: int) -> tuple[float, float]:
    """The scheduler's reads of its queue's stream so far (``events_read`` calls: one a queue and round;
    its idle waits are not reads) and the events it shipped (its ``/metrics``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    rounds = events = 0.0
    for line in text.splitlines():
        if line.startswith("jobq_engine_script_calls_total{") and 'script="events_read"' in line:
            rounds += float(line.rsplit(" ", 1)[1])
        elif line.startswith("jobq_events_shipped_total{"):
            events += float(line.rsplit(" ", 1)[1])
    return rounds, events


async def _turn(
    ep: Endpoints, feeder: Feeder, root: Path, env: dict[str, str], kafka: int, window_s: float, off: bool
) -> dict[str, float]:
    """One scheduler process's turn: started, caught up, then measured over ``window_s``."""
    sync = redis.Redis.from_url(ep.redis_url or "")
    topic = env["JOBQ_EVENTS_TOPIC"]
    with _scheduler(root, env, off) as (child, port):
        ready = http_ok(f"http://127.0.0.1:{port}/readyz")
        await asyncio.to_thread(child.wait_ready, ready, timeout_s=60, interval_s=0.2)
        if not off:
            await asyncio.to_thread(_caught_up, sync, feeder.queue, child)
        await asyncio.sleep(min(SETTLE_S, window_s))
        cpu0, r0, k0 = tree_cpu_s([child.pid]), redis_cpu_s(sync), tree_cpu_s([kafka])
        n0, e0 = await asyncio.to_thread(_rounds, port)
        rec0 = await asyncio.to_thread(_records, ep.kafka_bootstrap, topic)
        fed0, t0 = feeder.fed, time.monotonic()
        await asyncio.sleep(window_s)
        cpu1, r1, k1 = tree_cpu_s([child.pid]), redis_cpu_s(sync), tree_cpu_s([kafka])
        fed1, t1 = feeder.fed, time.monotonic()
        n1, e1 = await asyncio.to_thread(_rounds, port)
        if not off:  # every event of the window in Kafka before its records are counted
            await asyncio.to_thread(_caught_up, sync, feeder.queue, child)
        rec1 = await asyncio.to_thread(_records, ep.kafka_bootstrap, topic)
    sync.close()
    jobs = max(1, fed1 - fed0)
    return {
        "scheduler CPU": (cpu1 - cpu0) / jobs * 1e6,
        "redis CPU": (r1 - r0) / jobs * 1e6,
        "kafka CPU": (k1 - k0) / jobs * 1e6,
        "events records": (rec1 - rec0) / jobs,
        "jobs fed": jobs / (t1 - t0),
        "stream reads": (n1 - n0) / (t1 - t0),
        "events a read": (e1 - e0) / max(1.0, n1 - n0),
    }


UNITS = {
    "scheduler CPU": "µs/job",
    "redis CPU": "µs/job",
    "kafka CPU": "µs/job",
    "events records": "records/job",
    "jobs fed": "jobs/s",
    "stream reads": "reads/s",
    "events a read": "events",
}


async def _pairs(
    ep: Endpoints, trees: dict[str, Path], rate: float, window_s: float, pairs: int, loads: list[str]
) -> dict[str, dict[str, list[float]]]:
    scope = Scope("bench", f"shipab{os.getpid()}")
    env = PipelineEnv(ep.exports(), scope=scope, log_level="warning").scheduler("")
    kafka = listening_pid(int(ep.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1]), "java")
    if kafka is None:
        raise RuntimeError("Kafka's JVM not found")
    feeder = Feeder(ep.redis_url or "", scope.name, rate)
    stop = asyncio.Event()
    feeding = asyncio.create_task(feeder.run(stop))
    samples: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    try:
        for pair in range(pairs):
            load = f"{os.getloadavg()[0]:.1f}"
            order = [t for t in trees if t != OFF]
            order = ([OFF] if OFF in trees else []) + (order if pair % 2 == 0 else order[::-1])
            for name in order:  # the shipper off first: the next turn ships what it left
                env["JOBQ_SCHEDULER_NAME"] = f"ship-ab-{pair}-{name.replace(' ', '-')}"
                got = await _turn(ep, feeder, trees[name], env, kafka, window_s, off=name == OFF)
                for k, v in got.items():
                    samples[name].setdefault(k, []).append(v)
            loads.append(f"{load} → {os.getloadavg()[0]:.1f}")
    finally:
        stop.set()
        await feeding
    return samples


def run(
    baseline: Path,
    *,
    rate: float = 1000.0,
    window_s: float = 8.0,
    pairs: int = 3,
    off: bool = False,
    quick: bool = False,
    endpoints: Endpoints | None = None,
) -> Report:
    """``off``: a third turn per pair, the baseline's scheduler with its shipper off (what the rest of the
    scheduler costs at this load). ``quick``: 100 jobs/s, 1 s windows, one pair (a smoke run)."""
    if quick:
        rate, window_s, pairs = 100.0, 1.0, 1
    trees = {"baseline": baseline.resolve(), "this": repo_root()}
    if off:
        trees[OFF] = trees["baseline"]
    params = {"baseline": str(baseline), "rate": rate, "window_s": window_s, "pairs": pairs}
    report = Report("ship-ab", params)
    loads: list[str] = []
    with bench_stack("ship-ab", endpoints) as ep:
        samples = asyncio.run(_pairs(ep, trees, rate, window_s, pairs, loads))
    for name, figures in samples.items():
        for k, values in figures.items():
            report.add(f"{k}: {name}", UNITS[k], values)
    for k in UNITS:
        ratios = [t / b for t, b in zip(samples["this"][k], samples["baseline"][k], strict=True) if b]
        if ratios:
            report.add(f"{k}: this / baseline, per pair", "x", ratios)
    report.notes += [
        f"load average (1 min) at each pair's start → end: {'; '.join(loads)}",
        f"fed at {rate:g} jobs/s (each job its own enqueue call, a tick's claim and completion one call "
        f"each); {pairs} pairs of {window_s:g} s windows, the trees alternating; Redis and Kafka CPU "
        "include the feeding (the same for every turn)",
    ]
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.ship_ab", description=(__doc__ or "").split("\n\n")[0]
    )
    p.add_argument("baseline", type=Path, help="another checkout's root (git archive REV | tar -x -C DIR)")
    p.add_argument("--rate", type=float, default=1000.0, help="jobs/s fed")
    p.add_argument("--window", type=float, default=8.0, help="seconds measured per turn")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--off", action="store_true", help="also the baseline's scheduler with its shipper off")
    a = p.parse_args(argv)
    if not (a.baseline / "jqsched").is_dir():
        p.error(f"{a.baseline}: not a checkout (no jqsched/)")
    report = run(a.baseline, rate=a.rate, window_s=a.window, pairs=a.pairs, off=a.off)
    for figure in report.figures:
        print(f"{figure.name:<44} {figure.median:9.3g} {figure.unit}  ±{figure.spread:.1%}")
    for note in report.notes:
        print(f"- {note}")
    print(f"report: {report.save()}")


if __name__ == "__main__":
    main(sys.argv[1:])
