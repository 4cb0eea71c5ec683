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

from jqcore.settings import RedisSettings
from jqengine import Engine, connect
from jqengine.models import JobInfo
from jqstack.manager import Endpoints, Stack
from jqstack.testing.faultproxy import FaultProxy
from loadtest.faults.checker import Due, Record, Verdict, judge, read_executions, relay_terms
from loadtest.faults.invariants import REDIS_WRITES_LOST
from loadtest.faults.load import GRAPH_SHAPE, Load
from loadtest.faults.ordering import Claim
from loadtest.faults.pipeline import TOKEN, FaultPipeline, Roles

__all__ = ["Drill", "Scenario", "run_scenario"]

Servers = Literal["shared", "own", "kafka3", "cluster", "disk"]
"""What a scenario runs on: the caller's servers (it kills no server), a private single-node stack (it kills
or wipes a server), a private stack with three Kafka brokers, a private six-node Redis Cluster, or a
private single-node stack whose Redis and Kafka keep their data on small tmpfs mounts."""


@dataclass
class Drill:
    """What a fault function gets: the running path, its load, the stack (None on shared servers) and a
    place for notes that end up in the report."""

    pipe: FaultPipeline
    load: Load
    stack: Stack | None
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
            ran = {e.id for e in read_executions(self.pipe.executions)}
            ok = sum(1 for r in list(self.load.requests) if r.acked and r.sent >= since and r.id in ran)
            if ok >= n:
                return time.time() - since
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {ok}/{n} new jobs went through within {timeout_s:.0f}s")
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
    warm: int = 200
    """Jobs that must go through before anything is measured (the first also wait for the path's start)."""
    baseline: int = 100
    """Jobs after the warm-up whose answers and runs say what "normal" is (1 s of load at 100 jobs/s)."""
    after: int = 200
    """Jobs that must go through after the heal (the flow is steady again) before the load stops."""
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


async def _quiesce(drill: Drill, idle_s: float, cap_s: float) -> None:
    """Until every acked job ran and the queue holds nothing ready, delayed or running — or nothing new ran
    for ``idle_s`` (what is missing then is lost), or ``cap_s`` passed."""
    pipe = drill.pipe
    canceled = {c.id for c in drill.load.cancels if c.stops_the_job or not c.outcome}
    acked = {r.id for r in drill.load.requests if r.acked} - canceled
    started = last_change = time.monotonic()
    seen = -1
    async with drill.engine() as engine:
        while time.monotonic() - started < cap_s:
            ran = {e.id for e in read_executions(pipe.executions)}
            if len(ran) != seen:
                seen, last_change = len(ran), time.monotonic()
            depths = [await engine.reads.depth(q) for q in pipe.queues]
            if acked <= ran and sum(d.pending + d.delayed + d.running for d in depths) == 0:
                return
            if time.monotonic() - last_change > idle_s:
                return
            await asyncio.sleep(0.5)


async def run_scenario(
    scenario: Scenario,
    ep: Endpoints,
    folder: Path,
    *,
    stack: Stack | None = None,
    idle_s: float = 30.0,
    cap_s: float = 180.0,
) -> Verdict:
    """Run ``scenario`` on ``ep`` (``stack``: the servers it may kill); the verdict (also in ``folder``)."""
    tag = f"{scenario.name}-{uuid.uuid4().hex[:6]}"
    pipe = FaultPipeline(
        ep,
        tag,
        folder,
        acks=scenario.acks,
        roles=scenario.roles,
        replication=scenario.replication,
        topic_config=scenario.topic_config,
    )
    load = Load(
        pipe.gate_urls, pipe.queue, TOKEN, pipe.xqueue, tag, rate=scenario.rate, graphs=scenario.graphs
    )
    pipe.fair_rates = load.fair_rates
    drill = Drill(pipe, load, stack)
    try:
        if scenario.links:
            (folder / "logs").mkdir(parents=True, exist_ok=True)
            drill.proxy = FaultProxy(folder / "logs")
            drill.proxy_ports = _route_links(scenario, pipe, drill.proxy)
        await pipe.start()
        load.urls = pipe.gate_urls
        load.start()
        await drill.flowing(scenario.warm)  # the path is up (the first jobs also wait for its start-up)
        baseline_from = time.time()
        await drill.flowing(scenario.baseline)  # steady flow: what "normal" means for this run
        fault_at = time.time()
        await scenario.fault(drill)
        drill.notes["steady_after_heal_s"] = round(await drill.flowing(scenario.after, timeout_s=180), 2)
        await load.stop()
        await _quiesce(drill, idle_s, cap_s)
        for look in drill.afterwards:
            await asyncio.to_thread(look)
        records, dues, claims = await _records(drill)
    finally:
        await load.stop()
        drill.notes["exited"] = pipe.dead()
        await pipe.stop()
        if drill.proxy is not None:
            drill.proxy.close()
    (folder / "requests.jsonl").write_bytes(b"".join(orjson.dumps(asdict(r)) + b"\n" for r in load.requests))
    relay_logs = [log.read_text() for log in sorted((folder / "logs").glob("relay-*.log"))]
    drill.notes["fence_refusals"] = sum(text.count("fence refused; stepping down") for text in relay_logs)
    if rewrites := sum(text.count("batch not on the replicas yet") for text in relay_logs):
        drill.notes["replica_rewrites"] = (
            rewrites  # batches written again: WAIT found no replica holding them
        )
    verdict = judge(
        scenario.name,
        load.requests,
        read_executions(pipe.executions),
        fault_at=fault_at,
        baseline_from=baseline_from,
        terms=relay_terms(relay_logs),
        notes=drill.notes,
        dues=dues,
        cancels=load.cancels,
        records=records,
        graph=GRAPH_SHAPE if scenario.graphs else None,
        skipped=load.skipped,
        claims=claims,
        rates=load.fair_rates,
        controls=load.controls,
    )
    (folder / "verdict.json").write_bytes(orjson.dumps(verdict.as_dict(), option=orjson.OPT_INDENT_2))
    return verdict
