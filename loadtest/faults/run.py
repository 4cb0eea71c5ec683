"""Run one fault scenario: the path up, load on, the fault in, the fault out, quiesce, judge.

1. :class:`FaultPipeline` starts (gateways, relays, schedulers, workers) on the given servers.
2. :class:`Load` sends jobs at a steady rate; once ``warm`` of them have run, the scenario's fault function
   injects its fault and heals it (holding it under load for the duration it states).
3. The load goes on until ``after`` more jobs were acknowledged after the heal (the flow is steady again),
   then stops; the path runs until nothing of the queue is left ready, delayed or running and every acked
   job ran, or nothing new ran for ``idle_s``.
4. :func:`loadtest.faults.checker.judge` compares the client's log with the handlers' log and Redis's
   records, invariant by invariant, and checks the evidence that the fault took effect
   (:mod:`loadtest.faults.bites`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from jqcore.settings.servers import RedisSettings
from jqengine import Engine, connect
from jqengine.models import JobInfo
from jqstack.manager import Endpoints, Stack
from jqstack.testing.faultproxy import FaultProxy
from loadtest.faults.checker import (
    Due,
    Record,
    Verdict,
    fan_ins_half_done,
    judge,
    node_runs,
    read_executions,
    relay_terms,
)
from loadtest.faults.invariants import REDIS_WRITES_LOST
from loadtest.faults.load import GRAPH_SHAPE, SLOW_PARENT, SLOW_PARENT_S, Load
from loadtest.faults.ordering import Claim
from loadtest.faults.pipeline import TOKEN, FaultPipeline, Roles

__all__ = ["Drill", "PipelineKey", "Pipelines", "Scenario", "run_scenario"]

STRIKE_WITHIN_S = 0.5
"""A fault strikes a half-done graph's fan-in within this of the drill's look (:meth:`Drill.fan_in_open`)."""

Servers = Literal["shared", "own", "kafka3", "cluster", "disk"]
"""What a scenario runs on: the caller's servers (it kills no server), a private single-node stack (it kills
or wipes a server), a private stack with three Kafka brokers, a private six-node Redis Cluster, or a
private single-node stack whose Redis and Kafka keep their data on small tmpfs mounts."""


@dataclass
class RanIds:
    """The ids of the jobs the handlers recorded a run of under ``folder`` (``exec-*.jsonl``), read as the
    files grow: a path that served earlier scenarios has their runs too, and the polls that wait for flow
    would parse all of them four times a second."""

    folder: Path
    prefix: str = ""
    """Only ids starting with it (the scenario's own jobs)."""
    _ids: set[str] = field(default_factory=set)
    _read: dict[Path, int] = field(default_factory=dict)

    def __call__(self) -> set[str]:
        for path in sorted(self.folder.glob("exec-*.jsonl")):
            at = self._read.get(path, 0)
            with path.open("rb") as f:
                f.seek(at)
                chunk = f.read()
            whole = chunk.rfind(b"\n") + 1  # a torn last line is read once it is whole
            for line in chunk[:whole].splitlines():
                with contextlib.suppress(orjson.JSONDecodeError):
                    doc = orjson.loads(line)
                    if "id" in doc and str(doc["id"]).startswith(self.prefix):
                        self._ids.add(str(doc["id"]))
            self._read[path] = at + whole
        return self._ids


@dataclass
class Drill:
    """What a fault function gets: the running path, its load, the stack (None on shared servers) and a
    place for notes that end up in the report."""

    pipe: FaultPipeline
    load: Load
    stack: Stack | None
    run: str = ""
    """This scenario's own prefix: every job id it sends starts with ``<run>-`` (the path it runs on may have
    served earlier scenarios: :class:`Pipelines`)."""
    proxy: FaultProxy | None = None
    """The fault proxy the scenario's ``links`` go through (proxies named ``<process>-<service>``; Kafka's
    are ``kafka-<n>``, one per broker, shared by every process sent through them)."""
    notes: dict[str, Any] = field(default_factory=lambda: {"bite": []})
    started: float = field(default_factory=time.time)
    """When the scenario began (before its first job was sent)."""
    proxy_ports: dict[str, int] = field(default_factory=dict)
    """The fault proxy's listening port per link name."""
    afterwards: list[Callable[[], None]] = field(default_factory=list)
    """Evidence read once the path is quiet (what processes logged of a fault can come seconds later)."""
    _ran: RanIds | None = field(default=None, init=False, repr=False)

    def ran(self) -> set[str]:
        """The ids of this scenario's jobs that ran so far."""
        if self._ran is None:
            self._ran = RanIds(self.pipe.executions, f"{self.run}-" if self.run else "")
        return self._ran()

    def evidence(self, what: str, ok: bool, **facts: Any) -> bool:
        """Record whether the fault did ``what`` (with the facts that say so): the scenario fails when a
        piece was not seen, or none was recorded (:func:`loadtest.faults.bites.fault_took_effect`)."""
        self.notes["bite"].append({"what": what, "ok": bool(ok), **facts})
        return ok

    def redis_writes_lost(self) -> None:
        """Note that Redis lost its latest writes now (killed: the last second of its AOF; wiped: all that
        its events had not shipped; a master killed: what it had not replicated): an acknowledged cancel
        among them is lost with Redis (:data:`loadtest.faults.invariants.CANCEL_AT_RISK_S`)."""
        self.notes.setdefault(REDIS_WRITES_LOST, []).append(time.time())

    async def hold(self, seconds: float) -> None:
        """Keep the fault in place for ``seconds`` of load (the scenario's stated duration; the pipeline's
        processes are checked meanwhile)."""
        await asyncio.sleep(seconds)

    async def flowing(self, n: int = 100, timeout_s: float = 120.0) -> float:
        """Wait until ``n`` jobs sent from now on were acked and ran (the path works end to end); the
        seconds it took."""
        since = time.time()
        deadline = time.monotonic() + timeout_s
        while True:
            ran = self.ran()
            ok = sum(1 for r in list(self.load.requests) if r.acked and r.sent >= since and r.id in ran)
            if ok >= n:
                return time.time() - since
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {ok}/{n} new jobs went through within {timeout_s:.0f}s")
            await asyncio.sleep(0.25)

    async def fan_in_open(self, timeout_s: float = 60.0) -> None:
        """Wait until one of the load's graphs is half done (a parent ended, its fan-in not started) and
        stays so a while: its slow parent started less than ``SLOW_PARENT_S - STRIKE_WITHIN_S`` ago. The
        fault must meet one (the checker's evidence); on a loaded machine the moment the baseline ends may
        fall between graphs, and a graph seen half done in a stale read may have closed by the strike
        (a CI run's kill met none: the machine stalled between the read and the kill)."""
        deadline = time.monotonic() + timeout_s
        prefix = f"{self.run}-" if self.run else ""
        while True:
            runs = [e for e in read_executions(self.pipe.executions) if e.id.startswith(prefix)]
            held_by = (SLOW_PARENT, time.time() - (SLOW_PARENT_S - STRIKE_WITHIN_S))
            if fan_ins_half_done(node_runs(runs), GRAPH_SHAPE, self.load.skipped, held_by):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no graph of the load was half done within {timeout_s:.0f}s")
            await asyncio.sleep(0.25)

    def links(self, process: str, service: Service) -> list[str]:
        """The proxy names that carry ``process``'s traffic to ``service``."""
        if service == "kafka":
            return [f"kafka-{i + 1}" for i in range(len(self.pipe.ep.kafka_fault_links))]
        return [f"{process}-{service}"]

    def faults(self) -> FaultProxy:
        if self.proxy is None:
            raise RuntimeError("this scenario sends no link through the fault proxy (Scenario.links)")
        return self.proxy

    @contextlib.asynccontextmanager
    async def engine(self) -> AsyncIterator[Engine]:
        """The engine over the scenario's Redis (a client of its own, closed after)."""
        env = self.pipe.ep.exports()
        settings = RedisSettings.model_validate(
            {"url": env["JOBQ_REDIS_URL"], "cluster": "JOBQ_REDIS_CLUSTER" in env}
        )
        client = connect(settings)
        try:
            yield Engine(client)
        finally:
            await client.aclose()

    def server(self) -> Stack:
        if self.stack is None:
            raise RuntimeError("this scenario needs a stack of its own")
        return self.stack


Fault = Callable[[Drill], Awaitable[None]]
Service = Literal["redis", "consul", "kafka"]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    fault: Fault
    servers: Servers = "shared"
    acks: Literal["all", "leader"] = "all"
    loss_allowed: bool = False
    """True only where the scenario documents an accepted-loss mode (``acks=leader``, Redis ``everysec``)."""
    roles: Roles = field(default_factory=Roles)
    replication: int = 1
    topic_config: dict[str, str] = field(default_factory=dict)
    rate: float = 100.0
    warm: int = 100
    """Jobs that must go through before anything is measured (the first also wait for the path's start:
    it works end to end). 200 until 2026-12: the checks count jobs, and every invariant has enough to
    judge with half (the suite's verdicts judge the same checks, none ``n/a``)."""
    baseline: int = 100
    """Jobs after the warm-up whose answers and runs say what "normal" is (1 s of load at 100 jobs/s)."""
    after: int = 100
    """Jobs that must go through after the heal (the flow is steady again) before the load stops (200
    until 2026-12, as ``warm``)."""
    graceful: bool = False
    """The fault only stops processes gracefully (no lease expires, nothing dies holding a job): any job
    that ran twice is an illegal duplicate."""
    consul_state_lost: bool = False
    """The fault wipes Consul's state (sessions and lock-delays): a deposed holder may still trust its term
    while another takes the lock, and the Redis fence alone keeps one writer (its refusals are counted)."""
    graphs: bool = True
    """Every twenty-fifth request is a task graph (a fan-out of four and a join: :class:`Load`), judged
    node by node (``graph-*``), and the fault must meet fan-ins half done (off: a scenario whose load
    cannot carry graphs)."""
    links: tuple[tuple[str, Service], ...] = ()
    """(process or role, service) pairs whose connections go through the fault proxy (``("relay",
    "consul")``: both relays reach Consul only through it); needs a stack with Kafka fault listeners
    for ``kafka``."""


def _route_links(scenario: Scenario, pipe: FaultPipeline, proxy: FaultProxy) -> dict[str, int]:
    """Open a proxy per link and point the linked processes' settings at it; each link's port."""
    ep = pipe.ep
    ports: dict[str, int] = {}
    opened: set[str] = set()
    for process, service in scenario.links:
        values = pipe.overrides.setdefault(process, {})
        if service == "kafka":
            if not ep.kafka_fault_links:
                raise RuntimeError(f"{scenario.name}: the stack has no Kafka fault listener")
            for i, (proxy_port, broker_port) in enumerate(ep.kafka_fault_links):
                if (name := f"kafka-{i + 1}") not in opened:  # one per broker, shared by the linked processes
                    ports[name] = proxy.add(name, f"127.0.0.1:{broker_port}", listen_port=proxy_port)
                    opened.add(name)
            values["JOBQ_KAFKA_BOOTSTRAP"] = ep.kafka_fault_bootstrap
        elif service == "redis":
            host_port = (ep.redis_url or "").removeprefix("redis://").split("/")[0]
            port = ports[f"{process}-redis"] = proxy.add(f"{process}-redis", host_port)
            values["JOBQ_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        else:
            port = ports[f"{process}-consul"] = proxy.add(f"{process}-consul", ep.consul_addr)
            values["JOBQ_CONSUL_ADDR"] = values["CONSUL_HTTP_ADDR"] = f"127.0.0.1:{port}"
    return ports


STRAIGHT_PATH = 3
"""A record's version after pending → running → completed: claimed once, never given back or re-run."""


async def _records(drill: Drill) -> tuple[dict[str, Record | None], dict[str, Due], list[Claim]]:
    """Every acked job as Redis holds it once the path is quiet (state, attempt: what the history says);
    each delayed job's ``run_at`` and the time its last attempt was claimed, both as Redis stored them
    (ms): what "never early" is judged against (a job Redis no longer holds is judged by its request's
    send time instead); and the claims "priority-order" judges: the load queue's jobs that went straight
    from stored to claimed to completed (ready from ``enqueued_at`` to ``started_at``, both Redis's clock);
    a delayed job's readiness (its promotion) and a re-claimed job's (a release, a lease run out) are not
    recorded, but their last claim is (what ``rate-within`` counts, and a claim a better job may have
    waited behind)."""
    by_queue: dict[str, list[str]] = {}
    for r in drill.load.requests:
        if r.acked:
            by_queue.setdefault(r.queue or drill.pipe.queue, []).append(r.id)
    ids, jobs = [], []
    async with drill.engine() as engine:
        for queue, mine in by_queue.items():
            ids += mine
            jobs += await engine.reads.get_jobs(queue, mine)
    delayed = {r.id for r in drill.load.requests if r.delay_s}
    records = {
        i: (Record(j.state, j.attempt, j.origin or "") if j else None) for i, j in zip(ids, jobs, strict=True)
    }
    dues = {
        i: Due(j.run_at, j.started_at)
        for i, j in zip(ids, jobs, strict=True)
        if i in delayed and j is not None and j.run_at is not None and j.started_at is not None
    }
    sent = {r.id: r for r in drill.load.requests}
    plain = drill.pipe.queue  # the exclusive queue's order is its keys': no readiness judged there
    claims = [
        Claim(
            i,
            j.priority,
            _ready_at(j) if i not in delayed and j.queue == plain else None,
            j.started_at / 1000,
            sent[i].tenant,
            j.queue,
            sent[i].switched,
            sent[i].answered,
        )
        for i, j in zip(ids, jobs, strict=True)
        if j is not None and j.priority is not None and j.started_at is not None
    ]
    return records, dues, claims


def _ready_at(job: JobInfo) -> float | None:
    """When a job stored, claimed once and completed became ready to claim (its ``enqueued_at``, s); None
    for any other path (its readiness is not recorded)."""
    if (job.state, job.attempt, job.version) != ("completed", 1, STRAIGHT_PATH) or job.enqueued_at is None:
        return None
    return job.enqueued_at / 1000


async def _quiesce(drill: Drill, idle_s: float, cap_s: float) -> bool:
    """Until every acked job ran and the queue holds nothing ready, delayed or running — or nothing new ran
    for ``idle_s`` (what is missing then is lost), or ``cap_s`` passed. True: it ended quiet (every acked
    job ran, the queues are empty)."""
    pipe = drill.pipe
    canceled = {c.id for c in drill.load.cancels if c.stops_the_job or not c.outcome}
    acked = {r.id for r in drill.load.requests if r.acked} - canceled
    started = last_change = time.monotonic()
    seen = -1
    async with drill.engine() as engine:
        while time.monotonic() - started < cap_s:
            ran = drill.ran()
            if len(ran) != seen:
                seen, last_change = len(ran), time.monotonic()
            depths = [await engine.reads.depth(q) for q in pipe.queues]
            if acked <= ran and sum(d.pending + d.delayed + d.running for d in depths) == 0:
                return True
            if time.monotonic() - last_change > idle_s:
                return False
            await asyncio.sleep(0.5)
    return False


@dataclass(frozen=True)
class PipelineKey:
    """What a running path is made of: scenarios with the same key can run on the same processes."""

    servers: Servers
    stack: str
    acks: str
    roles: Roles
    replication: int
    topic_config: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, Service], ...]
    rate: float
    """The load's rate: the queue's fair rates are set up for it."""

    @classmethod
    def of(cls, scenario: Scenario, ep: Endpoints) -> PipelineKey:
        return cls(
            scenario.servers,
            ep.kafka_bootstrap,
            scenario.acks,
            scenario.roles,
            scenario.replication,
            tuple(sorted(scenario.topic_config.items())),
            scenario.links,
            scenario.rate,
        )


@dataclass
class _Path:
    """A running path and its fault proxy (when its processes' links go through one)."""

    key: PipelineKey
    pipe: FaultPipeline
    proxy: FaultProxy | None
    ports: dict[str, int]
    base: dict[str, dict[str, str]]
    """The processes' overrides as the links set them (a scenario's own are undone before reuse)."""

    async def stop(self) -> None:
        try:
            await self.pipe.stop()
        finally:
            if self.proxy is not None:
                self.proxy.close()


class Pipelines:
    """Paths kept running across scenarios (the fault suite's biggest fixed cost was each scenario starting
    and stopping its own eight service processes: ~6 s and ~8 CPU-s apiece).

    A scenario gets the path the previous one left running when both need the same processes
    (:class:`PipelineKey`: the same servers, acks, roles, replication, topic settings and links) and that
    one ended clean: no exception, no process dead, every acked job ran and the queues emptied. The faults
    restart what they kill and heal what they cut, so the next scenario meets the path as a fresh one
    would, warm; its jobs carry its own prefix and it is judged on them only (its requests, their runs and
    records, the relays' terms that overlap it). One path runs at a time: a scenario with another key stops
    the previous path first."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._current: _Path | None = None
        self.started = 0
        """Paths started (for the report: how many starts the reuse saved)."""

    async def leave(self, key: PipelineKey | None = None) -> None:
        """Stop the running path unless it has ``key``."""
        if self._current is not None and self._current.key != key:
            current, self._current = self._current, None
            await current.stop()

    async def leave_servers(self, servers: Servers) -> None:
        """Stop the running path unless it runs on ``servers``' kind of stack (before another stack of
        the fault suite is started and this one's stopped: its processes would only log errors)."""
        if self._current is not None and self._current.key.servers != servers:
            await self.leave()

    async def take(self, scenario: Scenario, ep: Endpoints) -> tuple[_Path, bool]:
        """A path for ``scenario`` (the running one when it fits, else a new one, started); whether it is
        new. The caller gives it back with :meth:`give_back`."""
        key = PipelineKey.of(scenario, ep)
        await self.leave(key)
        if self._current is not None:
            path, self._current = self._current, None
            path.pipe.overrides = {k: dict(v) for k, v in path.base.items()}
            await path.pipe.configure_queue()
            return path, False
        tag = f"{scenario.name}-{uuid.uuid4().hex[:6]}"
        path = await _start_path(scenario, ep, self.folder / tag, tag)
        self.started += 1
        return path, True

    async def give_back(self, path: _Path, clean: bool) -> None:
        """Keep ``path`` running for the next scenario if it ended ``clean`` and every process runs; else
        stop it."""
        if clean and not path.pipe.dead() and path.pipe.overrides == path.base:
            self._current = path
        else:
            await path.stop()

    async def close(self) -> None:
        await self.leave()


async def _start_path(scenario: Scenario, ep: Endpoints, folder: Path, tag: str) -> _Path:
    pipe = FaultPipeline(
        ep,
        tag,
        folder,
        acks=scenario.acks,
        roles=scenario.roles,
        replication=scenario.replication,
        topic_config=scenario.topic_config,
    )
    pipe.fair_rates = Load.rates(scenario.rate)
    proxy: FaultProxy | None = None
    ports: dict[str, int] = {}
    try:
        if scenario.links:
            (folder / "logs").mkdir(parents=True, exist_ok=True)
            proxy = FaultProxy(folder / "logs")
            ports = _route_links(scenario, pipe, proxy)
        base = {k: dict(v) for k, v in pipe.overrides.items()}
        await pipe.start()
    except BaseException:
        await pipe.stop()
        if proxy is not None:
            proxy.close()
        raise
    return _Path(PipelineKey.of(scenario, ep), pipe, proxy, ports, base)


def _relay_logs(pipe: FaultPipeline) -> dict[Path, int]:
    """Each relay log of ``pipe`` with its size now (where this scenario's lines begin)."""
    return {log: log.stat().st_size for log in sorted((pipe.folder / "logs").glob("relay-*.log"))}


async def run_scenario(
    scenario: Scenario,
    ep: Endpoints,
    folder: Path,
    *,
    stack: Stack | None = None,
    idle_s: float = 30.0,
    cap_s: float = 180.0,
    pipelines: Pipelines | None = None,
) -> Verdict:
    """Run ``scenario`` on ``ep`` (``stack``: the servers it may kill); the verdict (also in ``folder``).
    ``pipelines``: the running paths it may use (else it starts and stops a path of its own)."""
    if pipelines is not None:
        path, new = await pipelines.take(scenario, ep)
    else:
        path, new = await _start_path(scenario, ep, folder, f"{scenario.name}-{uuid.uuid4().hex[:6]}"), True
    run = f"{scenario.name}-{uuid.uuid4().hex[:6]}"  # the prefix of this scenario's own job ids
    pipe = path.pipe
    load = Load(
        pipe.gate_urls, pipe.queue, TOKEN, pipe.xqueue, run, rate=scenario.rate, graphs=scenario.graphs
    )
    drill = Drill(pipe, load, stack, run=run, proxy=path.proxy, proxy_ports=dict(path.ports))
    clean = False
    try:
        logs_at = _relay_logs(pipe)
        fault_at, baseline_from, quiet = await _drive(scenario, drill, idle_s, cap_s)
        records = await _records(drill)
        clean = quiet
    finally:
        await load.stop()
        drill.notes["exited"] = pipe.dead()
        if pipelines is not None:
            await pipelines.give_back(path, clean)
        else:
            await path.stop()
    return _judge(scenario, drill, folder, logs_at, records, fault_at, baseline_from, reused=not new)


async def _drive(scenario: Scenario, drill: Drill, idle_s: float, cap_s: float) -> tuple[float, float, bool]:
    """Load on, the fault in and out, load off, quiet: (the fault's time, the baseline's start, whether it
    ended quiet)."""
    await drill.pipe.up()
    drill.load.start()
    # the path is up (on a new path the first jobs also wait for its start-up), then steady flow: what
    # "normal" means for this run
    await drill.flowing(scenario.warm)
    baseline_from = time.time()
    await drill.flowing(scenario.baseline)
    if scenario.graphs:
        await drill.fan_in_open()
    fault_at = time.time()
    await scenario.fault(drill)
    drill.notes["steady_after_heal_s"] = round(await drill.flowing(scenario.after, timeout_s=180), 2)
    await drill.load.stop()
    quiet = await _quiesce(drill, idle_s, cap_s)
    for look in drill.afterwards:
        await asyncio.to_thread(look)
    return fault_at, baseline_from, quiet


def _judge(
    scenario: Scenario,
    drill: Drill,
    folder: Path,
    logs_at: dict[Path, int],
    records: tuple[dict[str, Record | None], dict[str, Due], list[Claim]],
    fault_at: float,
    baseline_from: float,
    *,
    reused: bool,
) -> Verdict:
    """The checker's verdict on one scenario's own history (its jobs, their runs, the relays' terms that
    overlap it); saved in ``folder`` with its requests."""
    load, pipe = drill.load, drill.pipe
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requests.jsonl").write_bytes(b"".join(orjson.dumps(asdict(r)) + b"\n" for r in load.requests))
    if reused or pipe.folder != folder:
        drill.notes["path"] = {"logs": str(pipe.folder / "logs"), "reused": reused}
    texts, mine = [], []
    for log in sorted((pipe.folder / "logs").glob("relay-*.log")):
        text = log.read_bytes()
        texts.append(text.decode(errors="replace"))
        mine.append(text[logs_at.get(log, 0) :].decode(errors="replace"))
    drill.notes["fence_refusals"] = sum(text.count("fence refused; stepping down") for text in mine)
    if rewrites := sum(text.count("batch not on the replicas yet") for text in mine):
        drill.notes["replica_rewrites"] = (
            rewrites  # batches written again: WAIT found no replica holding them
        )
    ended = time.time()
    terms = [t for t in relay_terms(texts) if t.end >= drill.started and t.start <= ended]
    mine_only = f"{drill.run}-"
    verdict = judge(
        scenario.name,
        load.requests,
        [e for e in read_executions(pipe.executions) if e.id.startswith(mine_only)],
        fault_at=fault_at,
        baseline_from=baseline_from,
        terms=terms,
        notes=drill.notes,
        dues=records[1],
        cancels=load.cancels,
        records=records[0],
        graph=GRAPH_SHAPE if scenario.graphs else None,
        skipped=load.skipped,
        claims=records[2],
        rates=load.fair_rates,
        controls=load.controls,
    )
    (folder / "verdict.json").write_bytes(orjson.dumps(verdict.as_dict(), option=orjson.OPT_INDENT_2))
    return verdict
