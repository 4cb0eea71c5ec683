"""The local stack: Kafka (1 or 3 brokers), Consul, Redis (single and/or a 3-master cluster).

A stack has a name and a folder (``JOBQ_HOME/stacks/<name>``) holding ``state.json`` (ports, pids),
every server's data and log. ``up`` is idempotent: servers already running are left alone, dead ones are
restarted on their recorded ports with their data. The default stack (``jobq stack up``) uses fixed
loopback ports; the test stack picks free ports so it never collides with a running default stack.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import redis

from jqstack import provision
from jqstack.errors import StackError
from jqstack.paths import stack_dir
from jqstack.procs import free_port, log_tail, run_step
from jqstack.servers import ConsulServer, KafkaBroker, RedisServer, ServerSpec, kafka_ready
from jqstack.supervise import alive, spawn, terminate, wait_until

__all__ = ["DEFAULT_PORTS", "Endpoints", "Stack", "StackSpec"]

RedisMode = Literal["single", "cluster", "both"]

DEFAULT_PORTS = {"kafka": 29092, "consul": 28500, "redis": 26379, "redis_cluster": 27001}


@dataclass(frozen=True)
class StackSpec:
    name: str = "default"
    brokers: int = 1
    redis_mode: RedisMode = "single"
    fixed_ports: bool = True
    redis_replicas: int = 0
    """Replicas per Redis Cluster master (3 masters; 1 gives six nodes, and a killed master fails over)."""
    fault_listener: bool = False
    """Each broker gets a second listener that advertises a *proxy* port (``fault_proxy``): a client
    bootstrapped there reaches the broker only through a TCP fault proxy on that port (the fault suite's
    way to cut one process from Kafka; the normal listener stays direct)."""


@dataclass
class Endpoints:
    """How clients reach the stack; ``jobq stack env`` prints these as shell exports."""

    kafka_bootstrap: str
    consul_addr: str
    redis_url: str | None
    redis_cluster_nodes: list[str] = field(default_factory=list)
    kafka_fault_links: list[tuple[int, int]] = field(default_factory=list)
    """(proxy port, broker port) per broker with a fault listener: a fault proxy on the first port
    forwarding to the second is the only way in for clients bootstrapped at the proxy ports."""

    @property
    def kafka_fault_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{proxy}" for proxy, _ in self.kafka_fault_links)

    def exports(self) -> dict[str, str]:
        env = {"JOBQ_KAFKA_BOOTSTRAP": self.kafka_bootstrap, "CONSUL_HTTP_ADDR": self.consul_addr}
        if self.redis_url:
            env["JOBQ_REDIS_URL"] = self.redis_url
        elif self.redis_cluster_nodes:
            env["JOBQ_REDIS_URL"] = f"redis://{self.redis_cluster_nodes[0]}/0"
            env["JOBQ_REDIS_CLUSTER"] = "1"
        return env


def _same_spec(saved: Any, spec: StackSpec) -> bool:
    """Whether a ``state.json``'s spec is ``spec``; fields added to :class:`StackSpec` since it was saved
    take their defaults (a stack started by an older jobq is still the same stack)."""
    if not isinstance(saved, dict) or not saved.keys() <= asdict(spec).keys():
        return False
    return StackSpec(**saved) == spec


class Stack:
    """Provision, start, probe and stop one named local stack."""

    def __init__(self, spec: StackSpec, root: Path | None = None) -> None:
        self.spec = spec
        self.root = root or stack_dir(spec.name)
        self.servers: list[ServerSpec] = []
        self.meta: dict[str, Any] = {}
        self._load_or_plan()

    # ---- planning and state --------------------------------------------------------------------
    def _load_or_plan(self) -> None:
        state = self.root / "state.json"
        if state.exists():
            raw = json.loads(state.read_text())
            if _same_spec(raw.get("spec"), self.spec):
                self.servers = [ServerSpec(**s) for s in raw["servers"]]
                self.meta = raw.get("meta", {})
                return
            if any(alive(s.get("pid")) for s in raw["servers"]):
                raise StackError(
                    f"stack {self.spec.name!r} is running with another shape; `jobq stack down` first"
                )
            shutil.rmtree(self.root, ignore_errors=True)
        self.servers = self._plan()
        self.meta = {"kafka_cluster_id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")}
        self._save()

    def _port(self, kind: str, offset: int) -> int:
        if self.spec.fixed_ports:
            return DEFAULT_PORTS[kind] + offset
        if kind == "redis_cluster":  # the cluster bus listens on port + 10000
            return free_port(below=55535, pair_offset=10000)
        return free_port()

    def _plan(self) -> list[ServerSpec]:
        out: list[ServerSpec] = []
        for i in range(self.spec.brokers):
            extra = {"controller": self._port("kafka", 2 * i + 1)}
            if self.spec.fault_listener:
                extra |= {"fault": free_port(), "fault_proxy": free_port()}
            out.append(
                ServerSpec(
                    f"kafka-{i + 1}",
                    "kafka",
                    self._port("kafka", 2 * i),
                    str(self.root / f"kafka-{i + 1}"),
                    extra,
                )
            )
        out.append(
            ServerSpec(
                "consul",
                "consul",
                self._port("consul", 0),
                str(self.root / "consul"),
                {
                    "serf_lan": self._port("consul", 1),
                    "serf_wan": self._port("consul", 2),
                    "server": self._port("consul", 3),
                },
            )
        )
        if self.spec.redis_mode in ("single", "both"):
            out.append(ServerSpec("redis", "redis", self._port("redis", 0), str(self.root / "redis")))
        if self.spec.redis_mode in ("cluster", "both"):
            for i in range(3 * (1 + self.spec.redis_replicas)):
                out.append(
                    ServerSpec(
                        f"redis-cluster-{i + 1}",
                        "redis-cluster",
                        self._port("redis_cluster", i),
                        str(self.root / f"redis-cluster-{i + 1}"),
                    )
                )
        return out

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        doc = {"spec": asdict(self.spec), "servers": [asdict(s) for s in self.servers], "meta": self.meta}
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2))
        tmp.replace(self.root / "state.json")

    def of_kind(self, kind: str) -> list[ServerSpec]:
        return [s for s in self.servers if s.kind == kind]

    # ---- endpoints ------------------------------------------------------------------------------
    @property
    def endpoints(self) -> Endpoints:
        single = self.of_kind("redis")
        return Endpoints(
            kafka_bootstrap=",".join(f"127.0.0.1:{s.port}" for s in self.of_kind("kafka")),
            consul_addr=f"127.0.0.1:{self.of_kind('consul')[0].port}",
            redis_url=f"redis://127.0.0.1:{single[0].port}/0" if single else None,
            redis_cluster_nodes=[f"127.0.0.1:{s.port}" for s in self.of_kind("redis-cluster")],
            kafka_fault_links=[
                (s.extra_ports["fault_proxy"], s.extra_ports["fault"])
                for s in self.of_kind("kafka")
                if "fault" in s.extra_ports
            ],
        )

    # ---- lifecycle ------------------------------------------------------------------------------
    def provision(self) -> dict[str, Path]:
        """Fetch/build what the servers need (cached; a no-op the second time)."""
        return {
            "kafka": provision.ensure_kafka_jars(),
            "consul": provision.ensure_consul(),
            "redis": provision.ensure_redis(),
        }

    def up(self, timeout_s: float = 90.0) -> Endpoints:
        tools = self.provision()
        for server in self.servers:
            if not alive(server.pid):
                self.start_server(server, tools)
        self.wait_ready(timeout_s)
        if self.of_kind("redis-cluster"):
            self.form_redis_cluster(timeout_s)
        return self.endpoints

    def start_server(self, server: ServerSpec, tools: dict[str, Path]) -> None:
        """Spawn ``server`` (``tools``: what :meth:`provision` answered), not waiting; saves its pid."""
        server.pid = spawn(self._command(server, tools), log=server.log, cwd=server.data_dir)
        self._save()

    def _command(self, server: ServerSpec, tools: dict[str, Path]) -> list[str]:
        if server.kind == "kafka":
            return self._kafka_command(server, tools["kafka"])
        if server.kind == "consul":
            return ConsulServer.command(server, tools["consul"])
        return RedisServer.command(server, tools["redis"], cluster=server.kind == "redis-cluster")

    def _kafka_command(self, spec: ServerSpec, libs: Path) -> list[str]:
        brokers = self.of_kind("kafka")
        voters = ",".join(f"{i + 1}@127.0.0.1:{b.extra_ports['controller']}" for i, b in enumerate(brokers))
        KafkaBroker.prepare(spec, libs, brokers.index(spec) + 1, voters, self.meta["kafka_cluster_id"])
        return KafkaBroker.command(spec, libs)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        for server in self.servers:
            self.wait_server_ready(server, timeout_s)

    def wait_server_ready(self, server: ServerSpec, timeout_s: float = 90.0) -> None:
        """Until ``server`` answers; fails early when its process dies, with its log tail."""
        wait_until(
            functools.partial(self._ready, server),
            what=f"{server.name} on port {server.port}",
            timeout_s=timeout_s,
            pid=server.pid,
            log=server.log,
        )

    def _ready(self, server: ServerSpec) -> bool:
        if server.kind == "kafka":
            return kafka_ready(f"127.0.0.1:{server.port}", len(self.of_kind("kafka")))
        if server.kind == "consul":
            return ConsulServer.ready(server)
        return RedisServer.ready(server)

    def form_redis_cluster(self, timeout_s: float = 90.0) -> None:
        nodes = self.of_kind("redis-cluster")
        first = redis.Redis(host="127.0.0.1", port=nodes[0].port, decode_responses=True)

        def info() -> dict[str, Any]:
            return dict(first.cluster("INFO"))

        try:
            if info().get("cluster_state") != "ok":
                if int(info().get("cluster_known_nodes", 1)) < len(nodes):
                    run_step(
                        "creating the Redis Cluster",
                        [
                            "redis-cli",
                            "--cluster",
                            "create",
                            *[f"127.0.0.1:{n.port}" for n in nodes],
                            "--cluster-replicas",
                            str(self.spec.redis_replicas),
                            "--cluster-yes",
                        ],
                        timeout_s=60,
                    )
                wait_until(
                    lambda: info().get("cluster_state") == "ok",
                    what="Redis Cluster state ok",
                    timeout_s=timeout_s,
                )
        finally:
            first.close()

    def down(self, purge: bool = False) -> None:
        for server in reversed(self.servers):
            terminate(server.pid)
            server.pid = None
        if purge:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            self._save()

    def check(self) -> None:
        """Raise StackError naming every server that has died (with its log tail)."""
        dead = [s for s in self.servers if not alive(s.pid)]
        if dead:
            details = "\n".join(
                f"--- {s.name} (pid {s.pid}, port {s.port}) log tail:\n{log_tail(s.log, 10)}" for s in dead
            )
            raise StackError(
                f"stack {self.spec.name!r}: {', '.join(s.name for s in dead)} not running\n{details}"
            )

    def status(self) -> list[dict[str, Any]]:
        rows = []
        for s in self.servers:
            running = alive(s.pid)
            healthy = False
            if running:
                with contextlib.suppress(Exception):
                    healthy = self._ready(s)
            rows.append(
                {
                    "name": s.name,
                    "kind": s.kind,
                    "port": s.port,
                    "pid": s.pid if running else None,
                    "running": running,
                    "healthy": healthy,
                    "log": str(s.log),
                }
            )
        return rows

    def server(self, name: str) -> ServerSpec:
        """The server called ``name`` (``kafka-2``, ``redis``, ``consul``, ``redis-cluster-4``...)."""
        for s in self.servers:
            if s.name == name:
                return s
        raise StackError(f"stack {self.spec.name!r} has no server {name!r}")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL, timeout_s: float = 60.0) -> None:
        """Send ``sig`` to one server (SIGKILL: a crash; SIGTERM: a graceful stop) and wait until it is gone;
        ``up``/``restart`` starts it again on its port with its data."""
        server = self.server(name)
        pid = server.pid
        if pid is None or not alive(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        wait_until(lambda: not alive(pid), what=f"{name} (pid {pid}) to exit", timeout_s=timeout_s)

    def wipe(self, name: str) -> None:
        """Kill one server and delete its data directory: the server and everything it held are lost (its
        configuration is written again when it starts)."""
        self.kill(name)
        shutil.rmtree(self.server(name).data_dir, ignore_errors=True)

    def restart(self, name: str, timeout_s: float = 90.0) -> float:
        """Start one stopped server again; return seconds until it answered."""
        started = time.monotonic()
        self.up(timeout_s)
        return time.monotonic() - started

    @staticmethod
    def environ() -> dict[str, str]:
        return dict(os.environ)
