"""Health of a long-running jobq process: ``/healthz``, ``/readyz`` and ``/metrics`` on its metrics port.

Relays, schedulers, worker pools and canaries serve these three routes (gateways and dashboards serve
them on their own HTTP port). The server runs in a **thread of its own** with its own event loop, so it
answers while the service's loop is busy — and can therefore tell that the loop is wedged:

* ``GET /healthz`` — the process is alive: the service's event loop stamped its heartbeat (a
  ``call_later`` chain every :data:`BEAT_S`) less than ``stale_s`` ago. A loop blocked by a synchronous
  call, a runaway handler or a dead-locked library stops stamping and the answer becomes 503
  ``loop_stalled``: restart the process.
* ``GET /readyz`` — the process does its job: the service's own :meth:`~jqruntime.lifecycle.Service.readiness`
  runs **on the service's loop** (it uses the service's own clients) within ``check_timeout_s``; its
  problems (a dependency that does not answer, a lock neither held nor waited for, a pool that stopped
  claiming...) make a 503 ``not_ready`` listing each one with a code. Not started yet, stopping, a stale
  heartbeat or a check that did not finish in time are 503 as well (``starting``, ``stopping``,
  ``loop_stalled``, ``check_timeout``).
* ``GET /metrics`` — the process's Prometheus registry (:func:`jqcore.metrics.render`), with
  ``jobq_service_ready{service}`` judged for the scrape (what the ``JobqServiceNotReady`` alert reads).

Every 503 is the one error body of :mod:`jqruntime.http` (``{"error": {"code", "message", ...}}``) with
``Retry-After``; a 200 is ``{"status": "ok"|"ready", "service": ..., ...facts}``.

:func:`liveness` and :func:`readiness_answer` are the pure judgements (unit-tested); :class:`HealthServer`
serves them; :func:`jqruntime.lifecycle.run_until_signal` starts one when a main passes ``health_port``.
aiohttp is imported when a server is made or an answer formed, never by importing this module: a process
without a metrics port (a worker pool by default) does not pay for it at start.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jqcore import metrics
from jqcore.log import get_logger

if TYPE_CHECKING:
    from aiohttp import web

    from jqruntime.http import HttpError

__all__ = [
    "BEAT_S",
    "LOOP_STALE_S",
    "HealthServer",
    "Problem",
    "Readiness",
    "liveness",
    "ping",
    "readiness_answer",
    "readiness_error",
]

log = get_logger("jqruntime.health")

BEAT_S = 0.5
"""How often the service's loop stamps its heartbeat."""
LOOP_STALE_S = 10.0
"""``/healthz`` answers 503 ``loop_stalled`` once the loop has not stamped its heartbeat for this long (a
blocking call or a runaway handler wedged it); how many such answers restart a pod is the probe's
``failureThreshold``."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a process is not ready: a stable machine-readable ``code`` and a sentence."""

    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(slots=True)
class Readiness:
    """What a service's readiness check found: its problems (none: ready) and facts worth showing
    (a relay's role per topic, a scheduler's group...)."""

    problems: list[Problem] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, code: str, message: str) -> None:
        self.problems.append(Problem(code, message))


ReadinessCheck = Callable[[], Awaitable[Readiness]]


def liveness(beat_at: float | None, now: float, stale_s: float) -> Problem | None:
    """None when the loop stamped its heartbeat within ``stale_s`` of ``now`` (monotonic seconds); a loop
    not watched yet (``beat_at`` None: the process is still starting) counts as alive."""
    if beat_at is None:
        return None
    silent = now - beat_at
    if silent > stale_s:
        return Problem("loop_stalled", f"the event loop has not run for {silent:.1f} s (limit {stale_s:g} s)")
    return None


def readiness_error(
    service: str, problems: Sequence[Problem], facts: Mapping[str, Any] | None = None
) -> HttpError:
    """The 503 for ``problems``: code ``not_ready`` (or the one problem's own code), a message naming each,
    and the list of problems in the body."""
    from jqruntime.http import HttpError  # aiohttp: only when there is an answer to form

    message = "; ".join(p.message for p in problems)
    code = problems[0].code if len(problems) == 1 else "not_ready"
    details = {"service": service, "problems": [p.as_dict() for p in problems], **(facts or {})}
    return HttpError(503, code, f"the {service} is not ready: {message}", details=details)


def readiness_answer(service: str, found: Readiness) -> dict[str, Any]:
    """The 200 body for a readiness without problems; raises the 503 :func:`readiness_error` otherwise."""
    if found.problems:
        raise readiness_error(service, found.problems, found.facts)
    return {"status": "ready", "service": service, **found.facts}


class HealthServer:
    """The health routes of one process, served from a background thread (see the module doc).

    ``start(host, port)`` binds (port 0: a free one; a port already taken raises ``OSError`` here, in the
    caller) and returns the port; ``watch(check)`` — on the service's loop — starts the heartbeat there and
    names the readiness check; ``stop()`` stops the heartbeat and the server."""

    def __init__(
        self,
        service: str,
        *,
        stale_s: float = LOOP_STALE_S,
        check_timeout_s: float = 3.0,
        beat_s: float = BEAT_S,
    ) -> None:
        if stale_s <= 2 * beat_s:
            raise ValueError(f"stale_s ({stale_s}) must exceed two heartbeats ({beat_s} s each)")
        self.service, self.stale_s, self.check_timeout_s = service, stale_s, check_timeout_s
        self.beat_s = beat_s
        self.beat_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._check: ReadinessCheck | None = None
        self._beat: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._server_loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ---- the service's side ---------------------------------------------------------------------
    def watch(self, check: ReadinessCheck) -> None:
        """Start stamping the heartbeat on the running loop and answer ``/readyz`` with ``check``."""
        self._loop = asyncio.get_running_loop()
        self._check = check
        self._stamp()

    def _stamp(self) -> None:
        self.beat_at = time.monotonic()
        if self._loop is not None:
            self._beat = self._loop.call_later(self.beat_s, self._stamp)

    def unwatch(self) -> None:
        """Stop the heartbeat (the service's loop is ending); ``/readyz`` answers ``stopping``."""
        if self._beat is not None:
            self._beat.cancel()
        self._loop = self._check = self._beat = None

    # ---- the server's side ----------------------------------------------------------------------
    def app(self) -> web.Application:
        from aiohttp import web  # here, not at import (the module doc)

        from jqruntime.http import error_middleware

        app = web.Application(middlewares=[error_middleware(f"the {self.service}'s health server")])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _healthz(self, _: web.Request) -> web.Response:
        from jqruntime.http import HttpError, json_response

        problem = liveness(self.beat_at, time.monotonic(), self.stale_s)
        if problem is not None:
            raise HttpError(503, problem.code, problem.message, details={"service": self.service})
        return json_response({"status": "ok", "service": self.service})

    async def evaluate(self) -> Readiness:
        """Judge readiness now (see the module doc) and record it in ``jobq_service_ready``."""
        found = await self._evaluate()
        metrics.SERVICE_READY.labels(self.service).set(0 if found.problems else 1)
        return found

    async def _evaluate(self) -> Readiness:
        loop, check = self._loop, self._check
        if loop is None or check is None:
            code = "starting" if self.beat_at is None else "stopping"
            return Readiness([Problem(code, f"the {self.service} is {code}")])
        stalled = liveness(self.beat_at, time.monotonic(), self.stale_s)
        if stalled is not None:
            return Readiness([stalled])
        future = asyncio.run_coroutine_threadsafe(_call(check), loop)
        try:
            async with asyncio.timeout(self.check_timeout_s):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            future.cancel()
            message = f"the readiness check did not finish within {self.check_timeout_s:g} s"
            return Readiness([Problem("check_timeout", message)])

    async def _readyz(self, _: web.Request) -> web.Response:
        from jqruntime.http import json_response

        return json_response(readiness_answer(self.service, await self.evaluate()))

    async def _metrics(self, _: web.Request) -> web.Response:
        from aiohttp import web

        await self.evaluate()  # jobq_service_ready as of this scrape
        return web.Response(body=metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})

    def start(self, host: str, port: int) -> int:
        """Serve on ``host:port`` from a daemon thread; the port bound."""
        from jqruntime.http import serve_http

        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = self._server_loop = asyncio.new_event_loop()
            try:
                self._runner, self.port = loop.run_until_complete(serve_http(self.app(), host, port))
            except BaseException as exc:
                failed.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._runner.cleanup())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"health:{self.service}", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        log.info("health endpoints serving", service=self.service, host=host, port=self.port)
        return self.port

    def stop(self) -> None:
        """Stop the server (waits for its thread); call :meth:`unwatch` on the service's loop first."""
        loop, thread = self._server_loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._thread = self._server_loop = None


async def _call(check: ReadinessCheck) -> Readiness:
    """Run ``check``; an exception it raises is a problem, not a 500."""
    try:
        return await check()
    except Exception as exc:
        return Readiness([Problem("check_failed", f"the readiness check failed: {exc!r}")])


async def ping(
    what: str, call: Awaitable[Any], found: Readiness, *, code: str, timeout_s: float = 2.0
) -> bool:
    """Await ``call`` (a dependency's cheapest request) within ``timeout_s``; on failure add a problem
    ``code`` naming ``what`` to ``found``. True when it answered."""
    try:
        async with asyncio.timeout(timeout_s):
            await call
    except Exception as exc:
        found.add(code, f"{what} does not answer ({type(exc).__name__}: {exc})")
        return False
    return True
