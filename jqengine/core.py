"""The engine's core: its Redis client, its clock, and one door through which every script call passes
(timed, counted, Redis errors mapped). Each part of the engine (:class:`Part`: ``engine.jobs``,
``engine.timers``, ``engine.admin``, ``engine.reads``, ``engine.events``) holds the one core of its
:class:`jqengine.Engine`; no part knows another."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from jqcore import metrics
from jqcore.clock import ServerClock
from jqengine import codes
from jqengine.keys import KINDS_KEY, QUEUES_KEY, SWITCHES_KEY, KeyName, QueueKeys
from jqengine.redisconn import RedisClient, text
from jqengine.replication import ReplicaWait, note_write
from jqengine.scripts import SCRIPTS, FunctionLibrary, flags, function_library
from jqengine.switchrules import Switch, queue_list, switches_of

__all__ = ["Core", "Functions", "Part", "Triple"]

Triple = tuple[str, int, str]
"""(job id, attempt, lease token): what proves a worker owns a running job."""

ANNOUNCE_EVERY_S = 10.0
"""How long an engine writes to a queue it announced (:meth:`Core.announce`) before announcing it again."""


def _lacks_function(reply: object) -> bool:
    """Redis's answer to ``FCALL`` of a function it does not have (a Redis restarted without the
    library, ``FUNCTION FLUSH``, a wiped or new node)."""
    return isinstance(reply, ResponseError) and str(reply).startswith("Function not found")


class Functions:
    """How the engine's transitions reach Redis: one Redis Functions library
    (:func:`jqengine.scripts.function_library`), loaded once (``FUNCTION LOAD``, on every primary of a
    Cluster) and called by ``FCALL`` (``FCALL_RO`` for a ``no-writes`` transition). Where Redis answers
    that it lacks the function, the library is loaded (:meth:`load`) and the call sent again. The
    library's text is made when first needed."""

    def __init__(self, client: RedisClient, library: FunctionLibrary | None = None) -> None:
        self._client = client
        self._library = library
        """``None``: this checkout's (:func:`~jqengine.scripts.function_library`); a bench may give another
        checkout's."""

    @property
    def library(self) -> FunctionLibrary:
        return self._library or function_library()

    @staticmethod
    def _command(name: str) -> str:
        return "FCALL_RO" if "no-writes" in flags(name) else "FCALL"

    async def load(self) -> None:
        """``FUNCTION LOAD`` of the library; on a Cluster, on each primary in turn (all done before the call
        is sent again: redis-py's own fan-out stops at the first node that answers an error). Not
        ``REPLACE``: a library of this name is this text (the name is its hash), and Redis refuses a second
        load of a name it has before compiling anything (~30 µs, not the 15–45 ms of a compile), so the
        processes that all met a Redis without it do not compile it once each."""
        text = self.library.text
        nodes = self._client.get_primaries() if isinstance(self._client, RedisCluster) else [None]
        for node in nodes:
            try:
                if node is None:
                    await self._client.execute_command("FUNCTION LOAD", text)
                else:
                    await self._client.execute_command("FUNCTION LOAD", text, target_nodes=node)
            except ResponseError as e:
                if "already exists" not in str(e):
                    raise

    async def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Transition ``name`` on ``keys`` with ``args``."""
        command = (self._command(name), self.library.function(name), len(keys), *keys, *args)
        try:
            return await self._client.execute_command(*command)
        except ResponseError as e:
            if not _lacks_function(e):
                raise
        await self.load()
        return await self._client.execute_command(*command)

    async def pipelined(self, name: str, keys: Sequence[str], calls: Sequence[Sequence[Any]]) -> list[Any]:
        """One round trip of calls of transition ``name`` on ``keys`` (a single Redis's client), each
        reply or error in order. Calls refused because Redis lacks the function did not run: the library
        is loaded and only those are sent again."""
        assert isinstance(self._client, aioredis.Redis)
        command, function = self._command(name), self.library.function(name)
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for i in todo:
                pipe.execute_command(command, function, len(keys), *keys, *calls[i])
            got = await pipe.execute(raise_on_error=False)
            again = [i for i, r in zip(todo, got, strict=True) if _lacks_function(r) and not attempt]
            for i, reply in zip(todo, got, strict=True):
                replies[i] = reply
            if not again:
                break
            await self.load()
            todo = again
        return replies


class Core:
    """The client, the clock and the script runner every part of the engine shares."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self.clock = ServerClock()
        """Redis's clock: the ``now`` of every transition a caller does not give one."""
        self.functions = Functions(client)
        """How transitions reach Redis (a bench may put another caller of the same two methods here)."""
        self._known_queues: set[str] = set()
        self._announced: dict[str, float] = {}
        self.before_new_queues: Callable[[list[str]], Awaitable[Sequence[str]]] | None = None
        """Called by an enqueue with the queues Redis has no configuration of — new ones, or ones lost
        with Redis's data — before any of their jobs is written; returns those it configured. The relay
        restores their kept settings (Consul) here, so a wiped exclusive queue is exclusive again before
        its next job lands (``docs/relay.md``)."""

    async def now(self) -> int:
        """Redis's clock now (ms): a ``TIME`` round trip at most every :data:`~jqcore.clock.RESYNC_S`."""
        await self.clock.sync(self.client.time)
        return self.clock.now()

    def replica_wait(self, replicas: int | None, timeout_ms: int) -> ReplicaWait:
        """``WAIT`` on the masters a task wrote (:mod:`jqengine.replication`): the relay's check that a
        batch reached the replicas before its offsets are committed."""
        return ReplicaWait(self.client, replicas, timeout_ms)

    async def queues(self) -> list[str]:
        """Every known queue (the queue list), by name."""
        async with codes.redis_errors("queues"):
            return sorted(text(q) for q in await self.client.smembers(QUEUES_KEY))

    async def ping(self) -> None:
        """One ``PING`` (readiness checks: does Redis answer this client)."""
        await self.client.ping()

    async def aclose(self) -> None:
        """Close the engine's Redis client (a process that made the engine for itself)."""
        await self.client.aclose()

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def keys_for(name: str, queue: str) -> tuple[str, ...]:
        """The keys of script ``name`` for ``queue``, in its ``KEYS`` order: made once per (script, queue)
        (~20 names formatted, ~10 µs, on every call before)."""
        return tuple(QueueKeys(queue).for_script(cast("tuple[KeyName, ...]", SCRIPTS[name].keys)))

    async def run(self, name: str, queue: str, args: Sequence[Any], now: int | None) -> Any:
        """Script ``name`` on ``queue``'s keys (:meth:`run_script`)."""
        return await self.run_script(name, self.keys_for(name, queue), args, now)

    async def run_script(self, name: str, keys: Sequence[str], args: Sequence[Any], now: int | None) -> Any:
        """One script call (``now`` first in ``ARGV``), timed and counted; Redis errors mapped. For the
        modules of :mod:`jqengine` (queue transitions here, graph ones in :mod:`~jqengine.graphs`)."""
        started = time.perf_counter()
        outcome = "ok"
        if keys:
            note_write(keys[0])  # every key of a script shares its slot
        try:
            async with codes.redis_errors(name):
                return await self.functions.call(name, keys, [now or await self.now(), *args])
        except Exception:
            outcome = "error"
            raise
        finally:
            metrics.child(metrics.SCRIPT_CALLS, name, outcome).inc()
            metrics.child(metrics.SCRIPT_TIME, name).observe(time.perf_counter() - started)

    def unannounced(self, queues: Iterable[str]) -> list[str]:
        """The queues of a write that :meth:`announce` must list first: those this engine has not announced
        in the last :data:`ANNOUNCE_EVERY_S`. The others are written without it (``enqueue_batch.lua``
        without its switches argument) and the race with :meth:`set_switch` stays closed: such a queue was
        listed before, so a switch set since reached it through the list; and the script creates no queue
        there — a queue whose configuration is gone (Redis lost it, or it was deleted) is answered
        ``UNANNOUNCED`` with nothing written, and announced then. Announcing again after a while lists
        again a queue whose entry was lost while its configuration was not (in a Cluster they live in
        different slots), as announcing every batch did."""
        since = time.monotonic() - ANNOUNCE_EVERY_S
        return [q for q in queues if self._announced.get(q, since) <= since]

    async def announce(self, queues: Sequence[str]) -> list[Switch]:
        """Before writing jobs to ``queues``: list them in the queue list, then read the kill switches in
        force. The order closes a race with :meth:`set_switch`, which writes the switch first and then
        rewrites every listed queue: either the switch is read here (and a queue the write creates starts
        with it), or the queue was listed when the switch went looking for it. One round trip (a
        pipeline, in order; its errors mapped as any: :func:`codes.server_reply`). With
        :attr:`before_new_queues` set, the same round trip asks which queues Redis has a configuration
        of; the others are handed to it first, and those it configured get the switches in force and the
        kinds' defaults (:meth:`register`) before their first job — a configured queue is no longer
        created by the enqueue, which is where a new queue gets them otherwise. The hook may put back kill
        switches Redis lost (:meth:`jqengine.admin.Admin.restore_switches`, after the read above): they
        reach these queues as a switch set now would — the queues are listed already, and the restore
        rewrites every listed queue's list."""
        hook = self.before_new_queues
        async with codes.redis_errors("register"):
            note_write(QUEUES_KEY)
            pipe = self.client.pipeline(transaction=False)
            pipe.sadd(QUEUES_KEY, *queues)
            pipe.hgetall(SWITCHES_KEY)
            if hook is not None:
                for queue in queues:
                    pipe.hexists(QueueKeys(queue).config, "created_at")
            _, raw, *present = await pipe.execute()
        at = time.monotonic()
        self._announced.update((q, at) for q in queues)
        unknown = [q for q, known in zip(queues, present, strict=False) if not known]
        if hook is not None and unknown:
            configured = list(await hook(unknown))
            await self.register(configured, again=configured)
        return switches_of(raw)

    async def register(self, queues: Iterable[str], again: Iterable[str] = ()) -> None:
        """Add queues to the queue list once per engine; ``again``: queues whose configuration the write
        just created (new to Redis — or Redis lost everything since): registered whatever was known."""
        self._known_queues.difference_update(again)
        new = [q for q in queues if q not in self._known_queues]
        if not new:
            return
        async with codes.redis_errors("register"):  # Redis away here is an outage, not a refusing queue
            note_write(QUEUES_KEY)
            await self.client.sadd(QUEUES_KEY, *new)
            defaults = await self.client.hgetall(KINDS_KEY)
            switches = switches_of(await self.client.hgetall(SWITCHES_KEY))
        for queue in new:
            # a kind configured for this queue already (before its first job created the queue's
            # configuration) keeps its own options: the defaults only fill in the kinds it lacks
            own = {text(f).rpartition("|")[0] for f in await self.client.hkeys(QueueKeys(queue).kinds)}
            for kind, options in _kind_defaults(defaults).items():
                if kind not in own:
                    await self.configure_kind_in(queue, kind, options)
            if switches:  # the kill switches in force reach a queue that did not exist when they were set
                await self.run("switch_lift", queue, [queue_list(queue, switches), "", 0], None)
        self._known_queues.update(new)

    async def configure_kind_in(self, queue: str, kind: str, options: Mapping[str, Any]) -> None:
        names = ("limit", "attempts", "delivery", "prio", "noresult")
        args = [kind, *("" if options.get(n) is None else options[n] for n in names)]
        await self.run("configure_kind", queue, args, None)


def _encode_kind(options: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={'' if v is None else v}" for k, v in options.items())


def _kind_defaults(raw: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind, encoded in raw.items():
        parts = dict(p.split("=", 1) for p in text(encoded).split(","))
        out[text(kind)] = {k: (v or None) for k, v in parts.items()}
    return out


class Part:
    """A part of the engine: what it does, over the core it shares with the others."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._client = core.client
