"""``./run bench e2e``: the whole path as separate processes on a throw-away stack, durability on.

HTTP → gateway (``python -m kafkagate``, acks=all, idempotent producer) → Kafka (3 partitions) → relay
(``python -m jqrelay``, Consul lock, fenced writes) → Redis (AOF ``everysec``) → 2 worker processes
(``jobq worker``, concurrency 50 each) running the no-op ``demo.noop``; one scheduler (``python -m
jqsched``, every duty on as shipped: timers, cron, far tier, graphs) ships the queue's lifecycle events
(on by default) to a Kafka topic of the run.

* **Latency at a fixed arrival rate** (1,000 jobs/s open loop, one job per HTTP request; ``--quick``:
  200/s): job *i* is due at ``t0 + i / rate`` and sent then, whatever happened to earlier requests (no
  coordinated omission). Nothing is added to the handler: after the run every job's record in Redis
  gives its times — the gateway's stamp in the envelope (``enqueued_at``), the relay's write
  (``enqueued_at`` of the job hash) and the worker's claim (``started_at``), all in ms on this machine's
  clock. Reported (HDR histograms): **accepted → started** (from the moment the client had the 202, i.e.
  Kafka had the job; a worker may start a job before the client has read its answer — those count as 0
  and their share is reported), **enqueue → started** (from the due time: the client's whole view), and
  p50 of each hop (gateway, relay, worker); and the events topic's records per job (the scheduler's,
  counted once it shipped every event of the run: ≈ 3 events a job, a record per partition and round).
* **Sustained throughput** (on a fresh pipeline; ``--quick``: on the latency phase's, whose jobs have
  all finished by then): 4 clients post batches of 1,000 jobs as fast as the gateway answers, for
  ``seconds``; the jobs finished are counted after a warm-up third and at the end, and their rate over
  that window is the end-to-end throughput (accepted jobs/s is reported beside it, over the whole phase
  and over the window, with the jobs/s the relay wrote to Redis; the differences are backlog left in
  Kafka or Redis).
* **Cost model** (:mod:`loadtest.costs`): over that same window, CPU seconds (user + system) of every
  process on the path — gateway, relay, workers, scheduler (``/proc``, each with its process tree),
  Kafka's JVM and Consul (found by the port they listen on; not measured when that is not a process
  here, e.g. in a container), Redis (``INFO cpu``, its forks included), the load generator (this
  process) and the whole machine (``/proc/stat``) — divided by the jobs finished in the window: CPU µs
  per job. The system total is every process but the generator. ``report.md`` adds each one's share,
  the cores it kept busy, and the gateway's and relay's CPU per job they handled themselves (in a
  closed loop they run ahead of the workers, and the surplus waits in Kafka or Redis).
* **Profiles** (``profile``; on by default, off with ``--quick``): after that window, while the load
  continues, ``py-spy`` records the gateway, the relay, one worker and the scheduler at once (10 s, 5 s
  in a quick run, at 250 Hz, non-blocking; first repetition only); the raw collapsed stacks are saved
  with the report and ``report.md`` lists each process's top functions by self time. The CPU figures
  never overlap a recording (sampling costs the target CPU).

Everything — the load generator included — shares this machine's 2 cores.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import redis
import redis.asyncio as aioredis
from hdrh.histogram import HdrHistogram

from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import job_topics
from jqengine import Engine
from jqengine.keys import QueueKeys
from jqruntime.topicadmin import ensure
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, Scope, service_argv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Child, Children, Output, http_ok
from loadtest.costs import (
    CpuMeter,
    CpuReading,
    Profile,
    cost_table,
    listening_pid,
    machine_busy_s,
    per_unit_us,
    process_clock,
    profile_section,
    record_profiles,
)
from loadtest.cpu import redis_cpu_s
from loadtest.rawhttp import RawHttp
from loadtest.report import Report
from loadtest.stacks import bench_stack
from loadtest.topics import end_offsets

__all__ = ["Pipeline", "pipeline", "run"]

TOKEN = "bench-token"
PARTITIONS = 3
WORKERS = 2
CONCURRENCY = 50
ROLES = {"gateway": "kafkagate", "relay": "jqrelay", f"workers ({WORKERS})": "worker", "scheduler": "jqsched"}
"""Cost name → the role of the pipeline processes it sums."""
SYSTEM = (*ROLES, "kafka", "redis", "consul")
"""Everything on the path, in order (the cost figures are ``cpu <name>``)."""
PROFILED = {"gateway": "kafkagate", "relay": "jqrelay", "worker": "worker", "scheduler": "jqsched"}
"""Profile name → the role of the (first) pipeline process py-spy records."""
PROFILE_RATE = 250


@dataclass
class Pipeline:
    """A running gateway, relay, worker and scheduler processes serving one queue through one topic."""

    ep: Endpoints
    queue: str
    topic: str
    url: str
    procs: Children = field(default_factory=lambda: Children(grace_s=30.0))

    @property
    def jobs_url(self) -> str:
        return f"{self.url}/v1/queues/{self.queue}/jobs"

    @property
    def events_topic(self) -> str:
        return f"{self.topic}.events"  # the scope's (jqstack.pipeline.Scope)

    def check(self) -> None:
        if dead := self.procs.dead():
            raise RuntimeError(f"a pipeline process exited: {dead}")

    def role(self, role: str) -> list[Child]:
        """The processes of ``role`` (``kafkagate``, ``jqrelay``, ``worker``, ``jqsched``)."""
        return [c for c in self.procs if c.name.rsplit("-", 1)[0] == role]


@asynccontextmanager
async def pipeline(
    ep: Endpoints, tag: str, *, app: str = "examples.demo_app:registry", log_dir: Path | None = None
) -> AsyncIterator[Pipeline]:
    """Start gateway, relay, workers and scheduler for queue and topic ``bench.<tag>`` (events to
    ``bench.<tag>.events``); stop them all on exit."""
    scope = Scope("bench", tag)
    queue = topic = scope.name
    kafka = KafkaSettings(bootstrap=ep.kafka_bootstrap)
    await asyncio.to_thread(ensure, kafka, job_topics([topic], PARTITIONS, sides=False))
    port = free_port()
    spec = PipelineEnv(
        ep.exports(),
        scope=scope,
        token=TOKEN,
        log_level="warning",
        settings={"JOBQ_RELAY_LOCK_DELAY_S": "0"},
    )
    pipe = Pipeline(ep, queue, topic, f"http://127.0.0.1:{port}")
    worker = (worker_argv(queue, app=app, concurrency=CONCURRENCY), spec.worker())
    roles = [
        ("kafkagate", (service_argv("gateway"), spec.gateway(port))),
        ("jqrelay", (service_argv("relay"), spec.relay())),
    ]
    roles += [("worker", worker)] * WORKERS
    roles += [("jqsched", (service_argv("scheduler"), spec.scheduler(f"bench-{tag}")))]
    try:
        for role, (argv, env) in roles:
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
    """One job through the whole path: the relay holds its lock, the workers claim and the scheduler
    ships the queue's events before the clock."""
    client = aioredis.Redis.from_url(pipe.ep.redis_url or "")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(pipe.jobs_url, json={"kind": "demo.noop"}) as r,
    ):
        if r.status != 202:
            raise RuntimeError(f"warm-up enqueue refused: {r.status} {await r.text()}")
    await _wait_finished(pipe, client, 1, 60)
    await _wait_shipped(pipe, client, 60)
    await client.aclose()


async def _wait_shipped(pipe: Pipeline, client: aioredis.Redis, timeout_s: float) -> None:
    """Until the scheduler shipped every event of the queue (its stream is empty)."""
    deadline = time.monotonic() + timeout_s
    while await client.xlen(QueueKeys(pipe.queue).events):
        pipe.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the scheduler left events of {pipe.queue} unshipped for {timeout_s:g} s")
        await asyncio.sleep(0.1)


async def _finished(client: aioredis.Redis, queue: str) -> int:
    return (await Engine(client).reads.depth(queue)).finished


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
    for job in await Engine(client).reads.get_jobs(queue, ids):
        if job is None or job.envelope is None:
            raise RuntimeError("a finished job's record is gone before its retention ended")
        gateway_stamp = int(orjson.loads(job.envelope)["enqueued_at"])
        out.append((gateway_stamp, job.enqueued_at or 0, job.started_at or 0))
    return out


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 3_600_000_000, 3)  # microseconds, up to an hour


async def latency(
    pipe: Pipeline, rate: float, seconds: float, meter: CpuMeter | None = None
) -> dict[str, float]:
    """Open-loop latency figures (ms) at ``rate`` jobs/s for ``seconds``; with ``meter`` also the CPU µs
    per job of its clocks from the first request to the last job finished (``steady cpu <name>``: each
    stage handles every job once, so none is charged for another's backlog)."""
    client = aioredis.Redis.from_url(pipe.ep.redis_url or "")
    before = await _finished(client, pipe.queue)
    records = await asyncio.to_thread(end_offsets, pipe.ep.kafka_bootstrap, pipe.events_topic)
    start = await asyncio.to_thread(meter.read) if meter is not None else None
    sent = await _open_loop(pipe, rate, seconds)
    await _wait_finished(pipe, client, before + len(sent), 120)
    steady: dict[str, float] = {}
    if meter is not None and start is not None:
        used = CpuMeter.used(start, await asyncio.to_thread(meter.read))
        steady = {f"steady {k}": v for k, v in _cost_figures(per_unit_us(used, len(sent))).items()}
    await _wait_shipped(pipe, client, 60)
    records = await asyncio.to_thread(end_offsets, pipe.ep.kafka_bootstrap, pipe.events_topic) - records
    steady[f"events topic records per job at {rate:g}/s"] = records / len(sent)
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
    return out | steady


@dataclass
class Costs:
    """What :func:`sustained` measures beyond throughput: the CPU of ``meter``'s clocks over its window,
    then (``profile_s`` above 0) py-spy recordings of :data:`PROFILED` into ``folder``."""

    meter: CpuMeter | None = None
    profile_s: float = 0.0
    folder: Path | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)


def _server_pids(ep: Endpoints) -> dict[str, list[int]]:
    """The pids of Kafka's brokers (JVMs) and Consul on this machine, by the ports they listen on; empty
    when not found (servers in containers, or on another host)."""
    kafka = [listening_pid(int(a.rsplit(":", 1)[1]), "java") for a in ep.kafka_bootstrap.split(",")]
    consul = listening_pid(int(ep.consul_addr.rsplit(":", 1)[1]), "consul") if ep.consul_addr else None
    return {
        "kafka": [pid for pid in kafka if pid] if all(kafka) else [],
        "consul": [consul] if consul else [],
    }


def _meter(pipe: Pipeline, servers: dict[str, list[int]], sync_redis: redis.Redis) -> CpuMeter:
    """Clocks for :data:`SYSTEM` (the servers that were found), the generator and the whole machine."""
    clocks = {name: process_clock(*(c.pid for c in pipe.role(role))) for name, role in ROLES.items()}
    clocks |= {name: process_clock(*pids) for name, pids in servers.items() if pids}
    clocks["redis"] = lambda: redis_cpu_s(sync_redis, children=True)
    clocks["generator"] = time.process_time  # this process, every thread, not its children
    clocks["machine"] = machine_busy_s
    return CpuMeter(clocks)


def _profiled(pipe: Pipeline) -> dict[str, int]:
    return {name: pipe.role(role)[0].pid for name, role in PROFILED.items()}


def _cost_figures(per_job: dict[str, float]) -> dict[str, float]:
    if not per_job:  # no job finished in the window
        return {}
    system = [name for name in SYSTEM if name in per_job]
    out = {f"cpu {name}": per_job[name] for name in system}
    out["cpu system total"] = sum(per_job[name] for name in system)
    out["cpu generator"] = per_job["generator"]
    out["cpu machine total"] = per_job["machine"]
    return out


@dataclass(frozen=True)
class _Mark:
    """The counts, and the CPU clocks, at one end of the throughput window."""

    at: float
    finished: int
    accepted: int
    written: int
    cpu: CpuReading | None


async def _mark(client: aioredis.Redis, queue: str, accepted: int, meter: CpuMeter | None) -> _Mark:
    at = time.perf_counter()
    finished = await _finished(client, queue)
    written = (await Engine(client).reads.queue_stats(queue)).get("enqueued", 0)
    cpu = await asyncio.to_thread(meter.read) if meter is not None else None
    return _Mark(at, finished, accepted, written, cpu)


def _window_figures(a: _Mark, b: _Mark) -> dict[str, float]:
    span = b.at - a.at
    out = {
        "window: accepted by the gateway": (b.accepted - a.accepted) / span,
        "window: written to Redis by the relay": (b.written - a.written) / span,
    }
    if a.cpu is not None and b.cpu is not None:
        out |= _cost_figures(per_unit_us(CpuMeter.used(a.cpu, b.cpu), b.finished - a.finished))
    return out


async def sustained(
    pipe: Pipeline, seconds: float, clients: int = 4, per_request: int = 1000, costs: Costs | None = None
) -> dict[str, float]:
    """Closed-loop batch enqueue for ``seconds`` while relay and workers run; end-to-end jobs/s over the
    window after a warm-up third, and with ``costs`` the CPU µs per job of its meter's clocks over the
    same window, then its profiles while the load goes on."""
    costs = costs or Costs()
    client = aioredis.Redis.from_url(pipe.ep.redis_url or "")
    body = orjson.dumps({"jobs": [{"kind": "demo.noop"} for _ in range(per_request)]})
    accepted = 0
    marks: list[_Mark] = []
    stop = asyncio.Event()
    started = time.perf_counter()
    deadline = started + seconds

    async def post(http: aiohttp.ClientSession) -> None:
        nonlocal accepted
        while not stop.is_set():
            async with http.post(pipe.jobs_url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                if r.status == 202 and time.perf_counter() <= deadline:
                    accepted += per_request

    async def window() -> None:
        """Counts and CPU clocks after the warm-up third and at the end; then the profiles; then the load
        stops."""
        try:
            for at in (started + seconds / 3, deadline):
                await asyncio.sleep(at - time.perf_counter())
                marks.append(await _mark(client, pipe.queue, accepted, costs.meter))
            if costs.profile_s > 0 and costs.folder is not None:
                costs.profiles = await record_profiles(
                    _profiled(pipe), costs.profile_s, costs.folder, rate=PROFILE_RATE
                )
        finally:
            stop.set()

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as http, asyncio.TaskGroup() as tasks:
        tasks.create_task(window())
        for _ in range(clients):
            tasks.create_task(post(http))
    pipe.check()
    await client.aclose()
    a, b = marks
    return {
        "sustained end-to-end throughput": (b.finished - a.finished) / (b.at - a.at),
        "accepted by the gateway": accepted / seconds,
        **_window_figures(a, b),
    }


async def _round(
    ep: Endpoints, quick: bool, rep: int, servers: dict[str, list[int]], costs: Costs
) -> dict[str, float]:
    rate, lat_s, sus_s = (200.0, 1.0, 3.0) if quick else (1000.0, 10.0, 30.0)
    out: dict[str, float] = {}
    sync_redis = redis.Redis.from_url(ep.redis_url or "")

    async def throughput(pipe: Pipeline) -> None:
        costs.meter = _meter(pipe, servers, sync_redis)
        out.update(await sustained(pipe, sus_s, costs=costs))

    try:
        async with pipeline(ep, f"e2e{os.getpid()}l{rep}") as pipe:
            out.update(await latency(pipe, rate, lat_s, _meter(pipe, servers, sync_redis)))
            if quick:  # a smoke run: the sustained phase on the same pipeline (its start costs ~10 s)
                await throughput(pipe)
        if not quick:
            async with pipeline(ep, f"e2e{os.getpid()}s{rep}") as pipe:
                await throughput(pipe)
    finally:
        sync_redis.close()
    return out


def _unit(name: str) -> str:
    if name.startswith(("sustained", "accepted by", "window:")):
        return "jobs/s"
    if name.startswith(("cpu ", "steady cpu ")):
        return "µs/job"
    if name.startswith("events topic records"):
        return "records/job"
    return "%" if name.startswith("started before") else "ms"


def _writer(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text)

    return write


def _cost_notes(report: Report, servers: dict[str, list[int]]) -> None:
    report.notes.append(
        "cpu figures: CPU µs (user + system) per job finished over the throughput window (after the "
        "warm-up third of the sustained phase, no profiler running); pipeline processes and the servers "
        "from /proc/<pid>/stat with their process trees, Kafka and Consul found by their listening "
        "port, Redis from INFO cpu (AOF rewrite forks included); the system total is every process on "
        "the path; the generator is this process (HTTP clients and sampling); the machine total is "
        "/proc/stat's busy time of all cores (kernel network work and anything else running included)"
    )
    if missing := [name for name, pids in servers.items() if not pids]:
        report.notes.append(f"not a process on this machine, so not measured: {', '.join(missing)}")
    figures = {f.name: f.median for f in report.figures}
    steady = {k.removeprefix("steady cpu "): v for k, v in figures.items() if k.startswith("steady cpu ")}
    if steady:
        rate = next((float(k.rsplit(" ", 1)[1].removesuffix("/s")) for k in figures if " p50 at " in k), 0)
        report.sections.append(
            "\n".join(
                [
                    f"## The cost of one job (open loop, one job per request at {rate:,.0f} jobs/s, medians)",
                    "",
                    "CPU µs per job of each process on the path from the first request to the last job "
                    "finished (idle costs included): the cost model the speed work is judged by. Where the "
                    "machine cannot keep up with this rate (the latency figures show it), a backlog forms "
                    "and its cost is in the window too.",
                    "",
                    *cost_table(steady, "system total", rate=rate),
                ]
            )
        )
    per_job = {name.removeprefix("cpu "): v for name, v in figures.items() if name.startswith("cpu ")}
    if not per_job:
        return
    finished = figures["sustained end-to-end throughput"]
    accepted = figures["window: accepted by the gateway"]
    written = figures["window: written to Redis by the relay"]
    own = {  # per job of what the stage itself did in the window (the gateway and relay run ahead)
        "gateway": f"{per_job['gateway'] * finished / accepted:,.0f} per job accepted" if accepted else "",
        "relay": f"{per_job['relay'] * finished / written:,.0f} per job written" if written else "",
    }
    lines = [
        "## Where the CPU goes (sustained phase, throughput window, medians)",
        "",
        f"In the window the gateway accepted {accepted:,.0f} jobs/s, the relay wrote {written:,.0f} to Redis "
        f"and the workers finished {finished:,.0f}: the µs/job column divides by the jobs finished, so "
        "a stage that runs ahead of the rest (its surplus left as backlog in Kafka or Redis) is charged "
        "for that surplus too; the last column divides by the stage's own jobs.",
        "",
        *cost_table(per_job, "system total", rate=finished, extra=("CPU µs per job it handled", own)),
    ]
    report.sections.append("\n".join(lines))


def _profile_report(report: Report, profiles: dict[str, Profile], seconds: float) -> None:
    files = {name: f"profile-{name}.txt" for name, p in profiles.items() if not p.error}
    for name, file in files.items():
        report.artifacts[file] = _writer(profiles[name].raw)
    intro = (
        f"py-spy record --nonblocking, {seconds:g} s at {PROFILE_RATE} Hz, all four at once, right after "
        "the CPU window of the first repetition while the load goes on. Self % = share of the samples "
        "with the function on top of the stack; total % = anywhere on it. Python threads only (librdkafka's "
        "own threads are not sampled); a thread counts when not idle, i.e. running or runnable: on a "
        "saturated machine a thread waiting for a core is sampled too (the samples then exceed the CPU "
        "the process got, and `selectors.py:EpollSelector.select` shows as self time)."
    )
    report.sections.append(
        "\n".join(["## Profiles", "", intro, profile_section(list(profiles.values()), files=files)])
    )


def run(quick: bool = False, endpoints: Endpoints | None = None, profile: bool | None = None) -> Report:
    """The scenario; ``profile`` (default: not ``quick``) adds py-spy profiles of the sustained load."""
    reps = 1 if quick else 3
    profile = not quick if profile is None else profile
    profile_s = (5.0 if quick else 10.0) if profile else 0.0
    params = {"reps": reps, "quick": quick, "partitions": PARTITIONS, "workers": WORKERS}
    report = Report("e2e", {**params, "concurrency": CONCURRENCY, "profile": profile})
    samples: dict[str, list[float]] = {}
    profiles: dict[str, Profile] = {}
    folder = Path(tempfile.mkdtemp(prefix="jobq-bench-e2e-"))
    try:
        with bench_stack("e2e", endpoints) as ep:
            servers = _server_pids(ep)
            for rep in range(reps):
                costs = Costs(profile_s=profile_s if rep == 0 else 0.0, folder=folder)
                for name, value in asyncio.run(_round(ep, quick, rep, servers, costs)).items():
                    samples.setdefault(name, []).append(value)
                profiles |= costs.profiles
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for name, values in samples.items():
        report.add(name, _unit(name), values)
    report.notes += [
        "separate processes: 1 gateway, 1 relay, 2 workers x concurrency 50, 1 scheduler shipping the "
        "lifecycle events; Kafka acks=all + idempotence; Redis appendonly everysec; the load generator "
        "shares the 2 cores",
        "job times come from each job's record in Redis (ms resolution): gateway stamp, relay write, claim",
    ]
    _cost_notes(report, servers)
    if profiles:
        _profile_report(report, profiles, profile_s)
    return report
