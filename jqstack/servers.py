"""One class per kind of server: how to configure, start and probe it for readiness.

A server is described by a :class:`ServerSpec` (name, ports, data folder) and has a pid once started.
Readiness is a real request (Kafka metadata listing every broker, Consul's elected leader, Redis PING),
never an open port.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import redis

from jqstack.procs import run_step

__all__ = [
    "BROKER_MESSAGE_MAX_BYTES",
    "ConsulServer",
    "KafkaBroker",
    "RedisServer",
    "ServerSpec",
    "broker_zone",
    "kafka_ready",
]

BROKER_MESSAGE_MAX_BYTES = 2_097_152
"""The local brokers' ``message.max.bytes``: jobq's one Kafka size limit (2 MiB). ``jqstack`` imports no
other jobq package, so the figure is written here too; ``tests/unit/test_stack_limits.py`` holds it equal to
``jqcore.envelope.KAFKA_MAX_MESSAGE_BYTES``."""


@dataclass
class ServerSpec:
    """One process of the stack, as recorded in ``state.json``."""

    name: str
    kind: str  # "kafka" | "consul" | "redis"
    port: int
    data: str
    extra_ports: dict[str, int] = field(default_factory=dict)
    pid: int | None = None

    @property
    def data_dir(self) -> Path:
        return Path(self.data)

    @property
    def log(self) -> Path:
        return self.data_dir / "server.log"


def kafka_ready(bootstrap: str, expected_brokers: int, timeout_s: float = 2.0) -> bool:
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=1):
        pass  # cheap pre-check: librdkafka would log every refused connection
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    meta = admin.list_topics(timeout=timeout_s)
    return len(meta.brokers) >= expected_brokers


def broker_zone(node_id: int) -> str:
    """The zone (``broker.rack``) of broker ``node_id``: brokers 1 and 2 share ``az-a``, 3 is ``az-b``, so a
    three-broker stack can lose "two brokers of one zone" the way Slack drilled it."""
    return "az-a" if node_id <= 2 else "az-b"


class KafkaBroker:
    """Apache Kafka in KRaft mode (combined broker + controller)."""

    @staticmethod
    def properties(spec: ServerSpec, node_id: int, voters: str) -> str:
        port, cport = spec.port, spec.extra_ports["controller"]
        listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
        advertised = f"PLAINTEXT://127.0.0.1:{port}"
        protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        if "fault" in spec.extra_ports:  # reached only through a fault proxy on the advertised port
            listeners += f",FAULT://127.0.0.1:{spec.extra_ports['fault']}"
            advertised += f",FAULT://127.0.0.1:{spec.extra_ports['fault_proxy']}"
            protocols += ",FAULT:PLAINTEXT"
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node_id}",
                f"broker.rack={broker_zone(node_id)}",
                f"controller.quorum.voters={voters}",
                f"listeners={listeners}",
                f"advertised.listeners={advertised}",
                "controller.listener.names=CONTROLLER",
                f"listener.security.protocol.map={protocols}",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={spec.data_dir / 'log'}",
                f"num.partitions={3 if voters.count('@') == 1 else 6}",
                f"offsets.topic.replication.factor={min(3, voters.count('@'))}",
                f"transaction.state.log.replication.factor={min(3, voters.count('@'))}",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                "log.retention.hours=168",
                f"message.max.bytes={BROKER_MESSAGE_MAX_BYTES}",
                "",
            ]
        )

    @staticmethod
    def prepare(spec: ServerSpec, libs: Path, node_id: int, voters: str, cluster_id: str) -> Path:
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        props = spec.data_dir / "server.properties"
        props.write_text(KafkaBroker.properties(spec, node_id, voters))
        if not (spec.data_dir / "log" / "meta.properties").exists():
            run_step(
                f"formatting Kafka storage for {spec.name}",
                [
                    "java",
                    "-cp",
                    f"{libs}/*",
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster_id}",  # one token: a random id may start with "-"
                    "-c",
                    str(props),
                ],
                timeout_s=120,
            )
        return props

    @staticmethod
    def command(spec: ServerSpec, libs: Path) -> list[str]:
        log4j = spec.data_dir / "log4j2.properties"
        log4j.write_text(
            "rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
            "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
            "appender.stdout.layout.type=PatternLayout\n"
            "appender.stdout.layout.pattern=[%d] %p %m (%c)%n\n"
        )
        return [
            "java",
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={spec.data_dir}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(spec.data_dir / "server.properties"),
        ]


class ConsulServer:
    """A Consul agent in dev mode (in-memory server, no DNS, no gRPC), loopback only."""

    @staticmethod
    def command(spec: ServerSpec, binary: Path) -> list[str]:
        p = spec.extra_ports
        return [
            str(binary),
            "agent",
            "-dev",
            "-client",
            "127.0.0.1",
            "-bind",
            "127.0.0.1",
            "-http-port",
            str(spec.port),
            "-grpc-port",
            "-1",
            "-grpc-tls-port",
            "-1",
            "-dns-port",
            "-1",
            "-serf-lan-port",
            str(p["serf_lan"]),
            "-serf-wan-port",
            str(p["serf_wan"]),
            "-server-port",
            str(p["server"]),
            "-node",
            spec.name,
            "-log-level",
            "warn",
        ]

    @staticmethod
    def ready(spec: ServerSpec) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{spec.port}/v1/status/leader", timeout=2) as resp:
            return bool(json.loads(resp.read()))


class RedisServer:
    """redis-server with AOF on and ``noeviction`` (eviction would corrupt queue state silently)."""

    @staticmethod
    def command(spec: ServerSpec, binary: Path, *, cluster: bool = False, maxmemory: str = "0") -> list[str]:
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(binary),
            "--port",
            str(spec.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(spec.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--maxmemory-policy",
            "noeviction",
            "--maxmemory",
            maxmemory,
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ]
        if cluster:
            cmd += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(spec.data_dir / "nodes.conf"),
                "--cluster-node-timeout",
                "5000",
            ]
        return cmd

    @staticmethod
    def ready(spec: ServerSpec) -> bool:
        client = redis.Redis(host="127.0.0.1", port=spec.port, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
