"""The whole path as separate processes, for one fault scenario: gateways, relays, schedulers and worker pools
serving one queue through one topic of its own, each process killable and restartable by name.

Names: ``gate-1``, ``gate-2``, ``relay-1``, ``relay-2``, ``sched-1``, ``sched-2``, ``worker-1``,
``worker-2`` (counts per :class:`Roles`). Everything a scenario owns carries its tag: queue and topic
``faults.<tag>``, its events, schedule and retry topics, the relays' Consul keys and consumer group, the
scheduler group — so scenarios never see each other's work, even on a shared stack.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import aiohttp

from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import TopicSpec, job_topics
from jqruntime.topicadmin import apply
from jqstack.manager import Endpoints
from jqstack.pipeline import PipelineEnv, Scope, service_argv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Child, http_ok, start, terminate
from loadtest.faults.handlers import FAULT_DIR_ENV

__all__ = ["TOKEN", "FaultPipeline", "Roles"]

TOKEN = "faults-token"
APP = "loadtest.faults.handlers:registry"


@dataclass(frozen=True)
class Roles:
    """How many of each process the path runs (two of each: any one can die and the path goes on)."""

    gateways: int = 2
    relays: int = 2
    schedulers: int = 2
    workers: int = 2
    concurrency: int = 20
    lease_ms: int = 3000
    """Short leases: a killed worker's jobs come back within seconds."""


@dataclass
class FaultPipeline:
    ep: Endpoints
    tag: str
    folder: Path
    acks: Literal["all", "leader"] = "all"
    roles: Roles = field(default_factory=Roles)
    replication: int = 1
    partitions: int = 3
    topic_config: dict[str, str] = field(default_factory=dict)
    env_extra: dict[str, str] = field(default_factory=dict)
    fair_rates: dict[str, float] = field(default_factory=dict)
    """Tenants' start rates on the load queue (jobs/s; the queue is fair on ``meta.tenant``)."""
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    """Settings for some processes only, keyed by a name (``relay-1``) or a role (``relay``): how a
    scenario sends one process's links through the fault proxy."""
    children: dict[str, Child] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    _starts: dict[str, int] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        return Scope("faults", self.tag).name

    @property
    def xqueue(self) -> str:
        """The exclusive queue beside it (``<queue>.excl``, exclusive on ``meta.excl``), same topic."""
        return f"{self.queue}.excl"

    @property
    def queues(self) -> list[str]:
        return [self.queue, self.xqueue]

    @property
    def topic(self) -> str:
        return Scope("faults", self.tag).name

    @property
    def executions(self) -> Path:
        return self.folder / "executions"

    def gate_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    @property
    def gate_urls(self) -> list[str]:
        return [self.gate_url(n) for n in sorted(self.ports)]

    def names(self, role: str) -> list[str]:
        return sorted(n for n in self.children if n.startswith(f"{role}-"))

    def topics(self) -> list[TopicSpec]:
        """The pipeline's topics as declared (``topic_config`` added to the job and events topics)."""
        extra = self.topic_config
        jobs = [replace(s, extra=extra) for s in job_topics([self.topic], self.partitions)]
        events = TopicSpec(f"{self.topic}.events", "events", self.partitions, extra)
        return [*jobs, events, TopicSpec(f"{self.topic}.schedule", "schedule", 1)]

    @property
    def spec(self) -> PipelineEnv:
        """Every process's settings (``spec.common()``: also a one-off ``jobq`` command's environment)."""
        settings = {
            "JOBQ_DEFAULT_ACKS": self.acks,
            "JOBQ_RELAY_SESSION_TTL_S": "10",
            "JOBQ_SCHEDULER_BEAT_S": "0.5",
            "JOBQ_SCHEDULER_STALE_S": "2",
            "JOBQ_WORKER_LEASE_MS": str(self.roles.lease_ms),
            "JOBQ_WORKER_GRACE_S": "5",
            FAULT_DIR_ENV: str(self.executions),
            "JOBQ_SCHEDULER_QUEUES": ",".join(self.queues),
            "JOBQ_KAFKA_REPLICATION": str(self.replication),  # also while a broker is down
            **self.env_extra,
        }
        scope = Scope("faults", self.tag)
        return PipelineEnv(self.ep.exports(), scope=scope, token=TOKEN, log_level="info", settings=settings)

    def _process(self, name: str) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of ``name``; a gateway keeps its port across restarts."""
        role, spec = name.split("-")[0], self.spec
        if role == "gate":
            port = self.ports.setdefault(name, free_port())
            return service_argv("gateway"), spec.gateway(port, az=name)
        if role == "relay":
            return service_argv("relay"), spec.relay(name)
        if role == "sched":
            return service_argv("scheduler"), spec.scheduler(name)
        argv = worker_argv(",".join(self.queues), app=APP, concurrency=self.roles.concurrency, processes=1)
        return argv, spec.worker()  # the handlers (loadtest.faults.handlers) are not installed

    def log(self, name: str) -> Path:
        """The log of the current run of ``name`` (``relay-1.log``; after restarts ``relay-1.2.log``...)."""
        n = self._starts[name]
        return self.folder / "logs" / (f"{name}.log" if n == 1 else f"{name}.{n}.log")

    def launch(self, name: str) -> Child:
        """Start (or start again) the process ``name``; a restart keeps its port and its identity."""
        argv, env = self._process(name)
        for key, values in self.overrides.items():
            if name == key or name.startswith(f"{key}-"):
                env.update(values)
        self._starts[name] = self._starts.get(name, 0) + 1
        child = start(name, argv, output=self.log(name), env=env)
        self.children[name] = child
        return child

    async def start(self) -> None:
        self.executions.mkdir(parents=True, exist_ok=True)
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)
        kafka = KafkaSettings(bootstrap=self.ep.kafka_bootstrap, replication=self.replication)
        await asyncio.to_thread(apply, kafka, self.topics())
        r = self.roles
        for role, count in (
            ("gate", r.gateways),
            ("relay", r.relays),
            ("sched", r.schedulers),
            ("worker", r.workers),
        ):
            for i in range(1, count + 1):
                self.launch(f"{role}-{i}")
        for name in self.names("gate"):
            await self.wait_gateway(name)
        await self.configure_queue()

    async def configure_queue(self) -> None:
        """``dedup: finished`` — what a queue fed by retrying clients chooses (``docs/engine.md``, Dedup): a
        client that sends a job again because its first answer failed must not run a finished job twice;
        the exclusive queue runs one job per ``meta.excl`` value at a time; the load queue is fair on
        ``meta.tenant``, with ``fair_rates``."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        fair = {"fair_key": "tenant", "fair_rates": self.fair_rates} if self.fair_rates else {}
        configs = {
            self.queue: {"dedup": "finished", **fair},
            self.xqueue: {"dedup": "finished", "mode": "exclusive", "excl_key": "excl"},
        }
        async with aiohttp.ClientSession(headers=headers) as http:
            for queue, config in configs.items():
                async with http.patch(f"{self.gate_urls[0]}/v1/queues/{queue}", json=config) as r:
                    if r.status != 200:
                        raise RuntimeError(f"configuring {queue} failed: {r.status} {await r.text()}")

    async def wait_gateway(self, name: str, timeout_s: float = 90.0) -> None:
        await self.children[name].wait_ready_async(
            http_ok(self.gate_url(name) + "/readyz"), timeout_s=timeout_s
        )

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> float:
        """Signal one process (SIGKILL: a crash) and wait until it is gone; the time it died."""
        child = self.children[name]
        child.signal(sig)
        child.wait(60)
        return time.time()

    async def restart(self, name: str) -> None:
        child = self.children[name]
        if child.running():
            await asyncio.to_thread(child.stop, 10)
        self.launch(name)
        if name.startswith("gate-"):
            await self.wait_gateway(name)

    async def logged(self, name: str, timeout_s: float) -> None:
        """Wait until the current run of ``name`` has written its first log line (it is up)."""
        log = (
            self.folder
            / "logs"
            / (f"{name}.log" if self._starts[name] == 1 else f"{name}.{self._starts[name]}.log")
        )
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(lambda: log.exists() and log.stat().st_size > 0):
            if not self.children[name].running():
                raise RuntimeError(f"{name} exited while starting (see {log})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} wrote nothing in {timeout_s:.0f}s (see {log})")
            await asyncio.sleep(0.2)

    async def up(self, timeout_s: float = 60.0) -> None:
        """Until every process's current run has logged its first line: the one a fault started again may
        still be importing when the next scenario on this path begins (a pool sent SIGTERM then exits 1)."""
        await asyncio.gather(*(self.logged(name, timeout_s) for name in self.children))

    def dead(self) -> list[str]:
        return [f"{n} (exit {c.returncode})" for n, c in self.children.items() if c.returncode is not None]

    async def stop(self) -> None:
        await asyncio.gather(
            *(asyncio.to_thread(terminate, c.pid, timeout_s=20) for c in self.children.values())
        )
