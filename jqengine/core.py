"""The engine's core: its Redis client, its clock, and one door through which every script call passes
(timed, counted, Redis errors mapped). The engine's other parts (:mod:`~jqengine.transitions`,
:mod:`~jqengine.admin`, :mod:`~jqengine.queries`) build on it; :class:`jqengine.Engine`
puts them together."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from jqcore import metrics
from jqcore.clock import ServerClock
from jqengine import codes
from jqengine.keys import KINDS_KEY, QUEUES_KEY, SWITCHES_KEY, KeyName, QueueKeys
from jqengine.redisconn import RedisClient, text
from jqengine.replication import ReplicaWait, note_write
from jqengine.scripts import SCRIPTS, source
from jqengine.switchrules import Switch, queue_list, switch_from_json

__all__ = ["EngineCore", "Triple"]

Triple = tuple[str, int, str]
"""(job id, attempt, lease token): what proves a worker owns a running job."""


class EngineCore:
    """The client, the clock and the script runner every part of the engine shares."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self.clock = ServerClock()
        """Redis's clock: the ``now`` of every transition a caller does not give one."""
        self._scripts = {name: client.register_script(source(name)) for name in SCRIPTS}
        self._known_queues: set[str] = set()
        self.before_new_queues: Callable[[list[str]], Awaitable[Sequence[str]]] | None = None
        """Called by an enqueue with the queues Redis has no configuration of — new ones, or ones lost
        with Redis's data — before any of their jobs is written; returns those it configured. The relay
        restores their kept settings (Consul) here, so a wiped exclusive queue is exclusive again before
        its next job lands (``docs/relay.md``)."""

    async def now(self) -> int:
        """Redis's clock now (ms): a ``TIME`` round trip at most every :data:`~jqcore.clock.RESYNC_S`."""
        await self.clock.sync(self._client.time)
        return self.clock.now()

    def replica_wait(self, replicas: int | None, timeout_ms: int) -> ReplicaWait:
        """``WAIT`` on the masters a task wrote (:mod:`jqengine.replication`): the relay's check that a
        batch reached the replicas before its offsets are committed."""
        return ReplicaWait(self._client, replicas, timeout_ms)

    async def ping(self) -> None:
        """One ``PING`` (readiness checks: does Redis answer this client)."""
        await self._client.ping()

    async def aclose(self) -> None:
        """Close the engine's Redis client (a process that made the engine for itself)."""
        await self._client.aclose()

    @staticmethod
    def _keys(name: str, queue: str) -> list[str]:
        return QueueKeys(queue).for_script(cast("tuple[KeyName, ...]", SCRIPTS[name].keys))

    async def _run(self, name: str, queue: str, args: Sequence[Any], now: int | None) -> Any:
        return await self.run_script(name, self._keys(name, queue), args, now)

    async def run_script(self, name: str, keys: Sequence[str], args: Sequence[Any], now: int | None) -> Any:
        """One script call (``now`` first in ``ARGV``), timed and counted; Redis errors mapped. For the
        modules of :mod:`jqengine` (queue transitions here, graph ones in :mod:`~jqengine.graphs`)."""
        started = time.perf_counter()
        outcome = "ok"
        if keys:
            note_write(keys[0])  # every key of a script shares its slot
        try:
            async with codes.redis_errors(name):
                return await self._scripts[name](keys=keys, args=[now or await self.now(), *args])
        except Exception:
            outcome = "error"
            raise
        finally:
            metrics.child(metrics.SCRIPT_CALLS, name, outcome).inc()
            metrics.child(metrics.SCRIPT_TIME, name).observe(time.perf_counter() - started)

    async def _announce(self, queues: Sequence[str]) -> list[Switch]:
        """Before writing jobs to ``queues``: list them in the queue list, then read the kill switches in
        force. The order closes a race with :meth:`set_switch`, which writes the switch first and then
        rewrites every listed queue: either the switch is read here (and a queue the write creates starts
        with it), or the queue was listed when the switch went looking for it. One round trip (a
        pipeline, in order; its errors mapped as any: :func:`codes.server_reply`). With
        :attr:`before_new_queues` set, the same round trip asks which queues Redis has a configuration
        of; the others are handed to it first, and those it configured get the switches in force and the
        kinds' defaults (:meth:`_register`) before their first job — a configured queue is no longer
        created by the enqueue, which is where a new queue gets them otherwise."""
        hook = self.before_new_queues
        async with codes.redis_errors("register"):
            note_write(QUEUES_KEY)
            pipe = self._client.pipeline(transaction=False)
            pipe.sadd(QUEUES_KEY, *queues)
            pipe.hgetall(SWITCHES_KEY)
            if hook is not None:
                for queue in queues:
                    pipe.hexists(QueueKeys(queue).config, "created_at")
            _, raw, *present = await pipe.execute()
        unknown = [q for q, known in zip(queues, present, strict=False) if not known]
        if hook is not None and unknown:
            configured = list(await hook(unknown))
            await self._register(configured, again=configured)
        return [switch_from_json(v) for v in raw.values()]

    async def _register(self, queues: Iterable[str], again: Iterable[str] = ()) -> None:
        """Add queues to the queue list once per engine; ``again``: queues whose configuration the write
        just created (new to Redis — or Redis lost everything since): registered whatever was known."""
        self._known_queues.difference_update(again)
        new = [q for q in queues if q not in self._known_queues]
        if not new:
            return
        async with codes.redis_errors("register"):  # Redis away here is an outage, not a refusing queue
            note_write(QUEUES_KEY)
            await self._client.sadd(QUEUES_KEY, *new)
            defaults = await self._client.hgetall(KINDS_KEY)
            switches = [switch_from_json(v) for v in (await self._client.hgetall(SWITCHES_KEY)).values()]
        for queue in new:
            # a kind configured for this queue already (before its first job created the queue's
            # configuration) keeps its own options: the defaults only fill in the kinds it lacks
            own = {text(f).rpartition("|")[0] for f in await self._client.hkeys(QueueKeys(queue).kinds)}
            for kind, options in _kind_defaults(defaults).items():
                if kind not in own:
                    await self._configure_kind_in(queue, kind, options)
            if switches:  # the kill switches in force reach a queue that did not exist when they were set
                await self._run("switch_lift", queue, [queue_list(queue, switches), "", 0], None)
        self._known_queues.update(new)

    async def _configure_kind_in(self, queue: str, kind: str, options: Mapping[str, Any]) -> None:
        names = ("limit", "attempts", "delivery", "prio", "noresult")
        args = [kind, *("" if options.get(n) is None else options[n] for n in names)]
        await self._run("configure_kind", queue, args, None)


def _encode_kind(options: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={'' if v is None else v}" for k, v in options.items())


def _kind_defaults(raw: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind, encoded in raw.items():
        parts = dict(p.split("=", 1) for p in text(encoded).split(","))
        out[text(kind)] = {k: (v or None) for k, v in parts.items()}
    return out
