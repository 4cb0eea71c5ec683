"""The same servers from official images, for machines with a Docker engine (testcontainers).

Definitions are plain data (:class:`ContainerDef`) so they can be checked without an engine; ``build``
turns one into a testcontainers ``DockerContainer`` without starting it. Host ports are fixed up front so
Kafka can advertise the address clients will use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jqstack.paths import CONSUL_VERSION, KAFKA_VERSION
from jqstack.servers import BROKER_MESSAGE_MAX_BYTES

__all__ = ["ContainerDef", "build", "definitions", "docker_available"]

REDIS_IMAGE = "redis:7.0"


@dataclass(frozen=True)
class ContainerDef:
    name: str
    image: str
    ports: dict[int, int]  # container port -> host port
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)


def definitions(kafka_port: int, consul_port: int, redis_port: int) -> list[ContainerDef]:
    kafka_env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{kafka_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_MESSAGE_MAX_BYTES": str(BROKER_MESSAGE_MAX_BYTES),
    }
    return [
        ContainerDef("kafka", f"apache/kafka:{KAFKA_VERSION}", {9092: kafka_port}, kafka_env),
        ContainerDef(
            "consul",
            f"hashicorp/consul:{CONSUL_VERSION}",
            {8500: consul_port},
            command=["agent", "-dev", "-client", "0.0.0.0"],
        ),
        ContainerDef(
            "redis",
            REDIS_IMAGE,
            {6379: redis_port},
            command=["redis-server", "--appendonly", "yes", "--maxmemory-policy", "noeviction"],
        ),
    ]


def build(defn: ContainerDef) -> Any:
    """A testcontainers DockerContainer for ``defn`` (not started)."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(defn.image)
    for cport, hport in defn.ports.items():
        container = container.with_bind_ports(cport, hport)
    for key, value in defn.env.items():
        container = container.with_env(key, value)
    if defn.command:
        container = container.with_command(defn.command)
    return container


def docker_available() -> bool:
    """True when a Docker engine answers (the client alone is not enough)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://") and not Path(host.removeprefix("unix://")).exists():
        return False
    try:
        import docker

        client = docker.from_env(timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except Exception:
        return False
    return True
