"""The health logic (``jqruntime/health.py``): the pure judgements, and a :class:`HealthServer` on loopback
answering for a service on this test's event loop — ready, not ready, starting, stopping, a check that
hangs or raises, and a wedged loop that fails ``/healthz`` while the server's own thread still answers; a
server started once the service says so (a worker pool: its first claim round ended)."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from jqruntime.health import HealthServer, Problem, Readiness, liveness, readiness_answer
from jqruntime.http import HttpError
from jqruntime.lifecycle import Service, run_until_signal


def get(port: int, path: str) -> tuple[int, dict[str, Any] | str]:
    """(status, JSON body or text) of ``GET path`` (urllib, from the calling thread)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    if path == "/metrics":
        return status, raw.decode()
    return status, orjson.loads(raw)


def test_liveness_judges_the_age_of_the_heartbeat() -> None:
    assert liveness(None, 100.0, 10.0) is None, "not watched yet: starting, alive"
    assert liveness(95.0, 100.0, 10.0) is None
    stalled = liveness(80.0, 100.0, 10.0)
    assert stalled is not None
    assert (stalled.code, "20.0 s" in stalled.message) == ("loop_stalled", True)


def test_readiness_answer_is_200_without_problems_and_a_503_naming_each_otherwise() -> None:
    assert readiness_answer("relay", Readiness(facts={"topics": {"t": "waiting"}})) == {
        "status": "ready",
        "service": "relay",
        "topics": {"t": "waiting"},
    }
    one = Readiness([Problem("redis_unreachable", "Redis does not answer")])
    with pytest.raises(HttpError) as caught:
        readiness_answer("relay", one)
    assert (caught.value.status, caught.value.code) == (503, "redis_unreachable")
    two = Readiness([Problem("a", "first"), Problem("b", "second")])
    with pytest.raises(HttpError) as caught:
        readiness_answer("worker", two)
    exc = caught.value
    assert (exc.status, exc.code) == (503, "not_ready")
    assert exc.message == "the worker is not ready: first; second"
    assert exc.details["problems"] == [{"code": "a", "message": "first"}, {"code": "b", "message": "second"}]


class Fake(Service):
    """A service whose readiness the test sets."""

    health_name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[Problem] = []
        self.hang: asyncio.Event | None = None
        self.fail = False

    async def _start(self) -> None:
        pass

    async def _stop(self) -> None:
        pass

    async def _readiness(self, found: Readiness) -> None:
        if self.hang is not None:
            await self.hang.wait()
        if self.fail:
            raise RuntimeError("boom")
        found.problems += self.problems
        found.facts["answered"] = True


@pytest.fixture
def server() -> Iterator[HealthServer]:
    health = HealthServer("fake", stale_s=0.3, check_timeout_s=0.5, beat_s=0.05)
    health.start("127.0.0.1", 0)
    try:
        yield health
    finally:
        health.unwatch()
        health.stop()


async def answer(port: int, path: str) -> tuple[int, Any]:
    return await asyncio.to_thread(get, port, path)


async def test_a_service_is_ready_only_while_running_and_its_checks_pass(server: HealthServer) -> None:
    service = Fake()
    status, body = await answer(server.port, "/readyz")
    assert (status, body["error"]["code"]) == (503, "starting"), "not watched yet"
    assert (await answer(server.port, "/healthz"))[0] == 200
    server.watch(service.readiness)
    status, body = await answer(server.port, "/readyz")
    assert (status, body["error"]["code"]) == (503, "starting"), "watched, not started"
    async with service:
        assert await answer(server.port, "/readyz") == (
            200,
            {"status": "ready", "service": "fake", "answered": True},
        )
        status, text = await answer(server.port, "/metrics")
        assert status == 200
        assert 'jobq_service_ready{service="fake"} 1.0' in text
        service.problems = [Problem("redis_unreachable", "Redis does not answer")]
        status, body = await answer(server.port, "/readyz")
        assert status == 503
        assert body["error"]["code"] == "redis_unreachable"
        assert body["error"]["problems"] == [
            {"code": "redis_unreachable", "message": "Redis does not answer"}
        ]
        assert body["error"]["answered"] is True, "the facts come along"
        assert 'jobq_service_ready{service="fake"} 0.0' in (await answer(server.port, "/metrics"))[1]
        service.problems, service.fail = [], True
        status, body = await answer(server.port, "/readyz")
        assert (status, body["error"]["code"]) == (503, "check_failed")
        assert "boom" in body["error"]["message"]
        service.fail, service.hang = False, asyncio.Event()
        status, body = await answer(server.port, "/readyz")
        assert (status, body["error"]["code"]) == (503, "check_timeout")
        service.hang.set()
        service.hang = None
    status, body = await answer(server.port, "/readyz")
    assert (status, body["error"]["code"]) == (503, "stopping")
    server.unwatch()
    assert (await answer(server.port, "/readyz"))[1]["error"]["code"] == "stopping"


async def test_a_wedged_loop_fails_healthz_while_the_server_still_answers(
    server: HealthServer, eventually: Callable[..., Any]
) -> None:
    service = Fake()
    server.watch(service.readiness)
    assert (await answer(server.port, "/healthz"))[0] == 200
    seen: dict[str, tuple[int, Any]] = {}
    release = threading.Event()

    def probe_until_stalled() -> None:
        try:
            while (healthz := get(server.port, "/healthz"))[0] == 200:
                pass
            seen["healthz"], seen["readyz"] = healthz, get(server.port, "/readyz")
        finally:
            release.set()

    threading.Thread(target=probe_until_stalled, daemon=True).start()
    # a synchronous wait wedges this loop: nothing stamps the heartbeat until the probe saw a 503
    assert release.wait(30), "the probe thread ends once /healthz said 503"
    status, body = seen["healthz"]
    assert (status, body["error"]["code"]) == (503, "loop_stalled")
    status, body = seen["readyz"]
    assert (status, body["error"]["code"]) == (503, "loop_stalled"), "not ready either"
    stalled_at = server.beat_at
    # the loop runs again: its overdue stamp comes at once
    await eventually(lambda: server.beat_at, lambda at: at != stalled_at, timeout_s=5)
    assert (await answer(server.port, "/healthz"))[0] == 200


class Started(Fake):
    """A service that says when it started."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    async def _start(self) -> None:
        self.started.set()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_health_after_serves_the_routes_once_the_started_service_sets_it(
    eventually: Callable[..., Any],
) -> None:
    """A worker pool's routes come once its first claim round ended (``health_after``): making their
    server must not delay that claim. Until then nothing listens; from then to the stop they answer."""
    service, port, after, until = Started(), _free_port(), asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(
        run_until_signal(service, until=until, health_port=port, health_after=after)
    )
    await asyncio.wait_for(service.started.wait(), 10)  # a server made before the start listens by now
    assert await asyncio.to_thread(_refused, port), "served before the event"
    after.set()
    await eventually(lambda: asyncio.to_thread(_refused, port), lambda refused: not refused, 5)
    assert (await answer(port, "/readyz"))[0] == 200
    until.set()
    await running
    assert await asyncio.to_thread(_refused, port), "served after the stop"


async def test_a_health_server_that_cannot_start_after_the_start_stops_the_service() -> None:
    service, after, until = Started(), asyncio.Event(), asyncio.Event()
    after.set()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        running = asyncio.create_task(
            run_until_signal(service, until=until, health_port=port, health_after=after)
        )
        await asyncio.wait([running], timeout=10)
    until.set()  # (a run that did not end: let it)
    assert running.done(), "the service runs on without its health routes"
    failed = running.exception()
    assert isinstance(failed, OSError)
    assert failed.errno == errno.EADDRINUSE, repr(failed)
    assert service.started.is_set(), "started"
    assert not service.running, "then stopped"
