"""``jobq bench e2e``: the whole path as separate processes on a throw-away stack, durability on.

HTTP → gateway (``python -m kafkagate``, acks=all, idempotent producer) → Kafka (3 partitions) → relay
(``python -m jqrelay``, Consul lock, fenced writes) → Redis (AOF ``everysec``) → 2 worker processes
(``jobq worker``, concurrency 50 each) running the no-op ``demo.noop``.

* **Latency at a fixed arrival rate** (1,000 jobs/s open loop, one job per HTTP request; ``--quick``:
  200/s): job *i* is due at ``t0 + i / rate`` and sent then, whatever happened to earlier requests (no
  coordinated omission). Nothing is added to the handler: after the run every job's record in Redis
  gives its times — the gateway's stamp in the envelope (``enqueued_at``), the relay's write
  (``enqueued_at`` of the job hash) and the worker's claim (``started_at``), all in ms on this machine's
  clock. Reported (HDR histograms): **accepted → started** (from the moment the client had the 202, i.e.
  Kafka had the job; a worker may start a job before the client has read its answer — those count as 0
  and their share is reported), **enqueue → started** (from the due time: the client's whole view), and
  p50 of each hop (gateway, relay, worker).
* **Sustained throughput**: 4 clients post batches of 1,000 jobs as fast as the gateway answers, for
  ``seconds``; the workers' completions are sampled every 0.25 s and the rate over the window after a
  warm-up third is the end-to-end throughput (accepted jobs/s is reported beside it; the difference is
  backlog left in Kafka or Redis).

Everything — the load generator included — shares this machine's 2 cores.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import redis.asyncio as aioredis
from hdrh.histogram import HdrHistogram

from jqcore.kafka import ensure_topics
from jqcore.settings import KafkaSettings
from jqcore.state import Engine
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Children, Output, http_ok, python_m
from loadtest.rawhttp import RawHttp
from loadtest.report import Report
from loadtest.stacks import bench_stack, worker_argv

__all__ = ["Pipeline", "pipeline", "run"]

TOKEN = "bench-token"
PARTITIONS = 3
WORKERS = 2
CONCURRENCY = 50


@dataclass
class Pipeline:
    """A running gateway, relay and worker processes serving one queue through one topic."""

    ep: Endpoints
    queue: str
    topic: str
    url: str
    procs: Children = field(default_factory=lambda: Children(grace_s=30.0))

    @property
    def jobs_url(self) -> str:
        return f"{self.url}/v1/queues/{self.queue}/jobs"

    def check(self) -> None:
        if dead := self.procs.dead():
            raise RuntimeError(f"a pipeline process exited: {dead}")


@asynccontextmanager
async def pipeline(
    ep: Endpoints, tag: str, *, app: str = "worker.examples:registry", log_dir: Path | None = None
) -> AsyncIterator[Pipeline]:
    """Start gateway, relay and workers for queue and topic ``bench.<tag>``; stop them all on exit."""
    queue = topic = f"bench.{tag}"
    kafka = KafkaSettings(bootstrap=ep.kafka_bootstrap)
    await asyncio.to_thread(ensure_topics, kafka, [topic], partitions=PARTITIONS)
    port = free_port()
    env = {
        **os.environ,
        **ep.exports(),
        "JOBQ_GATE_PORT": str(port),
        "JOBQ_GATE_TOKENS": TOKEN,
        "JOBQ_DEFAULT_TOPIC": topic,
        "JOBQ_RELAY_TOPICS": topic,
        "JOBQ_RELAY_KV_PREFIX": f"jobq-bench/{tag}",
        "JOBQ_RELAY_GROUP_PREFIX": f"bench-{tag}",
        "JOBQ_RELAY_LOCK_DELAY_S": "0",
        "JOBQ_LOG_LEVEL": "warning",
    }
    pipe = Pipeline(ep, queue, topic, f"http://127.0.0.1:{port}")
    worker = worker_argv(queue, app=app, concurrency=CONCURRENCY)
    roles = [("kafkagate", python_m("kafkagate")), ("jqrelay", python_m("jqrelay"))]
    roles += [("worker", worker)] * WORKERS
    try:
        for role, argv in roles:
            name = f"{role}-{len(pipe.procs.members)}"
            output: Output = "discard" if log_dir is None else log_dir / f"{name}.log"
            pipe.procs.start(name, argv, output=output, env=env)
        gateway = pipe.procs.members[0]
        await asyncio.to_thread(gateway.wait_ready, http_ok(pipe.url + "/readyz"), timeout_s=60)
        await _warm_up(pipe)
        yield pipe
    finally:
        await asyncio.to_thread(pipe.procs.stop)


async def _warm_up(pipe: Pipeline) -> None:
    """One job through the whole path: the relay holds its lock and the workers claim before the clock."""
    client = aioredis.Redis.from_url(pipe.ep.redis_url or "")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(pipe.jobs_url, json={"kind": "demo.noop"}) as r,
    ):
        if r.status != 202:
            raise RuntimeError(f"warm-up enqueue refused: {r.status} {await r.text()}")
    await _wait_finished(pipe, client, 1, 60)
    await client.aclose()


async def _finished(client: aioredis.Redis, queue: str) -> int:
    return (await Engine(client).depth(queue)).finished


async def _wait_finished(pipe: Pipeline, client: aioredis.Redis, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while await _finished(client, pipe.queue) < n:
        pipe.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {await _finished(client, pipe.queue)}/{n} jobs finished in time")
        await asyncio.sleep(0.1)


@dataclass
class Sent:
    id: str
    due_ms: float
    accepted_ms: float


async def _open_loop(pipe: Pipeline, rate: float, seconds: float) -> list[Sent]:
    """One job per request, each due at ``t0 + i / rate``; returns the accepted ones with their times.
    Requests go over :class:`RawHttp` (64 keep-alive connections) so the generator's lag stays small."""
    host, port = pipe.url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    start_loop = loop.time() + 0.2
    start_epoch_ms = (time.time() + 0.2) * 1000
    sent: list[Sent] = []
    async with RawHttp(host, int(port), 64, {"Authorization": f"Bearer {TOKEN}"}) as http:
        request = http.request("POST", f"/v1/queues/{pipe.queue}/jobs", orjson.dumps({"kind": "demo.noop"}))

        async def one(i: int) -> None:
            status, answer = await http.send(request)
            accepted_ms = time.time() * 1000
            if status != 202:
                raise RuntimeError(f"enqueue refused: {status} {answer[:200]!r}")
            job_id = orjson.loads(answer)["jobs"][0]["id"]
            sent.append(Sent(job_id, start_epoch_ms + i / rate * 1000, accepted_ms))

        tasks = []
        for i in range(int(rate * seconds)):
            delay = start_loop + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return sent


async def _job_times(client: aioredis.Redis, queue: str, ids: list[str]) -> list[tuple[int, int, int]]:
    """(gateway stamp, relay write, worker claim) in ms for each job, from its record in Redis."""
    out = []
    for job in await Engine(client).get_jobs(queue, ids):
        if job is None or job.envelope is None:
            raise RuntimeError("a finished job's record is gone before its retention ended")
        gateway_stamp = int(orjson.loads(job.envelope)["enqueued_at"])
        out.append((gateway_stamp, job.enqueued_at or 0, job.started_at or 0))
    return out


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 3_600_000_000, 3)  # microseconds, up to an hour


async def latency(pipe: Pipeline, rate: float, seconds: float) -> dict[str, float]:
    """Open-loop latency figures (ms) at ``rate`` jobs/s for ``seconds``."""
    client = aioredis.Redis.from_url(pipe.ep.redis_url or "")
    before = await _finished(client, pipe.queue)
    sent = await _open_loop(pipe, rate, seconds)
    await _wait_finished(pipe, client, before + len(sent), 120)
    times = await _job_times(client, pipe.queue, [s.id for s in sent])
    await client.aclose()
    accepted, total = _hist(), _hist()
    hops = {"gateway": _hist(), "relay": _hist(), "worker": _hist()}
    early = 0
    for s, (stamped, written, started) in zip(sent, times, strict=True):
        if started < s.accepted_ms:
            early += 1
        accepted.record_value(max(1, int((started - s.accepted_ms) * 1000)))
        total.record_value(max(1, int((started - s.due_ms) * 1000)))
        hops["gateway"].record_value(max(1, int((stamped - s.due_ms) * 1000)))
        hops["relay"].record_value(max(1, (written - stamped) * 1000))
        hops["worker"].record_value(max(1, (started - written) * 1000))
    out = {
        f"accepted→started p50 at {rate:g}/s": accepted.get_value_at_percentile(50) / 1000,
        f"accepted→started p99 at {rate:g}/s": accepted.get_value_at_percentile(99) / 1000,
        f"enqueue→started p50 at {rate:g}/s": total.get_value_at_percentile(50) / 1000,
        f"enqueue→started p99 at {rate:g}/s": total.get_value_at_percentile(99) / 1000,
        f"enqueue→started max at {rate:g}/s": total.get_max_value() / 1000,
        "started before the client read its 202": early / len(sent) * 100,
    }
    for hop, hist in hops.items():
        out[f"{hop} hop p50"] = hist.get_value_at_percentile(50) / 1000
    return out


async def sustained(
    pipe: Pipeline, seconds: float, clients: int = 4, per_request: int = 1000
) -> dict[str, float]:
    """Closed-loop batch enqueue for ``seconds`` while relay and workers run; end-to-end jobs/s."""
    client = aioredis.Redis.from_url(pipe.ep.redis_url or "")
    base = await _finished(client, pipe.queue)
    body = orjson.dumps({"jobs": [{"kind": "demo.noop"} for _ in range(per_request)]})
    accepted = 0
    samples: list[tuple[float, int]] = []
    started = time.perf_counter()
    deadline = started + seconds

    async def post(http: aiohttp.ClientSession) -> None:
        nonlocal accepted
        while time.perf_counter() < deadline:
            async with http.post(pipe.jobs_url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                if r.status == 202:
                    accepted += per_request

    async def sample() -> None:
        while time.perf_counter() < deadline:
            samples.append((time.perf_counter() - started, await _finished(client, pipe.queue) - base))
            await asyncio.sleep(0.25)

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        await asyncio.gather(sample(), *(post(http) for _ in range(clients)))
    pipe.check()
    await client.aclose()
    warm = [(t, n) for t, n in samples if t >= seconds / 3]
    (t0, n0), (t1, n1) = warm[0], warm[-1]
    return {
        "sustained end-to-end throughput": (n1 - n0) / (t1 - t0),
        "accepted by the gateway": accepted / seconds,
    }


async def _round(ep: Endpoints, quick: bool, rep: int) -> dict[str, float]:
    rate, lat_s, sus_s = (200.0, 2.0, 6.0) if quick else (1000.0, 10.0, 30.0)
    out: dict[str, float] = {}
    async with pipeline(ep, f"e2e{os.getpid()}l{rep}") as pipe:
        out.update(await latency(pipe, rate, lat_s))
    async with pipeline(ep, f"e2e{os.getpid()}s{rep}") as pipe:
        out.update(await sustained(pipe, sus_s))
    return out


def _unit(name: str) -> str:
    if name.startswith(("sustained", "accepted by")):
        return "jobs/s"
    return "%" if name.startswith("started before") else "ms"


def run(quick: bool = False, endpoints: Endpoints | None = None) -> Report:
    reps = 1 if quick else 3
    params = {"reps": reps, "quick": quick, "partitions": PARTITIONS, "workers": WORKERS}
    report = Report("e2e", {**params, "concurrency": CONCURRENCY})
    samples: dict[str, list[float]] = {}
    with bench_stack("e2e", endpoints) as ep:
        for rep in range(reps):
            for name, value in asyncio.run(_round(ep, quick, rep)).items():
                samples.setdefault(name, []).append(value)
    for name, values in samples.items():
        report.add(name, _unit(name), values)
    report.notes += [
        "separate processes: 1 gateway, 1 relay, 2 workers x concurrency 50; Kafka acks=all + idempotence; "
        "Redis appendonly everysec; the load generator shares the 2 cores",
        "job times come from each job's record in Redis (ms resolution): gateway stamp, relay write, claim",
    ]
    return report
