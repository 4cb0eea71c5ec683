"""The lifecycle every long-running part of jobq shares: ``async start()``, idempotent ``async stop()``,
``async with``. Signals are handled only in mains (:func:`run_until_signal`), never inside services.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import signal
import sys
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self

from jqcore.aio import cancel_and_wait
from jqcore.errors import JobqError
from jqcore.extras import MissingExtra, extra_for
from jqcore.log import configure, get_logger
from jqcore.settings.common import load
from jqcore.settings.observe import LogSettings, MetricsSettings
from jqruntime.health import HealthServer, Readiness

__all__ = ["Service", "run_until_signal"]

SLOW_STOP_S = 30.0
"""A stop still running after this long logs every pending task's stack (what it waits for)."""


class Service:
    """Base of gateways, relays, worker pools, canaries.

    Subclasses implement :meth:`_start` and :meth:`_stop`; this class makes ``stop`` idempotent, makes
    ``start`` after ``stop`` an error, and gives ``async with``. A service acquires its connections in
    ``_start``, never in its constructor, and ``_stop`` releases whatever was acquired: a ``start`` that
    fails half-way is stopped at once (so ``_stop`` must cope with anything not yet made); a service never
    started stops without calling ``_stop``.
    """

    health_name = "service"
    """How ``/healthz`` and ``/readyz`` name the service: ``relay``, ``scheduler``, ``worker``, ``canary``."""

    def __init__(self) -> None:
        self._started = False
        self._up = False
        self._stopped = False
        self._stop_lock = asyncio.Lock()

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    async def start(self) -> None:
        if self._stopped:
            raise RuntimeError(f"{type(self).__name__} was stopped; create a new one")
        if self._started:
            return
        self._started = True
        try:
            await self._start()
        except BaseException:
            await self._stop_after_failed_start()
            raise
        self._up = True

    async def readiness(self) -> Readiness:
        """What ``/readyz`` answers (:mod:`jqruntime.health`): a service still starting or stopping is not
        ready; a running one is judged by its own :meth:`_readiness`."""
        found = Readiness()
        if self._stopped:
            found.add("stopping", f"the {self.health_name} is stopping")
        elif not self._up:
            found.add("starting", f"the {self.health_name} is starting")
        else:
            await self._readiness(found)
        return found

    async def _readiness(self, found: Readiness) -> None:
        """Add the running service's problems (a dependency that does not answer, its job not done) and
        facts to ``found``; nothing by default."""

    async def _stop_after_failed_start(self) -> None:
        """Release what a failed start acquired; the start's error is the one reported."""
        try:
            await self.stop()
        except Exception as exc:
            get_logger("jqruntime.lifecycle").warning(
                "stopping after a failed start failed too", service=type(self).__name__, error=repr(exc)
            )

    async def stop(self) -> None:
        async with self._stop_lock:
            if self._stopped or not self._started:
                self._stopped = True
                return
            self._stopped = True
            watchdog = asyncio.get_running_loop().call_later(SLOW_STOP_S, _report_slow_stop, self)
            try:
                await self._stop()
            finally:
                watchdog.cancel()

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def _report_slow_stop(service: Service) -> None:
    stacks = []
    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(limit=8, file=out)
        stacks.append(out.getvalue())
    get_logger("jqruntime.lifecycle").error(
        "stop is taking long; pending tasks follow", service=type(service).__name__, tasks=stacks
    )


async def run_until_signal(
    service: Service,
    *,
    on_second_signal: Callable[[], Coroutine[Any, Any, None]] | None = None,
    until: asyncio.Event | None = None,
    health_port: int | None = None,
    health_after: asyncio.Event | None = None,
) -> None:
    """Start ``service``, wait for SIGINT/SIGTERM (or ``until``), stop it; a second signal calls
    ``on_second_signal``. ``health_port``: serve ``/healthz``, ``/readyz`` and ``/metrics`` on
    ``JOBQ_METRICS_HOST``:PORT meanwhile (:class:`jqruntime.health.HealthServer`), from before the start
    to after the stop — or, with ``health_after``, from when the started service sets that event (a
    worker pool: its first claim round ended; making the server, aiohttp's import above all, costs more
    CPU than the rest of a worker's start-up after its imports and would delay that claim). A server that
    cannot start then stops the service and raises, as it does before a start."""
    health: list[HealthServer] = []

    async def serve_health() -> None:
        assert health_port is not None
        settings = load(MetricsSettings)
        server = HealthServer(service.health_name)
        await asyncio.to_thread(server.start, settings.host, health_port)
        health.append(server)
        server.watch(service.readiness)

    async def serve_health_after(event: asyncio.Event) -> None:
        await event.wait()
        await serve_health()

    if health_port is not None and health_after is None:
        await serve_health()
    beside = serve_health_after(health_after) if health_port is not None and health_after else None
    try:
        await _run(service, on_second_signal, until, beside)
    finally:
        for server in health:
            server.unwatch()  # on this loop: its timer is cancelled where it runs
            await asyncio.to_thread(server.stop)


async def _run(
    service: Service,
    on_second_signal: Callable[[], Coroutine[Any, Any, None]] | None,
    until: asyncio.Event | None,
    beside: Coroutine[Any, Any, None] | None,
) -> None:
    loop = asyncio.get_running_loop()
    stop_requested = until or asyncio.Event()
    hard_tasks: list[asyncio.Task[None]] = []

    def handle() -> None:
        if stop_requested.is_set() and on_second_signal is not None:
            hard_tasks.append(loop.create_task(on_second_signal()))
        stop_requested.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, handle)
    try:
        async with service:
            await _wait_beside(stop_requested, beside)
    finally:
        if beside is not None:
            beside.close()  # never started: the start failed
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        for task in hard_tasks:
            with contextlib.suppress(Exception):
                await task


async def _wait_beside(stop: asyncio.Event, beside: Coroutine[Any, Any, None] | None) -> None:
    """Wait for ``stop`` while ``beside`` runs (a task of its own, ended here); an error of ``beside`` ends
    the wait and is raised."""
    if beside is None:
        await stop.wait()
        return
    side = asyncio.ensure_future(beside)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([side, stopped], return_when=asyncio.FIRST_COMPLETED)
        if side.done():
            side.result()  # its error, if any
            await stopped
    finally:
        await cancel_and_wait(side)
        await cancel_and_wait(stopped)


def service_main(run: Callable[[], None] | str) -> None:
    """What ``python -m <service>`` does: logging from ``JOBQ_LOG_*``, then ``run`` (or the ``run`` of the
    module named so, imported here: a library of an extra that is not installed is one line naming the
    extra, ``jqcore.extras``). A setting, or a server that refuses what the settings ask (a start-up check:
    plaintext against TLS, an evicting Redis, a topic that contradicts its declaration), stops it with one
    line naming the problem and exit status 2 — no traceback; a server that does not answer yet stops it
    the same way with status 1 (a supervisor restarts it)."""
    try:
        configure(load(LogSettings))  # a bad JOBQ_LOG_* is one readable line too
        if isinstance(run, str):
            run = _import_run(run)
        run()
    except JobqError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        sys.exit(1 if exc.retriable else 2)


def _import_run(module: str) -> Callable[[], None]:
    try:
        found: Callable[[], None] = importlib.import_module(module).run
    except ImportError as exc:
        extra = extra_for(exc)
        if extra is None:
            raise
        raise MissingExtra(f"python -m {module.partition('.')[0]}", extra) from None
    return found
