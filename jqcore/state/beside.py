"""What the services keep in the engine's Redis beside the queues: stage counters, idempotency keys,
presence heartbeats, the far tier's scan markers, the push-dispatch configurations (and the leases a
dispatcher watches). Small helpers, so that no service needs the engine's
raw client (the keys themselves are named in :mod:`jqcore.keys`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from jqcore import stages
from jqcore.keys import DISPATCH_KEY
from jqcore.presence import Presence, seen
from jqcore.state import codes
from jqcore.state.core import EngineCore, _s
from jqcore.state.keys import QueueKeys, far_scanned_key, far_scanning_key, idempotency_key
from jqcore.state.models import JobLease

__all__ = ["BesideQueues"]


class BesideQueues(EngineCore):
    """Helpers over non-queue keys (a part of :class:`jqcore.state.Engine`)."""

    async def add_stage_counts(self, topic: str, counts: Mapping[str, int]) -> None:
        """Add to a topic's shared pipeline-stage counters (:mod:`jqcore.stages`)."""
        await stages.add(self._client, topic, counts)

    async def remember_idempotency(self, digest: str, body_hash: str, ttl_s: int) -> str | None:
        """Store ``body_hash`` under an idempotency key unless one is there: None when stored, else the
        body hash stored before (None too if it expired in between)."""
        if await self._client.set(idempotency_key(digest), body_hash, nx=True, ex=ttl_s):
            return None
        previous = await self._client.get(idempotency_key(digest))
        return previous.decode() if isinstance(previous, bytes) else previous

    def presence(self, role: str, name: str) -> Presence:
        """A presence heartbeat (:class:`jqcore.presence.Presence`) in this engine's Redis."""
        return Presence(self._client, role, name)

    async def saw(self, role: str, name: str) -> None:
        """A heartbeat noted for someone else (:func:`jqcore.presence.seen`: an HTTP worker's claim)."""
        await seen(self._client, role, name)

    async def far_unscanned(self, topic: str, partitions: Sequence[int]) -> list[int]:
        """The schedule topic's ``partitions`` whose marker is missing: Redis lost their index entries
        (or nobody wrote them yet)."""
        pipe = self._client.pipeline(transaction=False)
        for p in partitions:
            pipe.exists(far_scanned_key(topic, p))
        return [p for p, found in zip(partitions, await pipe.execute(), strict=True) if not found]

    async def begin_far_scan(self, topic: str, partitions: Sequence[int]) -> None:
        """The index entries of the schedule topic's ``partitions`` are being written (see
        :meth:`mark_far_scanned`)."""
        pipe = self._client.pipeline(transaction=False)
        for p in partitions:
            pipe.set(far_scanning_key(topic, p), "1")
        await pipe.execute()

    async def mark_far_scanned(self, topic: str, partitions: Sequence[int], at_ms: int) -> bool:
        """Record that the index entries of the schedule topic's ``partitions`` are all written (at
        ``at_ms``) — each only if the mark of the writing's start survived: a Redis lost (or flushed)
        meanwhile took it with the entries written so far, and they must be written again. True when all
        were marked."""
        pipe = self._client.pipeline(transaction=False)
        for p in partitions:
            pipe.getdel(far_scanning_key(topic, p))
        began = await pipe.execute()
        pipe = self._client.pipeline(transaction=False)
        for p, mark in zip(partitions, began, strict=True):
            if mark is not None:
                pipe.set(far_scanned_key(topic, p), str(at_ms))
        await pipe.execute()
        return all(mark is not None for mark in began)

    async def set_dispatch(self, kind: str, stored: str | None) -> None:
        """Store a kind's push-dispatch configuration (``jqcore.dispatch.DispatchConfig.stored``); None
        removes it (the kind's jobs are for worker pools again)."""
        async with codes.redis_errors("dispatch"):
            if stored is None:
                await self._client.hdel(DISPATCH_KEY, kind)
            else:
                await self._client.hset(DISPATCH_KEY, kind, stored)

    async def dispatch_configs(self) -> dict[str, str]:
        """Every stored push-dispatch configuration: kind → its JSON."""
        async with codes.redis_errors("dispatch"):
            raw = await self._client.hgetall(DISPATCH_KEY)
        return {_s(k): _s(v) for k, v in raw.items()}

    async def leases(self, queue: str, ids: Sequence[str]) -> list[JobLease | None]:
        """Each job's state, attempt, kind and lease token (None: no such job), one pipelined round trip.
        A job not running has the token its current attempt wrote its outcome with ('' if none): a write
        sent again with it is answered as the first time (the scripts' idempotent retries)."""
        if not ids:
            return []
        keys = QueueKeys(queue)
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(keys.job(job_id), "state", "attempt", "token", "kind", "history")
        async with codes.redis_errors("leases"):
            rows = await pipe.execute()
        out: list[JobLease | None] = []
        for state, attempt, token, kind, history in rows:
            if state is None:
                out.append(None)
                continue
            n = int(attempt or 0)
            owner = _s(token) if token else _written_by(history, n)
            out.append(JobLease(_s(state), n, owner, _s(kind or b"")))
        return out

    async def aclose(self) -> None:
        """Close the engine's Redis client (a process that made the engine for itself)."""
        await self._client.aclose()


def _written_by(history: bytes | str | None, attempt: int) -> str:
    """The lease token attempt ``attempt`` wrote its outcome with, from the job's history ('' if none)."""
    try:
        entries = orjson.loads(history or b"[]")
    except orjson.JSONDecodeError:
        return ""
    for entry in reversed(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict) and entry.get("attempt") == attempt and entry.get("token"):
            return str(entry["token"])
    return ""
