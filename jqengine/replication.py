"""Writes confirmed on replicas: the masters a task wrote (recorded while :func:`recording_writes` is
active) and ``WAIT`` on each of them, so a master that dies next loses nothing its caller relies on.

``WAIT n timeout`` waits for the replication offset of the *connection's own* last write: sent on a
connection that wrote nothing (or long ago) it answers at once and proves nothing — and the engine's
writes go through pools (a Cluster node hands its connections out in turn). So each master gets, on one
connection, a small write first (``SET`` of :func:`~jqengine.keys.synced_key`, in the slot of a key the
task wrote, expiring after a minute) and then ``WAIT``: the master's replication offset only grows, so
the replicas that acknowledged that write hold every earlier write of the master too. Both are pinned to
the node that serves the slot now; a slot that moved (a failover) answers ``MOVED``, which counts as not
confirmed, and the caller writes again.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError

from jqcore.log import get_logger
from jqengine.keys import synced_key
from jqengine.redisconn import RedisClient

__all__ = ["ReplicaWait", "first_step_replicated", "note_write", "recording_writes"]

log = get_logger("jqengine.replication")

RECHECK_S = 5.0
"""How long a master's count of online replicas is trusted (``auto``: whether to wait on it)."""
SYNCED_TTL_MS = 60_000

_WRITES: ContextVar[set[str] | None] = ContextVar("jobq_written_keys", default=None)


@contextmanager
def recording_writes() -> Iterator[set[str]]:
    """While active, the engine adds a key of each script call (and each global write) of this task to
    the set it yields: one per slot written is enough to find the masters. Nested, the outer recording
    gets the inner one's keys too (a relay batch that creates a graph waits on its releases' writes)."""
    written: set[str] = set()
    outer = _WRITES.get()
    token = _WRITES.set(written)
    try:
        yield written
    finally:
        _WRITES.reset(token)
        if outer is not None:
            outer |= written


def note_write(key: str) -> None:
    """The engine wrote in ``key``'s slot (kept only while :func:`recording_writes` is active)."""
    written = _WRITES.get()
    if written is not None:
        written.add(key)


def _online(info: dict[str, Any]) -> int:
    """Replicas that ``INFO replication`` lists as ``online`` (one still in its first sync cannot
    acknowledge yet, and holds nothing it could take over with)."""
    return sum(
        1
        for k, v in info.items()
        if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
    )


@dataclass(frozen=True)
class _Master:
    name: str
    key: str
    node: ClusterNode | None  # None: the single Redis


class ReplicaWait:
    """``WAIT`` on each master of a set of written keys. ``replicas``: how many replicas must hold the
    writes; None (``auto``): 1 on each master that reports an online replica (checked every
    :data:`RECHECK_S`), none elsewhere; 0: off."""

    def __init__(self, client: RedisClient, replicas: int | None, timeout_ms: int) -> None:
        self.client, self.replicas, self.timeout_ms = client, replicas, timeout_ms
        self._connected: dict[str, tuple[float, int]] = {}

    async def confirm(self, keys: Iterable[str]) -> str | None:
        """None once every master holding one of ``keys`` has its writes on the required replicas; else
        why not (too few in ``timeout_ms``, a slot that moved, a node that does not answer)."""
        if self.replicas == 0:
            return None
        todo = [(m, need) for m in self._masters(keys) if (need := await self._required(m))]
        if not todo:
            return None
        pipe: Any = self.client.pipeline(transaction=False)
        for m, need in todo:
            pin = {} if m.node is None else {"target_nodes": m.node}
            pipe.execute_command("SET", synced_key(m.key), "1", "PX", SYNCED_TTL_MS, **pin)
            pipe.execute_command("WAIT", need, self.timeout_ms, **pin)
        try:
            if isinstance(self.client, RedisCluster):
                replies = await pipe.execute(raise_on_error=False, allow_redirections=False)
            else:
                replies = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as exc:
            return f"WAIT failed: {exc!r}"
        for i, (m, need) in enumerate(todo):
            wrote, acked = replies[2 * i], replies[2 * i + 1]
            if isinstance(wrote, Exception) or isinstance(acked, Exception):
                return f"{m.name}: {wrote if isinstance(wrote, Exception) else acked!r}"
            if int(acked) < need:
                self._connected.pop(m.name, None)  # look again: a replica may have gone for good
                return f"{m.name}: {acked} of {need} replicas in {self.timeout_ms} ms"
        return None

    def _masters(self, keys: Iterable[str]) -> list[_Master]:
        if not isinstance(self.client, RedisCluster):
            first = next(iter(keys), None)
            return [] if first is None else [_Master("redis", first, None)]
        found: dict[str, _Master] = {}
        for key in keys:
            node = self.client.get_node_from_key(key)
            if node is not None and node.name not in found:
                found[node.name] = _Master(node.name, key, node)
        return list(found.values())

    async def _required(self, m: _Master) -> int:
        if self.replicas is not None:
            return self.replicas
        checked = self._connected.get(m.name)
        if checked is None or time.monotonic() - checked[0] > RECHECK_S:
            try:
                if m.node is None:
                    info: Any = await self.client.info("replication")
                else:
                    info = await self.client.info("replication", target_nodes=m.node)
                    info = next(iter(info.values()), {}) if "role" not in info else info
                connected = _online(info)
            except RedisError:
                connected = 1  # cannot tell: wait, and let WAIT say whether the master answers
            checked = self._connected[m.name] = (time.monotonic(), connected)
        return 1 if checked[1] > 0 else 0


async def first_step_replicated(wait: ReplicaWait | None, written: set[str], step: str, subject: str) -> bool:
    """A cross-slot hand-off (a graph's, a tail call's) may erase the record of its first step — whose
    writes are ``written`` — only once they are on the replicas: else a failover could lose the step and
    the record that would have repaired it. False (logged): keep the record for the repair."""
    if wait is None or not written:
        return True
    why = await wait.confirm(written)
    if why is not None:
        log.warning("hand-off not on the replicas yet: left to the repair", step=step, of=subject, why=why)
    return why is None
