"""Planning a stack (no process started): a state saved by an older jobq is still the same stack, the
fault suite's shapes plan what they promise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jqstack.manager import Stack, StackSpec
from jqstack.servers import KafkaBroker, broker_zone


def test_a_state_saved_before_new_spec_fields_is_the_same_stack(tmp_path: Path) -> None:
    spec = StackSpec(name="old", fixed_ports=False)
    planned = Stack(spec, root=tmp_path)
    state = tmp_path / "state.json"
    doc = json.loads(state.read_text())
    for added in ("redis_replicas", "fault_listener"):  # fields a state written by an older jobq lacks
        doc["spec"].pop(added)
    state.write_text(json.dumps(doc))
    again = Stack(spec, root=tmp_path)
    assert [s.port for s in again.servers] == [s.port for s in planned.servers]
    assert again.meta == planned.meta


def test_a_state_of_another_shape_is_planned_anew(tmp_path: Path) -> None:
    Stack(StackSpec(name="s", fixed_ports=False), root=tmp_path)
    cluster = Stack(
        StackSpec(name="s", fixed_ports=False, redis_mode="cluster", redis_replicas=1), root=tmp_path
    )
    assert [s.name for s in cluster.servers if s.kind == "redis-cluster"] == [
        f"redis-cluster-{i}" for i in range(1, 7)
    ]


@pytest.mark.parametrize("brokers", [1, 3])
def test_fault_listeners_advertise_the_proxy_port(tmp_path: Path, brokers: int) -> None:
    stack = Stack(StackSpec(name="f", brokers=brokers, fixed_ports=False, fault_listener=True), root=tmp_path)
    links = stack.endpoints.kafka_fault_links
    assert len(links) == brokers
    assert stack.endpoints.kafka_fault_bootstrap == ",".join(f"127.0.0.1:{proxy}" for proxy, _ in links)
    for node_id, broker in enumerate(stack.of_kind("kafka"), start=1):
        props = KafkaBroker.properties(broker, node_id, "1@127.0.0.1:1")
        proxy, port = broker.extra_ports["fault_proxy"], broker.extra_ports["fault"]
        assert f"FAULT://127.0.0.1:{port}" in props
        assert f"advertised.listeners=PLAINTEXT://127.0.0.1:{broker.port},FAULT://127.0.0.1:{proxy}" in props
        assert f"broker.rack={broker_zone(node_id)}" in props
    assert [broker_zone(n) for n in (1, 2, 3)] == ["az-a", "az-a", "az-b"]


def test_a_crashed_broker_registers_again_within_seconds(tmp_path: Path) -> None:
    """The controller refuses a killed broker's new run until its old session expired (Kafka's 9 s default
    made every restart after a crash up to 9 s longer): the local brokers' session is 6 s, heartbeats 1 s."""
    stack = Stack(StackSpec(name="n", fixed_ports=False), root=tmp_path)
    props = KafkaBroker.properties(stack.of_kind("kafka")[0], 1, "1@127.0.0.1:1")
    assert "broker.session.timeout.ms=6000\n" in props
    assert "broker.heartbeat.interval.ms=1000\n" in props


def test_no_fault_listener_unless_asked(tmp_path: Path) -> None:
    stack = Stack(StackSpec(name="n", fixed_ports=False), root=tmp_path)
    assert stack.endpoints.kafka_fault_links == []
    assert "FAULT" not in KafkaBroker.properties(stack.of_kind("kafka")[0], 1, "1@127.0.0.1:1")
