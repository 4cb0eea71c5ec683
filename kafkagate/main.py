"""``jobq gate`` / ``python -m kafkagate``: serve the gateway until SIGTERM/SIGINT.

With ``JOBQ_GATE_PROCESSES`` above 1 (0: one per core) the process started is a supervisor
(:class:`Supervisor`) that serves nothing itself. It starts N gateway processes by running its own command
line again (``sys.orig_argv``, so ``jobq gate --web --port P`` children get the same flags) with
``_JOBQ_GATE_SLOT`` set; each binds ``host:port`` with ``SO_REUSEPORT`` (the kernel spreads new
connections over them), has its own Kafka producer and Redis client, and tags its answers with
``X-Jobq-Gate-Process: <slot>``.

* **Supervision**: a child that dies is restarted in its slot (backoff 0.5 s doubling to 10 s; reset once
  it ran a minute) while the others keep serving. More than :data:`MAX_DEATHS` deaths within
  :data:`DEATH_WINDOW_S` mean something is wrong beyond one process (a port taken, a broken install): the
  supervisor stops the rest and exits 1, leaving it to systemd/Kubernetes. A child whose supervisor is
  gone (SIGKILL) stops by itself, so no orphan keeps the port.
* **Stop**: SIGTERM/SIGINT to the supervisor is forwarded as SIGTERM to every child; each stops accepting
  and lets its running requests finish (``GateService.stop``); the supervisor exits 0 once all exited
  cleanly, kills what is left after :data:`STOP_GRACE_S` and then exits 1. A second signal kills at once.
* **Tokens**: SIGHUP reloads the tokens (``JOBQ_TOKENS_FILE`` and ``JOBQ_GATE_TOKENS``,
  :meth:`GateService.reload_tokens`) without dropping a request; a bad file keeps the tokens in force and
  logs one error line. The supervisor forwards SIGHUP to every process.
* **Metrics**: prometheus-client's multiprocess mode. The supervisor gives the children one
  ``PROMETHEUS_MULTIPROC_DIR`` (the operator's, wiped at start, or a temporary one removed at exit), so
  ``/metrics`` — whichever process answers the scrape — is the whole gateway's: counters and histograms
  summed over all processes, the restarted ones' counts included (no counter goes backwards).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from aiohttp import web

from jqcore.aio import cancel_and_wait, wait_event
from jqcore.errors import JobqError
from jqcore.log import get_logger
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import AuditSettings, CronSettings, FarSettings, HistorySettings, RelayKeys
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqcore.topics import audit_topic, job_topics, schedule_topic
from jqengine import Engine, RedisClient, connect
from jqruntime.http import serve_http
from jqruntime.lifecycle import Service, run_until_signal
from jqruntime.preflight import preflight
from jqruntime.stores.audit import AuditTrail
from jqruntime.stores.presence import Presence, process_name
from jqruntime.tokens import TokenSettings, TokenSource, load_tokens, reload_all
from jqruntime.tracing import setup_tracing
from kafkagate.app import make_app
from kafkagate.auth import TOKENS
from kafkagate.limits import share_of
from kafkagate.longpoll import LongPolls
from kafkagate.settings import GateSettings
from kafkagate.state import Gate

__all__ = ["PROCESS_HEADER", "SLOT_ENV", "GateService", "Supervisor", "run"]

log = get_logger("kafkagate")

SLOT_ENV = "_JOBQ_GATE_SLOT"
"""Set (1..N) in the environment of a gateway process started by the :class:`Supervisor`."""
SUPERVISOR_ENV = "_JOBQ_GATE_SUPERVISOR"
"""The supervisor's pid, beside :data:`SLOT_ENV`: a process whose parent is no longer that one stops."""
PROCESS_HEADER = "X-Jobq-Gate-Process"
"""The slot (1..N) of the process that answered, on every answer of a multi-process gateway."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

RESTART_MIN_S = 0.5
RESTART_MAX_S = 10.0
STABLE_S = 60.0
"""A child that ran this long is restarted after :data:`RESTART_MIN_S` again when it dies."""
MAX_DEATHS = 5
DEATH_WINDOW_S = 60.0
STOP_GRACE_S = 30.0
"""How long the children get to drain after SIGTERM (their HTTP drain is 5 s,
``jqruntime.http.SHUTDOWN_TIMEOUT_S``, then producers flush)."""
PARENT_CHECK_S = 1.0
REDIS_WAIT_S = 2.0
"""How long a request waits for a free connection of the process's Redis pool (then 429 gateway_busy)."""


class GateService(Service):
    """The gateway as a service: HTTP on ``settings.host:settings.port`` (port 0: any free port).

    ``slot`` (1..N): this is one process of a multi-process gateway: it binds with ``SO_REUSEPORT`` beside
    the others and names itself in :data:`PROCESS_HEADER`."""

    def __init__(
        self,
        settings: GateSettings,
        routing: RoutingSettings,
        kafka: KafkaSettings,
        redis: RedisSettings,
        consul: ConsulSettings,
        cron: CronSettings,
        far: FarSettings,
        history: HistorySettings,
        trace: TraceSettings,
        mounts: Mapping[str, web.Application] | None = None,
        *,
        slot: int | None = None,
        audit: AuditSettings | None = None,
        relay_keys: RelayKeys | None = None,
    ) -> None:
        """``relay_keys``: where the relays watch the queues' rate limits (default: ``JOBQ_RELAY_*``)."""
        super().__init__()
        self.audit = audit if audit is not None else load(AuditSettings)
        self.relay_keys = relay_keys if relay_keys is not None else load(RelayKeys)
        self._audit: AuditTrail | None = None
        self.settings, self.routing, self.kafka, self.redis = settings, routing, kafka, redis
        self.consul, self.cron, self.far, self.history, self.trace = consul, cron, far, history, trace
        self._redis_client: RedisClient | None = None
        self._waits_client: RedisClient | None = None
        self._gate: Gate | None = None
        self._runner: web.AppRunner | None = None
        self._presence: Presence | None = None
        self._tokens: TokenSource | None = None
        self.port = settings.port
        self.mounts = dict(mounts or {})
        self.slot = slot

    @property
    def gate(self) -> Gate:
        """What the handlers share (once started)."""
        if self._gate is None:
            raise RuntimeError("the gateway is not started")
        return self._gate

    async def _start(self) -> None:
        setup_tracing("kafkagate", self.trace)  # off unless JOBQ_TRACE_OTLP_ENDPOINT is set
        connections, share = self.settings.redis_connections, self.settings.token_share
        self._redis_client = client = connect(
            self.redis,
            max_connections=connections,
            wait_s=REDIS_WAIT_S,
            holder_max=share_of(connections, share),  # per token (POOL_HOLDER, kafkagate.auth)
        )
        await self._preflight(client)
        self._waits_client = connect(self.redis)  # long-polls wait here, never on the requests' pool
        self._gate = gate = Gate(
            self.settings,
            self.routing,
            self.kafka,
            Engine(client),
            client,
            self.consul,
            self.cron,
            self.far,
            self.history,
            LongPolls(
                Engine(self._waits_client),
                self.settings.long_polls_max,
                share_of(self.settings.long_polls_max, share),
            ),
            relay_keys=self.relay_keys,
        )
        self._audit = AuditTrail(client, self.kafka, self.audit)
        app = make_app(gate, self.mounts, audit=self._audit)
        self._tokens = app[TOKENS]
        with contextlib.suppress(RuntimeError, ValueError):  # not the main thread: no signals here
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload_tokens)
        if self.slot is not None:
            app.on_response_prepare.append(_process_header(str(self.slot)))
        self._runner, self.port = await serve_http(
            app, self.settings.host, self.settings.port, reuse_port=self.slot is not None
        )
        facts = {"kind": "gateway", "az": self.settings.az, "port": self.port, "slot": self.slot}
        self._presence = Presence(client, "gate", process_name(self.settings.az), facts=lambda: facts)
        await self._presence.start()
        log.info(
            "gateway serving", host=self.settings.host, port=self.port, az=self.settings.az, slot=self.slot
        )

    async def _preflight(self, client: RedisClient) -> None:
        """Redis must not evict; the routed topics (and the schedule topic, which the gateway writes
        tombstones to, and the audit topic) are held to the declaration when they exist (the gateway
        creates none)."""
        uses = [*job_topics(self.routing.topics(), sides=False), audit_topic(self.audit)]
        uses += [schedule_topic(self.far)] if self.far.enabled else []
        await preflight(redis=(client, self.redis), kafka=self.kafka, consul=self.consul, uses=uses)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    def reload_tokens(self) -> bool:
        """Read the tokens again (the SIGHUP handler), the dashboard's under ``/ui`` too: the new set serves
        the next request; a bad file keeps the old set (one error line). False when not reloaded."""
        return self._tokens is not None and reload_all()

    async def _stop(self) -> None:
        with contextlib.suppress(RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        if self._presence is not None:
            await self._presence.stop()
        if self._runner is not None:
            await self._runner.cleanup()  # stops accepting, lets running requests finish, closes producers
            self._runner = None
        elif self._gate is not None:  # made, never served: its app never ran the cleanup that closes it
            await self._gate.close()
        self._gate = None
        if self._audit is not None:  # the admin calls' records still on their way to Kafka
            await self._audit.close(5.0)
            self._audit = None
        for client in (self._redis_client, self._waits_client):
            if client is not None:
                await client.aclose()
        self._redis_client = self._waits_client = None


def _process_header(slot: str) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """An ``on_response_prepare`` hook naming this process on every answer (errors included)."""

    async def add(_: web.Request, response: web.StreamResponse) -> None:
        response.headers[PROCESS_HEADER] = slot

    return add


GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (CPython's default: 700). With 64 requests
in flight, most of what a request allocates is freed by its end; collecting ten times as seldom walks the
objects of requests still in flight ten times less often (the gateway's CPU per request; issue 58)."""


def run(settings: GateSettings | None = None, mounts: Mapping[str, web.Application] | None = None) -> None:
    """Serve the gateway until SIGTERM/SIGINT: in this process, or as the supervisor of
    ``settings.process_count()`` gateway processes (exit status 1 when they could not be kept running).
    The supervisor serves nothing itself: ``mounts`` are built again by each process, which runs the same
    command line."""
    settings = settings if settings is not None else load(GateSettings)
    slot = os.environ.get(SLOT_ENV)
    parts = (load(RoutingSettings), load(KafkaSettings), load(RedisSettings), load(ConsulSettings))
    more = (load(CronSettings), load(FarSettings), load(HistorySettings), load(TraceSettings))
    load_tokens(load(TokenSettings), gate=settings.tokens, host=settings.host)
    # (loaded by the supervisor too: a bad setting stops the gateway here, not in N children dying in turn)
    if slot is None and settings.process_count() > 1:
        code = asyncio.run(Supervisor(settings).run())
        if code:
            raise SystemExit(code)
        return
    service = GateService(settings, *parts, *more, mounts, slot=int(slot) if slot is not None else None)
    gc.freeze()  # what start-up made (modules, classes, settings) is never garbage: no collection walks it
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    asyncio.run(_serve(service))


async def _serve(service: GateService) -> None:
    """Run ``service`` until a signal; a supervised process also stops when its supervisor is gone."""
    if service.slot is None:
        await run_until_signal(service)
        return
    orphaned = asyncio.Event()
    supervisor = int(os.environ.get(SUPERVISOR_ENV) or os.getppid())
    watch = asyncio.create_task(_watch_parent(supervisor, orphaned), name="gate:parent")
    try:
        await run_until_signal(service, until=orphaned)
    finally:
        await cancel_and_wait(watch)


async def _watch_parent(parent: int, orphaned: asyncio.Event) -> None:
    while os.getppid() == parent:  # noqa: ASYNC110 - nothing signals a parent's death; re-parenting shows it
        await asyncio.sleep(PARENT_CHECK_S)
    log.warning("gateway supervisor gone; stopping", supervisor=parent)
    orphaned.set()


class Supervisor:
    """Runs ``settings.process_count()`` gateway processes on one port (see the module's docstring)."""

    def __init__(self, settings: GateSettings, argv: list[str] | None = None) -> None:
        self.settings = settings
        self.count = settings.process_count()
        self.argv = argv or [sys.executable, *sys.orig_argv[1:]]
        """The command of a child: this process's own, run again."""
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._stop = asyncio.Event()
        self._failed = False
        self._deaths: collections.deque[float] = collections.deque()
        self._metrics_dir = ""

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT (0 when every child stopped cleanly) or until the children keep
        dying (1)."""
        _check_port_free(self.settings.host, self.settings.port)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        loop.add_signal_handler(signal.SIGHUP, self._forward_hup)
        own_dir = not os.environ.get(MULTIPROC_ENV)
        self._metrics_dir = (
            tempfile.mkdtemp(prefix="jobq-gate-metrics-") if own_dir else _wiped(os.environ[MULTIPROC_ENV])
        )
        log.info(
            "gateway supervisor starting",
            processes=self.count,
            host=self.settings.host,
            port=self.settings.port,
            metrics_dir=self._metrics_dir,
        )
        keepers = [asyncio.create_task(self._keep(slot), name=f"gate:slot{slot}") for slot in self._slots()]
        try:
            await self._stop.wait()
            codes = await self._stop_children(keepers)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
            for task in keepers:
                await cancel_and_wait(task)
            if own_dir:
                shutil.rmtree(self._metrics_dir, ignore_errors=True)
        # -SIGTERM: a process still starting (its handlers not set yet) — it had accepted nothing
        clean = not self._failed and all(code in (0, -signal.SIGTERM) for code in codes)
        log.info("gateway supervisor stopped", clean=clean, exit_codes=codes)
        return 0 if clean else 1

    def _slots(self) -> range:
        return range(1, self.count + 1)

    def _on_signal(self) -> None:
        if self._stop.is_set():  # the second signal: no more waiting
            for proc in self._procs.values():
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        self._stop.set()

    def _forward_hup(self) -> None:
        """SIGHUP: every gateway process reloads its tokens."""
        for proc in self._procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGHUP)

    async def _spawn(self, slot: int) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            SLOT_ENV: str(slot),
            SUPERVISOR_ENV: str(os.getpid()),
            MULTIPROC_ENV: self._metrics_dir,
        }
        proc = await asyncio.create_subprocess_exec(*self.argv, env=env, stdin=asyncio.subprocess.DEVNULL)
        self._procs[slot] = proc
        if self._stop.is_set():  # the stop began while it started: it was not among those told to stop
            proc.terminate()
        log.info("gateway process started", slot=slot, pid=proc.pid)
        return proc

    async def _keep(self, slot: int) -> None:
        """Keep a gateway process running in ``slot`` until the stop (a failure to start one stops all)."""
        try:
            await self._keep_running(slot)
        except Exception:
            log.exception("cannot run a gateway process; stopping the gateway", slot=slot, argv=self.argv)
            self._failed = True
            self._stop.set()

    async def _keep_running(self, slot: int) -> None:
        loop = asyncio.get_running_loop()
        delay = RESTART_MIN_S
        while not self._stop.is_set():
            proc = await self._spawn(slot)
            started = loop.time()
            code = await proc.wait()
            _mark_dead(proc.pid, self._metrics_dir)
            if self._stop.is_set():
                return
            now = loop.time()
            self._deaths.append(now)
            while self._deaths and self._deaths[0] < now - DEATH_WINDOW_S:
                self._deaths.popleft()
            if len(self._deaths) > MAX_DEATHS:
                log.error(
                    "gateway processes keep dying; stopping the gateway",
                    deaths=len(self._deaths),
                    window_s=DEATH_WINDOW_S,
                    slot=slot,
                    exit_code=code,
                )
                self._failed = True
                self._stop.set()
                return
            if now - started >= STABLE_S:
                delay = RESTART_MIN_S
            log.error(
                "gateway process died; restarting it", slot=slot, pid=proc.pid, exit_code=code, in_s=delay
            )
            await wait_event(self._stop, delay)
            delay = min(delay * 2, RESTART_MAX_S)

    async def _stop_children(self, keepers: list[asyncio.Task[None]]) -> list[int | None]:
        """SIGTERM to every running child, wait for them to drain (SIGKILL after :data:`STOP_GRACE_S`);
        the exit codes of those that were running (``None``: had to be killed)."""
        running = [proc for proc in self._procs.values() if proc.returncode is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        _, pending = await asyncio.wait(keepers, timeout=STOP_GRACE_S)  # each ends once its child exited
        killed = set()
        for proc in self._procs.values():
            if proc.returncode is None:
                log.error("gateway process did not stop in time; killing it", pid=proc.pid)
                killed.add(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        return [None if proc.pid in killed else proc.returncode for proc in running]


def _mark_dead(pid: int, path: str) -> None:
    from prometheus_client import multiprocess

    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def _wiped(path: str) -> str:
    """The operator's metrics folder, emptied of a previous run's files (prometheus-client requires it)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for db in folder.glob("*.db"):
        db.unlink(missing_ok=True)
    return str(folder)


def _check_port_free(host: str, port: int) -> None:
    """Refuse to start when something already listens on ``host:port``: with ``SO_REUSEPORT`` the children
    would otherwise share the port with another gateway of the same user instead of failing."""
    for family, kind, proto, _, addr in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(addr)
            except OSError as exc:
                raise JobqError(
                    f"cannot listen on {host}:{port}: {exc.strerror}", code="address_in_use"
                ) from exc
