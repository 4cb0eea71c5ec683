"""The fault proxy in front of the session's real Redis: traffic passes untouched, and each fault does to a
client exactly what it promises (a cut link refuses and closes, a slow one delays, a black hole hangs, a
reset resets), and restoring brings the link back on the same port.

The faults are checked with raw sockets speaking RESP, so what the client sees (EOF, refusal, reset,
timeout) is asserted as such rather than through a client library's retries; one test drives redis-py
through a cut to show a real client recovers by itself.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jqstack.errors import StackError
from jqstack.manager import Endpoints
from jqstack.testing.faultproxy import FaultProxy

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


@dataclass(frozen=True)
class Link:
    """One proxy of the test's own, in front of the session's Redis."""

    proxy: FaultProxy
    name: str
    port: int


@pytest.fixture(scope="module")
def fault_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    with FaultProxy(tmp_path_factory.mktemp("toxiproxy")) as proxy:
        yield proxy


@pytest.fixture
def link(fault_proxy: FaultProxy, endpoints: Endpoints, request: pytest.FixtureRequest) -> Iterator[Link]:
    assert endpoints.redis_url is not None
    redis_at = urlsplit(endpoints.redis_url)
    name = f"redis-{request.node.name}"
    port = fault_proxy.add(name, f"{redis_at.hostname}:{redis_at.port}")
    yield Link(fault_proxy, name, port)
    fault_proxy.remove(name)


def connect(port: int, timeout_s: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


def ping(conn: socket.socket) -> bytes:
    """One PING on ``conn``; the reply (PONG's 7 bytes arrive in one segment on loopback)."""
    conn.sendall(PING)
    return conn.recv(64)


def ping_new(port: int, timeout_s: float = 5.0) -> bytes:
    with connect(port, timeout_s) as conn:
        return ping(conn)


def closed_by_peer(conn: socket.socket) -> bool:
    """True when the other end closed ``conn`` (EOF or a reset); the read waits for that, bounded by the
    socket's timeout."""
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_traffic_flows_through_to_the_real_redis(link: Link, endpoints: Endpoints, prefix: str) -> None:
    assert ping_new(link.port) == PONG
    key = f"{prefix}:through-the-proxy"
    via_proxy = redis.Redis(host="127.0.0.1", port=link.port, socket_timeout=5)
    direct = redis.Redis.from_url(endpoints.redis_url or "", socket_timeout=5)
    try:
        via_proxy.set(key, "passed", ex=60)
        assert direct.get(key) == b"passed"
    finally:
        direct.delete(key)
        via_proxy.close()
        direct.close()


def test_cut_refuses_and_closes_connections_and_restore_brings_them_back(link: Link) -> None:
    with connect(link.port) as held:
        assert ping(held) == PONG
        link.proxy.cut(link.name)
        assert closed_by_peer(held)
    with pytest.raises(ConnectionRefusedError):
        ping_new(link.port)

    link.proxy.restore(link.name)
    assert ping_new(link.port) == PONG


def test_a_client_fails_during_a_cut_and_recovers_by_itself_after_restore(link: Link) -> None:
    client = redis.Redis(host="127.0.0.1", port=link.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        assert client.ping() is True
        link.proxy.cut(link.name)
        with pytest.raises(redis.ConnectionError):
            client.ping()
        link.proxy.restore(link.name)
        assert client.ping() is True
    finally:
        client.close()


def test_slow_delays_each_direction(link: Link) -> None:
    latency_s = 0.3
    with connect(link.port) as conn:
        link.proxy.slow(link.name, int(latency_s * 1000))
        began = time.monotonic()
        assert ping(conn) == PONG
        assert time.monotonic() - began >= 2 * latency_s  # the request and the reply, each delayed

        link.proxy.clear(link.name)
        assert ping(conn) == PONG


def test_blackhole_keeps_connections_open_and_passes_nothing(link: Link) -> None:
    link.proxy.blackhole(link.name)
    with connect(link.port, timeout_s=1.0) as held:
        with pytest.raises(TimeoutError):
            ping(held)

        link.proxy.restore(link.name)
        held.settimeout(5.0)
        assert closed_by_peer(held)  # toxiproxy closes what the black hole held
    assert ping_new(link.port) == PONG


def test_reset_resets_a_connection_at_its_first_bytes(link: Link) -> None:
    link.proxy.reset(link.name)
    with pytest.raises(ConnectionResetError):
        ping_new(link.port)

    link.proxy.clear(link.name)
    assert ping_new(link.port) == PONG


def test_faults_apply_twice_harmlessly_and_api_errors_name_the_proxy(link: Link) -> None:
    link.proxy.slow(link.name, 10)
    link.proxy.slow(link.name, 20)
    link.proxy.restore(link.name)
    with pytest.raises(StackError, match=rf"'{link.name}'.*proxy already exists"):
        link.proxy.add(link.name, "127.0.0.1:1")
    with pytest.raises(StackError, match=r"'no-such-proxy'.*proxy not found"):
        link.proxy.cut("no-such-proxy")


def test_close_stops_the_server(tmp_path: Path) -> None:
    proxy = FaultProxy(tmp_path)
    port = proxy.add("short-lived", "127.0.0.1:1")
    proxy.close()
    with pytest.raises(ConnectionRefusedError):
        ping_new(port)
    with pytest.raises(StackError, match="did not answer"):
        proxy.cut("short-lived")
