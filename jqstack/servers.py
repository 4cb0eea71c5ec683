"""One class per kind of server: how to configure, start and probe it for readiness.

A server is described by a :class:`ServerSpec` (name, ports, data folder) and has a pid once started.
Readiness is a real request (Kafka metadata listing every broker, Consul's elected leader, Redis PING),
never an open port.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from jqstack.procs import run_step
from jqstack.secure import BROKER_USER, SERVER_CN, SecureFiles

__all__ = [
    "BROKER_MESSAGE_MAX_BYTES",
    "ConsulServer",
    "KafkaBroker",
    "RedisServer",
    "ServerSpec",
    "broker_zone",
    "dump_kafka_cds",
    "jvm_cds",
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


BROKER_SESSION_MS = 6000
"""The local brokers' ``broker.session.timeout.ms`` (Kafka's default is 9 s): how long the controller keeps
a silent broker's registration — a crashed broker's new run can register only once it expired. Not
lower: on a loaded 2-core machine a 3 s session expired under a busy controller (a live broker fenced)."""
BROKER_HEARTBEAT_MS = 1000
"""``broker.heartbeat.interval.ms`` (default 2 s): six heartbeats per session (Kafka's defaults: 4.5)."""


def kafka_ready(
    bootstrap: str, expected_brokers: int, timeout_s: float = 2.0, security: dict[str, str] | None = None
) -> bool:
    """Whether a metadata request to ``bootstrap`` lists ``expected_brokers`` (``security``: librdkafka's
    SASL/TLS settings for a secure stack)."""
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=1):
        pass  # cheap pre-check: librdkafka would log every refused connection
    conf: dict[str, str | int] = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0}
    admin = AdminClient({**conf, **(security or {})})
    meta = admin.list_topics(timeout=timeout_s)
    return len(meta.brokers) >= expected_brokers


def jvm_cds(archive: Path | None) -> list[str]:
    """The JVM options that map Kafka's class-data-sharing archive
    (:func:`jqstack.provision.ensure_kafka_cds`): the classes a broker loads at start come parsed and
    verified from it (a broker is ready ~0.5 s sooner and spends ~40 % less CPU getting there).
    ``-Xshare:auto``: an archive this JVM cannot use (another JDK build, other jars) is skipped, never
    fatal. None: no archive."""
    if archive is None:
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def broker_zone(node_id: int) -> str:
    """The zone (``broker.rack``) of broker ``node_id``: brokers 1 and 2 share ``az-a``, 3 is ``az-b``, so a
    three-broker stack can lose "two brokers of one zone" the way Slack drilled it."""
    return "az-a" if node_id <= 2 else "az-b"


class KafkaBroker:
    """Apache Kafka in KRaft mode (combined broker + controller)."""

    @staticmethod
    def properties(spec: ServerSpec, node_id: int, voters: str, secure: SecureFiles | None = None) -> str:
        """``server.properties``; with ``secure``, clients and brokers meet on one SASL_SSL listener
        (SCRAM-SHA-512) and the KRaft controller listener takes TLS with client certificates only."""
        port, cport = spec.port, spec.extra_ports["controller"]
        client = "SASL_SSL" if secure else "PLAINTEXT"
        listeners = f"{client}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
        advertised = f"{client}://127.0.0.1:{port}"
        protocols = f"{client}:{client},CONTROLLER:{'SSL' if secure else 'PLAINTEXT'}"
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
                f"inter.broker.listener.name={client}",
                f"log.dirs={spec.data_dir / 'log'}",
                f"num.partitions={3 if voters.count('@') == 1 else 6}",
                f"offsets.topic.replication.factor={min(3, voters.count('@'))}",
                f"transaction.state.log.replication.factor={min(3, voters.count('@'))}",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # a broker killed (-9) and started again is refused by the controller (a duplicate
                # registration) until the session of its previous run expired: 9 s by default, so a restart
                # right after a crash took up to 9 s longer than the broker's start
                f"broker.session.timeout.ms={BROKER_SESSION_MS}",
                f"broker.heartbeat.interval.ms={BROKER_HEARTBEAT_MS}",
                "auto.create.topics.enable=false",
                "log.retention.hours=168",
                f"message.max.bytes={BROKER_MESSAGE_MAX_BYTES}",
                *(KafkaBroker._secure_properties(secure) if secure else []),
                "",
            ]
        )

    @staticmethod
    def _secure_properties(files: SecureFiles) -> list[str]:
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_USER}" password="{files.secret("kafka", BROKER_USER)}";'
        )
        return [
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}",
            "listener.name.controller.ssl.client.auth=required",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={files.kafka_keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={files.ca_cert}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            f"super.users=User:{BROKER_USER};User:admin;User:CN={SERVER_CN}",
        ]

    @staticmethod
    def prepare(
        spec: ServerSpec,
        libs: Path,
        node_id: int,
        voters: str,
        cluster_id: str,
        secure: SecureFiles | None = None,
        cds: Path | None = None,
    ) -> Path:
        """Write ``server.properties`` (0600: a secure broker's holds its SCRAM password) and format the
        storage once (a secure stack's SCRAM users are created then: ``--add-scram``); ``cds``: the class
        archive the format's JVM maps too (:func:`jvm_cds`)."""
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        props = spec.data_dir / "server.properties"
        props.touch(mode=0o600)
        props.chmod(0o600)
        props.write_text(KafkaBroker.properties(spec, node_id, voters, secure))
        if not (spec.data_dir / "log" / "meta.properties").exists():
            users = secure.scram_users() if secure else []
            scram = [f"SCRAM-SHA-512=[name={u},password={p}]" for u, p in users]
            run_step(
                f"formatting Kafka storage for {spec.name}",
                [
                    "java",
                    *jvm_cds(cds),
                    "-cp",
                    f"{libs}/*",
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster_id}",  # one token: a random id may start with "-"
                    "-c",
                    str(props),
                    *[arg for s in scram for arg in ("--add-scram", s)],
                ],
                timeout_s=120,
                secrets=[p for _, p in users],
            )
        return props

    @staticmethod
    def command(
        spec: ServerSpec, libs: Path, cds: Path | None = None, *, jvm: Sequence[str] = ()
    ) -> list[str]:
        """The broker's command line; ``cds``: the class archive to map (:func:`jvm_cds`), ``jvm``: more JVM
        options (the archive's own dump run)."""
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
            *jvm_cds(cds),
            *jvm,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={spec.data_dir}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(spec.data_dir / "server.properties"),
        ]


def dump_kafka_cds(libs: Path, archive: Path, timeout_s: float = 120.0) -> bool:
    """Write Kafka's class-data-sharing archive to ``archive``: a throwaway single-node broker (free ports, a
    temporary folder beside ``archive``) runs until its metadata answers and is stopped with SIGTERM; its JVM
    dumps every class it loaded as it exits (``-XX:ArchiveClassesAtExit``). False when any of it failed
    (nothing is written then)."""
    from jqstack.errors import StackError
    from jqstack.procs import free_port
    from jqstack.supervise import spawn, stop_pids, wait_until

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cds-", dir=archive.parent) as tmp:
        folder = str(Path(tmp) / "kafka")
        spec = ServerSpec("kafka-cds", "kafka", free_port(), folder, {"controller": free_port()})
        voters = f"1@127.0.0.1:{spec.extra_ports['controller']}"
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        dumped = Path(tmp) / "classes.jsa"
        try:
            KafkaBroker.prepare(spec, libs, 1, voters, cluster_id)
            cmd = KafkaBroker.command(spec, libs, jvm=[f"-XX:ArchiveClassesAtExit={dumped}"])
            pid = spawn(cmd, log=spec.log, cwd=spec.data_dir)
            try:
                wait_until(
                    lambda: kafka_ready(f"127.0.0.1:{spec.port}", 1),
                    what="the archive's broker",
                    timeout_s=timeout_s,
                    pid=pid,
                    log=spec.log,
                )
            finally:
                stop_pids([pid], grace_s=60)  # SIGTERM: a normal exit, which writes the archive
        except StackError:
            return False
        if not dumped.is_file() or dumped.stat().st_size == 0:
            return False
        os.replace(dumped, archive)
    return True


class ConsulServer:
    """A Consul agent in dev mode (in-memory server, no DNS, no gRPC), loopback only."""

    @staticmethod
    def _agent(binary: Path) -> list[str]:
        """A development agent (state in memory) answering on loopback only."""
        return [str(binary), "agent", "-dev", "-client", "127.0.0.1", "-bind", "127.0.0.1"]

    @staticmethod
    def command(spec: ServerSpec, binary: Path, secure: SecureFiles | None = None) -> list[str]:
        if secure:
            return ConsulServer._secure_command(spec, binary, secure)
        p = spec.extra_ports
        return [
            *ConsulServer._agent(binary),
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
    def _secure_command(spec: ServerSpec, binary: Path, files: SecureFiles) -> list[str]:
        """HTTPS only (no HTTP port), ACLs on with ``default_policy = "deny"``, bootstrapped with the
        stack's management token (also the agent's own token). The configuration file is 0600."""
        p = spec.extra_ports
        management = files.secret("consul", "management")
        config = {
            "node_name": spec.name,
            "log_level": "warn",
            "ports": {
                "http": -1,
                "https": spec.port,
                "grpc": -1,
                "grpc_tls": -1,
                "dns": -1,
                "serf_lan": p["serf_lan"],
                "serf_wan": p["serf_wan"],
                "server": p["server"],
            },
            "tls": {
                "defaults": {
                    "ca_file": str(files.ca_cert),
                    "cert_file": str(files.server_cert),
                    "key_file": str(files.server_key),
                    "verify_incoming": False,
                    "verify_outgoing": True,
                }
            },
            "acl": {
                "enabled": True,
                "default_policy": "deny",
                "enable_token_persistence": False,
                "tokens": {"initial_management": management, "agent": management},
            },
        }
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        path = spec.data_dir / "consul.json"
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(json.dumps(config, indent=2))
        return [*ConsulServer._agent(binary), "-config-file", str(path)]

    @staticmethod
    def ready(spec: ServerSpec, secure: SecureFiles | None = None) -> bool:
        scheme, ctx = ("https", secure.ssl_context()) if secure else ("http", None)
        url = f"{scheme}://127.0.0.1:{spec.port}/v1/status/leader"
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(json.loads(resp.read()))


class RedisServer:
    """redis-server with AOF on and ``noeviction`` (eviction would corrupt queue state silently)."""

    @staticmethod
    def command(
        spec: ServerSpec,
        binary: Path,
        *,
        cluster: bool = False,
        maxmemory: str = "0",
        secure: SecureFiles | None = None,
    ) -> list[str]:
        """``secure``: TLS only (``port 0``, ``tls-port``) and the ACL users of
        :meth:`SecureFiles.redis_acl` (an ACL file of hashes, 0600)."""
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        listen = ["--port", str(spec.port)]
        if secure:
            acl = spec.data_dir / "users.acl"
            acl.touch(mode=0o600)
            acl.chmod(0o600)
            acl.write_text(secure.redis_acl())
            listen = ["--port", "0", "--tls-port", str(spec.port), "--tls-auth-clients", "no"]
            listen += ["--tls-cert-file", str(secure.server_cert), "--tls-key-file", str(secure.server_key)]
            listen += ["--tls-ca-cert-file", str(secure.ca_cert), "--aclfile", str(acl)]
        cmd = [
            str(binary),
            *listen,
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
    def ready(spec: ServerSpec, secure: SecureFiles | None = None) -> bool:
        tls = secure.redis_client() if secure else {}
        client = redis.Redis(
            host="127.0.0.1", port=spec.port, socket_timeout=1, socket_connect_timeout=1, **tls
        )
        try:
            return bool(client.ping())
        finally:
            client.close()
