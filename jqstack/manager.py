"""The local stack: Kafka (1 or 3 brokers), Consul, Redis (single and/or a 3-master cluster).

A stack has a name and a folder (``JOBQ_HOME/stacks/<name>``) holding ``state.json`` (ports, pids),
every server's data and log. ``up`` is idempotent: servers already running are left alone, dead ones are
restarted on their recorded ports with their data. The default stack (``jobq stack up``) uses fixed
loopback ports, every other named stack a block of ports of its own (:mod:`jqstack.ports`), the test stack
free ports, so none collides with another. Before a server starts, each of its ports is checked: a port
already taken is named in the error with the process that holds it.

A **secure** stack (``StackSpec.secure``, :mod:`jqstack.secure`) runs SASL_SSL Kafka, TLS + ACL Redis and
HTTPS + ACL Consul with a CA, certificates and per-role secrets of its own.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import redis

from jqstack import provision
from jqstack.errors import StackError
from jqstack.paths import home, stack_dir
from jqstack.ports import (
    BLOCK_FIRST,
    CLUSTER_BUS_OFFSET,
    DEFAULT_PORTS,
    block_port,
    choose_block,
    first_taken,
    recorded_ports,
)
from jqstack.procs import free_port, log_tail, run_step
from jqstack.secure import SecureFiles, consul_acls, kafka_acls, role_exports
from jqstack.servers import ConsulServer, KafkaBroker, RedisServer, ServerSpec, kafka_ready
from jqstack.supervise import alive, spawn, stop_pids, terminate, wait_until

__all__ = ["DEFAULT_PORTS", "Endpoints", "Stack", "StackSpec"]

RedisMode = Literal["single", "cluster", "both"]

DEFAULT_STACK = "default"


@dataclass(frozen=True)
class StackSpec:
    name: str = DEFAULT_STACK
    brokers: int = 1
    redis_mode: RedisMode = "single"
    fixed_ports: bool = True
    """Ports that stay the stack's: the documented ones for ``default``, a block of its own for any other
    name (:mod:`jqstack.ports`); false: free ports picked when the stack is planned (test sessions)."""
    redis_replicas: int = 0
    """Replicas per Redis Cluster master (3 masters; 1 gives six nodes, and a killed master fails over)."""
    fault_listener: bool = False
    """Each broker gets a second listener that advertises a *proxy* port (``fault_proxy``): a client
    bootstrapped there reaches the broker only through a TCP fault proxy on that port (the fault suite's
    way to cut one process from Kafka; the normal listener stays direct)."""
    secure: bool = False
    """SASL_SSL Kafka, TLS + ACL Redis, HTTPS + ACL Consul (:mod:`jqstack.secure`); single Redis only."""


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
        if spec.secure and (spec.redis_mode != "single" or spec.fault_listener):
            raise StackError("a secure stack runs one Redis and no fault listener")
        self.spec = spec
        self.root = root or stack_dir(spec.name)
        self.servers: list[ServerSpec] = []
        self.meta: dict[str, Any] = {}
        self.secure = SecureFiles(self.root / "secrets") if spec.secure else None
        """The secure stack's CA, certificates and secrets (made by :meth:`up`); ``None`` when plain."""
        self._load_or_plan()

    # ---- planning and state --------------------------------------------------------------------
    def _load_or_plan(self) -> None:
        state = self.root / "state.json"
        if state.exists():
            raw = json.loads(state.read_text())
            if _same_spec(raw.get("spec"), self.spec):
                self.servers = [ServerSpec(**s) for s in raw["servers"]]
                self.meta = raw.get("meta", {})
                self._leave_default_ports()
                return
            if any(alive(s.get("pid")) for s in raw["servers"]):
                raise StackError(
                    f"stack {self.spec.name!r} is running with another shape; `jobq stack down` first"
                )
            shutil.rmtree(self.root, ignore_errors=True)
        self.servers = self._plan()
        self.meta = {"kafka_cluster_id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")}
        self._save()

    def _leave_default_ports(self) -> None:
        """A named stack planned by an older jobq sits on the default stack's ports: while it is stopped,
        give it a block of its own (same servers, same data)."""
        if self.spec.name == DEFAULT_STACK or not self.spec.fixed_ports:
            return
        if any(alive(s.pid) for s in self.servers):
            return
        default_ports = {s.port for s in self._plan(lambda kind, offset: DEFAULT_PORTS[kind] + offset)}
        if not default_ports & {s.port for s in self.servers}:
            return
        ports = {s.name: s for s in self._plan(self._block_allocator())}
        for server in self.servers:
            server.port, server.extra_ports = ports[server.name].port, ports[server.name].extra_ports
        self._save()

    def _allocator(self) -> Callable[[str, int], int]:
        if self.spec.fixed_ports and self.spec.name == DEFAULT_STACK:
            return lambda kind, offset: DEFAULT_PORTS[kind] + offset
        if self.spec.fixed_ports:
            return self._block_allocator()

        promised = recorded_ports(home() / "stacks", besides=self.spec.name)

        def free(kind: str, offset: int) -> int:
            pair = CLUSTER_BUS_OFFSET if kind == "redis_cluster" else None  # the bus listens on port + 10000
            port = free_port(pair_offset=pair, avoid=promised)
            promised.update({port} if pair is None else {port, port + pair})
            return port

        return free

    def _block_allocator(self) -> Callable[[str, int], int]:
        """Ports in the first free block for this stack's name that no other stack has recorded."""
        offsets: list[int] = []
        for s in self._plan(lambda kind, offset: block_port(0, kind, offset)):
            owned = [p for key, p in s.extra_ports.items() if not key.startswith("fault")]  # free ports
            offsets += [p - BLOCK_FIRST for p in (s.port, *owned)]
            if s.kind == "redis-cluster":
                offsets.append(s.port - BLOCK_FIRST + CLUSTER_BUS_OFFSET)
        taken = recorded_ports(home() / "stacks", besides=self.spec.name)
        block = choose_block(self.spec.name, offsets, taken)
        return lambda kind, offset: block_port(block, kind, offset)

    def _plan(self, port: Callable[[str, int], int] | None = None) -> list[ServerSpec]:
        """The servers of this spec; ``port(kind, offset)`` assigns each its ports (:meth:`_allocator`)."""
        port = port or self._allocator()
        out: list[ServerSpec] = []
        for i in range(self.spec.brokers):
            extra = {"controller": port("kafka", 2 * i + 1)}
            if self.spec.fault_listener:  # loose ports even in a block (the block has no room for them)
                loose = port if not self.spec.fixed_ports else lambda kind, offset: free_port()
                extra |= {"fault": loose("fault", 2 * i), "fault_proxy": loose("fault", 2 * i + 1)}
            out.append(
                ServerSpec(
                    f"kafka-{i + 1}",
                    "kafka",
                    port("kafka", 2 * i),
                    str(self.root / f"kafka-{i + 1}"),
                    extra,
                )
            )
        out.append(
            ServerSpec(
                "consul",
                "consul",
                port("consul", 0),
                str(self.root / "consul"),
                {
                    "serf_lan": port("consul", 1),
                    "serf_wan": port("consul", 2),
                    "server": port("consul", 3),
                },
            )
        )
        if self.spec.redis_mode in ("single", "both"):
            out.append(ServerSpec("redis", "redis", port("redis", 0), str(self.root / "redis")))
        if self.spec.redis_mode in ("cluster", "both"):
            for i in range(3 * (1 + self.spec.redis_replicas)):
                out.append(
                    ServerSpec(
                        f"redis-cluster-{i + 1}",
                        "redis-cluster",
                        port("redis_cluster", i),
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

    def client_env(self, role: str) -> dict[str, str]:
        """The settings (``JOBQ_*`` environment) a process of ``role`` reaches this stack's servers with: on
        a plain stack every role gets :meth:`Endpoints.exports`; on a secure one each role its own Kafka
        SCRAM user, Redis ACL user and Consul token over TLS (:func:`jqstack.secure.role_exports`, secrets
        as ``*_FILE`` paths). Roles: :data:`jqstack.secure.ROLES` (``admin`` for the CLI)."""
        if self.secure is None:
            return self.endpoints.exports()
        return role_exports(
            self.secure,
            role,
            kafka_bootstrap=self.endpoints.kafka_bootstrap,
            redis_port=self.of_kind("redis")[0].port,
            consul_port=self.of_kind("consul")[0].port,
        )

    # ---- lifecycle ------------------------------------------------------------------------------
    def provision(self) -> dict[str, Path]:
        """Fetch/build what the servers need (cached; a no-op the second time); ``kafka_cds``, when it could
        be made: Kafka's class-data-sharing archive (:func:`jqstack.provision.ensure_kafka_cds`)."""
        tools = {
            "kafka": provision.ensure_kafka_jars(),
            "consul": provision.ensure_consul(),
            "redis": provision.ensure_redis(),
        }
        if cds := provision.ensure_kafka_cds(tools["kafka"]):
            tools["kafka_cds"] = cds
        return tools

    def up(self, timeout_s: float = 90.0) -> Endpoints:
        tools = self.provision()
        if self.secure:
            self.secure.ensure()
        stopped = [server for server in self.servers if not alive(server.pid)]
        self._prepare_brokers([s for s in stopped if s.kind == "kafka"], tools)
        for server in stopped:
            self.start_server(server, tools)
        self.wait_ready(timeout_s)
        if self.of_kind("redis-cluster"):
            self.form_redis_cluster(timeout_s)
        if self.secure:
            kafka_acls(self.endpoints.kafka_bootstrap, self.secure)
            consul_acls(f"127.0.0.1:{self.of_kind('consul')[0].port}", self.secure)
        return self.endpoints

    def start_server(self, server: ServerSpec, tools: dict[str, Path]) -> None:
        """Spawn ``server`` (``tools``: what :meth:`provision` answered), not waiting; saves its pid.
        Raises StackError naming the port and its holder when one of the server's ports is taken."""
        self.check_ports(server)
        server.pid = spawn(self._command(server, tools), log=server.log, cwd=server.data_dir)
        self._save()

    def check_ports(self, server: ServerSpec) -> None:
        """Raise StackError when a port ``server`` listens on is taken, naming the port and its holder
        (a server of a jobq stack by name, else the process's pid and command line)."""
        ports = {"": server.port} | {k: p for k, p in server.extra_ports.items() if k != "fault_proxy"}
        if server.kind == "redis-cluster":
            ports["cluster bus"] = server.port + CLUSTER_BUS_OFFSET
        fixed_default = self.spec.name == DEFAULT_STACK and self.spec.fixed_ports
        if taken := first_taken(ports, home() / "stacks", self.spec.name, fixed_default=fixed_default):
            raise StackError(f"{server.name} of stack {self.spec.name!r} cannot start: {taken}")

    def _command(self, server: ServerSpec, tools: dict[str, Path]) -> list[str]:
        if server.kind == "kafka":
            return self._kafka_command(server, tools)
        if server.kind == "consul":
            return ConsulServer.command(server, tools["consul"], self.secure)
        cluster = server.kind == "redis-cluster"
        return RedisServer.command(server, tools["redis"], cluster=cluster, secure=self.secure)

    def _prepare_broker(self, spec: ServerSpec, tools: dict[str, Path]) -> None:
        """``server.properties`` and, the first time, the storage format (a JVM of its own)."""
        brokers = self.of_kind("kafka")
        voters = ",".join(f"{i + 1}@127.0.0.1:{b.extra_ports['controller']}" for i, b in enumerate(brokers))
        node_id, cluster_id = brokers.index(spec) + 1, self.meta["kafka_cluster_id"]
        cds = tools.get("kafka_cds")
        KafkaBroker.prepare(spec, tools["kafka"], node_id, voters, cluster_id, self.secure, cds)

    def _prepare_brokers(self, brokers: list[ServerSpec], tools: dict[str, Path]) -> None:
        """Prepare the brokers about to start side by side: a new three-broker stack formats its three
        storages at once (one JVM each, ~1 s of CPU apiece) instead of one after another."""
        if len(brokers) < 2:
            return  # one broker: prepared as it starts
        with ThreadPoolExecutor(len(brokers)) as pool:
            for done in [pool.submit(self._prepare_broker, b, tools) for b in brokers]:
                done.result()

    def _kafka_command(self, spec: ServerSpec, tools: dict[str, Path]) -> list[str]:
        self._prepare_broker(spec, tools)  # a no-op format when _prepare_brokers did it
        return KafkaBroker.command(spec, tools["kafka"], tools.get("kafka_cds"))

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
            security = self.secure.kafka_client() if self.secure else None
            return kafka_ready(f"127.0.0.1:{server.port}", len(self.of_kind("kafka")), security=security)
        if server.kind == "consul":
            return ConsulServer.ready(server, self.secure)
        return RedisServer.ready(server, self.secure)

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
            wait_until(  # a replica still in its first sync is no copy: the relay would not wait on it
                lambda: (
                    _replicas_online(nodes)
                    >= self.spec.redis_replicas * (len(nodes) // (1 + self.spec.redis_replicas))
                ),
                what="every Redis Cluster master's replicas in sync",
                timeout_s=timeout_s,
            )
        finally:
            first.close()

    def down(self, purge: bool = False, *, kill: bool = False) -> None:
        """Stop every server, each in turn with a grace period (Kafka flushes, Redis saves); ``purge`` also
        deletes the stack's folder. ``kill``, and always with ``purge`` (the data is deleted anyway), skips
        the grace: every server gets SIGKILL at once — a three-broker stack's last broker otherwise waits
        out its grace looking for a quorum that stopped before it."""
        if purge or kill:
            stop_pids([s.pid for s in self.servers], grace_s=0)
        else:
            for server in reversed(self.servers):
                terminate(server.pid)
        for server in self.servers:
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


def _replicas_online(nodes: list[ServerSpec]) -> int:
    """Replicas the cluster's masters list as ``online`` (synced and streaming), summed."""
    online = 0
    for node in nodes:
        client = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=5)
        try:
            info = client.info("replication")
        finally:
            client.close()
        if info.get("role") == "master":
            online += sum(
                1
                for k, v in info.items()
                if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
            )
    return online
