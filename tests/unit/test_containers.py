"""The testcontainers definitions: built into DockerContainer objects, never started (no engine here)."""

from __future__ import annotations

from typing import Any

import pytest

from jqstack.paths import CONSUL_VERSION, KAFKA_VERSION
from jqstack.testing import containers

PORTS = {"kafka_port": 19092, "consul_port": 18500, "redis_port": 16379}


@pytest.fixture
def defs() -> dict[str, containers.ContainerDef]:
    return {d.name: d for d in containers.definitions(**PORTS)}


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """DockerContainer asks a Docker client for the engine when it is made; none exists here, so that one
    client is replaced. Nothing is started either way. The image prefix is pinned for stable names."""
    import testcontainers.core.container as tc
    from testcontainers.core.config import testcontainers_config

    monkeypatch.setattr(tc, "DockerClient", lambda **_: object())
    monkeypatch.setattr(testcontainers_config, "hub_image_name_prefix", "")


def test_images_are_the_official_ones_at_the_pinned_versions(
    defs: dict[str, containers.ContainerDef],
) -> None:
    assert set(defs) == {"kafka", "consul", "redis"}
    assert defs["kafka"].image == f"apache/kafka:{KAFKA_VERSION}"
    assert defs["consul"].image == f"hashicorp/consul:{CONSUL_VERSION}"
    assert defs["redis"].image == containers.REDIS_IMAGE
    assert defs["redis"].image.startswith("redis:")


def test_ports_map_the_standard_container_ports_to_the_chosen_host_ports(
    defs: dict[str, containers.ContainerDef],
) -> None:
    assert defs["kafka"].ports == {9092: 19092}
    assert defs["consul"].ports == {8500: 18500}
    assert defs["redis"].ports == {6379: 16379}


def test_kafka_runs_kraft_single_node_and_advertises_the_host_port(
    defs: dict[str, containers.ContainerDef],
) -> None:
    env = defs["kafka"].env
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:19092"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@localhost:9093"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    for name in ("OFFSETS_TOPIC", "TRANSACTION_STATE_LOG"):
        assert env[f"KAFKA_{name}_REPLICATION_FACTOR"] == "1"
    assert defs["kafka"].command == []


def test_consul_and_redis_commands(defs: dict[str, containers.ContainerDef]) -> None:
    assert defs["consul"].command == ["agent", "-dev", "-client", "0.0.0.0"]
    redis = defs["redis"].command
    assert redis[0] == "redis-server"
    assert redis[redis.index("--maxmemory-policy") + 1] == "noeviction", "eviction would corrupt state"
    assert redis[redis.index("--appendonly") + 1] == "yes"
    assert defs["consul"].env == defs["redis"].env == {}


@pytest.mark.usefixtures("no_engine")
def test_build_makes_an_unstarted_container_carrying_the_definition(
    defs: dict[str, containers.ContainerDef],
) -> None:
    from testcontainers.core.container import DockerContainer

    for defn in defs.values():
        built: Any = containers.build(defn)
        assert isinstance(built, DockerContainer)
        assert built.image == defn.image
        assert built.ports == {str(c): h for c, h in defn.ports.items()}
        assert built.env == defn.env
        assert built._command == (defn.command or None)
        assert built._container is None, "build must not start anything"


def test_docker_available_is_false_without_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert containers.docker_available() is False
