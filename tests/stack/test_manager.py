"""`jobq stack` behaviour: up is idempotent, warm provisioning does nothing, status and env are true."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from jqstack import provision, servers
from jqstack.manager import Stack, StackSpec
from jqstack.supervise import alive
from jqstack.testing.backends import NativeTestStack, SessionStack


def _native(stack: SessionStack) -> Stack:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    return stack.stack


def test_up_twice_is_harmless_and_status_is_healthy(
    stack: SessionStack, eventually_sync: Callable[..., Any]
) -> None:
    native = _native(stack)
    pids = {s.name: s.pid for s in native.servers}
    Stack(native.spec).up(timeout_s=180)
    rows = Stack(native.spec).status()
    assert {r["name"]: r["pid"] for r in rows} == pids
    # One health probe is one request with a short timeout of its own (Kafka's: 2 s of metadata), which a
    # loaded machine can miss once; a server that is really unhealthy stays so for the whole wait.
    rows = eventually_sync(
        lambda: Stack(native.spec).status(), lambda rs: all(r["healthy"] for r in rs), 60, "servers unhealthy"
    )
    assert {r["name"]: r["pid"] for r in rows} == pids
    kinds = {r["kind"] for r in rows}
    assert {"kafka", "consul", "redis", "redis-cluster"} <= kinds


def test_env_exports_every_endpoint(stack: SessionStack) -> None:
    exports = stack.endpoints.exports()
    assert exports["JOBQ_KAFKA_BOOTSTRAP"] == stack.endpoints.kafka_bootstrap
    assert exports["CONSUL_HTTP_ADDR"] == stack.endpoints.consul_addr
    assert exports["JOBQ_REDIS_URL"].startswith("redis://127.0.0.1:")


def test_warm_provisioning_runs_nothing(stack: SessionStack, monkeypatch: pytest.MonkeyPatch) -> None:
    _native(stack)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"warm provisioning ran a step: {args}")

    monkeypatch.setattr(provision, "run_step", refuse)
    monkeypatch.setattr(servers, "dump_kafka_cds", refuse)
    libs = provision.ensure_kafka_jars()
    assert libs.is_dir()
    cds = provision.ensure_kafka_cds(libs)  # made by the session stack's start
    assert cds is not None, "Kafka's class-data-sharing archive"
    assert cds.is_file()
    assert provision.ensure_consul().is_file()
    assert provision.ensure_redis().is_file()


def test_down_leaves_no_process_and_purge_no_folder(prefix: str) -> None:
    small = Stack(StackSpec(name=f"{prefix}-redis-only", redis_mode="single", fixed_ports=False, brokers=1))
    # only the cheap servers: start Redis and Consul by hand through the same code path
    small.servers = [s for s in small.servers if s.kind in ("redis", "consul")]
    small.up(timeout_s=180)
    pids = [s.pid for s in small.servers]
    assert all(alive(p) for p in pids)
    small.down(purge=True)
    assert not any(alive(p) for p in pids)
    assert not small.root.exists()


def test_the_brokers_log_through_log4j(stack: SessionStack) -> None:
    """Kafka's broker logs its warnings and fatal errors to its ``server.log``: an SLF4J binding that does
    not match slf4j-api's major version falls back to the NOP logger and the broker says nothing at all,
    not even why it exited while starting (a fault-suite failure this hid)."""
    for server in _native(stack).of_kind("kafka"):
        log = server.log.read_text(errors="replace")
        assert "NOP" not in log, f"{server.name}: Kafka logs nothing (SLF4J fell back to NOP):\n{log[:400]}"
