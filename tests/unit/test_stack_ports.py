"""Port planning (no server started): the default stack keeps its documented ports, every other named stack
gets a block of its own that survives re-planning and avoids ports other stacks hold or recorded."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from jqstack.errors import StackError
from jqstack.manager import Stack, StackSpec
from jqstack.ports import (
    BLOCK_FIRST,
    BLOCK_LAST,
    BLOCK_SIZE,
    CLUSTER_BUS_OFFSET,
    DEFAULT_PORTS,
    LOOSE_FIRST,
    LOOSE_LAST,
    block_port,
    choose_block,
    ephemeral_range,
    loose_port,
)
from jqstack.procs import free_port


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("JOBQ_HOME", str(tmp_path))
    return tmp_path


def ports(stack: Stack) -> set[int]:
    return {p for s in stack.servers for p in (s.port, *s.extra_ports.values())}


def test_the_default_stack_keeps_its_documented_ports(home: Path) -> None:
    stack = Stack(StackSpec())
    assert stack.of_kind("kafka")[0].port == DEFAULT_PORTS["kafka"]
    assert stack.of_kind("consul")[0].port == DEFAULT_PORTS["consul"]
    assert stack.of_kind("redis")[0].port == DEFAULT_PORTS["redis"]


def test_named_stacks_get_blocks_of_their_own_beside_the_default(home: Path) -> None:
    default = Stack(StackSpec())
    k3 = Stack(StackSpec(name="k3", brokers=3, redis_mode="both"))
    secure = Stack(StackSpec(name="secure", secure=True))
    assert not ports(default) & ports(k3)
    assert not ports(k3) & ports(secure)
    for stack in (k3, secure):
        assert all(BLOCK_FIRST <= p < BLOCK_LAST for p in ports(stack)), stack.spec.name
    assert len({s.port for s in k3.of_kind("kafka")}) == 3


def test_a_named_stack_keeps_its_block_when_planned_again(home: Path) -> None:
    first = Stack(StackSpec(name="k3", brokers=3))
    Stack(StackSpec(name="other"))
    again = Stack(StackSpec(name="k3", brokers=3))
    assert [s.port for s in again.servers] == [s.port for s in first.servers]


def test_a_stopped_stack_keeps_its_ports_from_a_new_one() -> None:
    base = home_block("twin")
    taken = {BLOCK_FIRST + base * BLOCK_SIZE}  # the block "twin" would choose is recorded by another stack
    assert choose_block("twin", [0, 1], taken, free=lambda p: True) == base + 1


def test_ports_bound_now_are_skipped() -> None:
    base = home_block("busy")
    first = BLOCK_FIRST + base * BLOCK_SIZE
    assert choose_block("busy", [0, 5], set(), free=lambda p: p != first + 5) == base + 1


def home_block(name: str) -> int:
    """The block ``name`` starts counting from (every port free, none recorded)."""
    return choose_block(name, [0], set(), free=lambda p: True)


def test_every_block_busy_is_an_error() -> None:
    with pytest.raises(OSError, match="no free block"):
        choose_block("x", [0], set(), free=lambda p: False)


def test_a_block_holds_what_a_stack_may_ask_for() -> None:
    assert block_port(0, "kafka", 11) < block_port(0, "consul", 0)
    with pytest.raises(ValueError, match="holds"):
        block_port(0, "consul", 4)


def test_a_named_stack_planned_on_the_default_ports_moves_to_a_block(home: Path) -> None:
    old = Stack(StackSpec(name="k1"))
    state = home / "stacks" / "k1" / "state.json"
    doc = json.loads(state.read_text())
    for server, default in zip(doc["servers"], Stack(StackSpec()).servers, strict=True):
        server["port"], server["extra_ports"] = default.port, default.extra_ports  # as an older jobq planned
    state.write_text(json.dumps(doc))
    moved = Stack(StackSpec(name="k1"))
    assert [s.port for s in moved.servers] == [s.port for s in old.servers]
    assert moved.meta == old.meta


def test_a_taken_port_is_named_with_its_holder_before_anything_starts(home: Path) -> None:
    stack = Stack(StackSpec(name="clash"))
    kafka = stack.of_kind("kafka")[0]
    kafka.port = free_port()  # not the block's port: a stack or process of this machine may hold that one
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", kafka.port))
        squatter.listen()
        with pytest.raises(StackError) as err:
            stack.start_server(kafka, {})  # the check comes first: no JVM is started
    assert kafka.pid is None
    message = str(err.value)
    assert (
        f"kafka-1 of stack 'clash' cannot start: port {kafka.port} is taken by pid {os.getpid()}" in message
    )
    # fmt: on
    assert "jobq stack down --name clash --purge" in message
    stack.check_ports(kafka)  # free again


def test_a_port_held_by_another_stack_names_that_stack_and_server(home: Path) -> None:
    default = Stack(StackSpec())
    squatted = default.of_kind("redis")[0]
    # the recorded port is one free now, not the documented 26379: a default stack the user left running
    # (`./run demo --once` leaves it up) holds that one; the holder is still found by its pid in state.json
    squatted.port = free_port()
    squatted.pid = os.getpid()  # as if this process were the default stack's Redis
    default._save()
    clash = Stack(StackSpec(name="clash"))
    redis = clash.of_kind("redis")[0]
    redis.port = squatted.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", squatted.port))
        squatter.listen()
        with pytest.raises(StackError, match=rf"port {squatted.port} is taken by redis of stack 'default'"):
            clash.check_ports(redis)


def test_a_secure_stack_runs_one_redis(home: Path) -> None:
    with pytest.raises(StackError, match="one Redis"):
        Stack(StackSpec(name="s", secure=True, redis_mode="cluster"))


def test_a_test_stack_takes_loose_ports_no_outgoing_connection_can_take(home: Path) -> None:
    """A stack with no fixed ports (a test session's, a fault scenario's) never draws from the ephemeral
    range: a client's source port there took a Kafka controller's port before the broker bound it."""
    spec = StackSpec(name="t", brokers=3, redis_mode="both", fixed_ports=False, fault_listener=True)
    stack = Stack(spec)
    taken = [p for s in stack.servers for p in (s.port, *s.extra_ports.values())]
    buses = [s.port + CLUSTER_BUS_OFFSET for s in stack.of_kind("redis-cluster")]
    ephemeral = ephemeral_range()
    assert len(set(taken + buses)) == len(taken) + len(buses)  # nothing promised twice
    assert all(LOOSE_FIRST <= p < LOOSE_LAST for p in taken)
    assert not [p for p in taken + buses if p in ephemeral]
    other = Stack(replace(spec, name="u"))  # the first stack is recorded, so the second avoids its ports
    assert not ports(other) & set(taken + buses)


def test_the_ephemeral_range_is_read_from_the_kernel_setting(tmp_path: Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t50000\n")
    assert ephemeral_range(setting) == range(40000, 50001)
    assert ephemeral_range(tmp_path / "missing") == range(32768, 61000)


def test_a_loose_port_skips_what_it_is_told_to_avoid() -> None:
    every = set(range(LOOSE_FIRST, LOOSE_LAST))
    keep = {LOOSE_FIRST + 7}
    assert loose_port(avoid=every - keep) in keep
    with pytest.raises(OSError, match="no free loopback port"):
        loose_port(avoid=every)
