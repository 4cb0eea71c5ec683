"""Admin reads: a job by id, depths per state and by filter (any number of pairs), the dead-letter list,
queue config.

Reads change nothing, so they are plain commands (pipelined on the queue's slot), not scripts. Callers
outside ``jqengine`` use them as :class:`~jqengine.engine.Engine` methods.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jqcore.clock import now_ms
from jqcore.events import DEFAULTS
from jqengine import farreads
from jqengine.codes import FilterInvalid
from jqengine.keys import KINDS_KEY, QueueKeys
from jqengine.models import JobInfo, QueueConfig, QueueDepth, StreamEvent
from jqengine.redisconn import RedisClient, text

__all__ = [
    "dead_counts",
    "dead_list",
    "depth",
    "far_jobs",
    "get_job",
    "get_jobs",
    "kinds",
    "past_due",
    "queue_config",
    "queue_stats",
    "queues_holding",
]


def _opt(value: Any) -> str | None:
    return None if value is None else text(value)


def _b(value: Any) -> bytes | None:
    return value if isinstance(value, bytes) else None


def _i(value: Any) -> int | None:
    said = _opt(value)
    return int(said) if said not in (None, "") else None


async def get_job(client: RedisClient, queue: str, job_id: str) -> JobInfo | None:
    """The job's state, attempts with their errors, timestamps, result; None once GC removed it. A
    far-future job (its record in the schedule topic) is ``scheduled`` with its ``run_at``."""
    keys = QueueKeys(queue)
    found = _job_info(queue, job_id, await client.hgetall(keys.job(job_id)))
    if found is None:
        run_at = await farreads.far_run_at(client, queue, job_id)
        if run_at is not None:
            return _scheduled(queue, job_id, run_at)
    return found


def _scheduled(queue: str, job_id: str, run_at: int) -> JobInfo:
    return JobInfo(
        id=job_id,
        queue=queue,
        state="scheduled",
        kind=None,
        attempt=0,
        max_attempts=None,
        version=0,
        priority=None,
        enqueued_at=None,
        run_at=run_at,
        started_at=None,
        finished_at=None,
        lease_deadline=None,
        reason=None,
        last_error=None,
        result=None,
        cancel_requested=False,
        history=[],
    )


async def get_jobs(
    client: RedisClient, queue: str, ids: Sequence[str], chunk: int = 1000
) -> list[JobInfo | None]:
    """Many jobs of one queue, one pipelined round trip per ``chunk`` ids."""
    keys, out = QueueKeys(queue), []
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        pipe = client.pipeline(transaction=False)
        for job_id in part:
            pipe.hgetall(keys.job(job_id))
        out += [_job_info(queue, j, raw) for j, raw in zip(part, await pipe.execute(), strict=True)]
    return out


async def far_jobs(client: RedisClient, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
    """Far-future jobs of one queue by id (``scheduled`` with their ``run_at``; their records are in the
    schedule topic, so no kind or args), one pipelined round trip; None for an id not in the tier."""
    if not ids:
        return []
    found = await farreads.far_run_ats(client, queue, ids)
    return [
        None if run_at is None else _scheduled(queue, job_id, run_at)
        for job_id, run_at in zip(ids, found, strict=True)
    ]


async def queues_holding(
    client: RedisClient, queues: Sequence[str], job_id: str, chunk: int = 1000
) -> list[str]:
    """The queues (of ``queues``) that hold a job ``job_id``, one pipelined round trip per ``chunk``."""
    out: list[str] = []
    for i in range(0, len(queues), chunk):
        part = queues[i : i + chunk]
        pipe = client.pipeline(transaction=False)
        for queue in part:
            pipe.exists(QueueKeys(queue).job(job_id))
        out += [q for q, n in zip(part, await pipe.execute(), strict=True) if n]
    return out


def _job_info(queue: str, job_id: str, raw: Mapping[Any, Any]) -> JobInfo | None:
    if not raw:
        return None
    h = {_opt(k) or "": v for k, v in raw.items()}
    return JobInfo(
        id=job_id,
        queue=queue,
        state=_opt(h.get("state")) or "unknown",
        kind=_opt(h.get("kind")),
        attempt=_i(h.get("attempt")) or 0,
        max_attempts=_i(h.get("max_attempts")),
        version=_i(h.get("version")) or 0,
        priority=_i(h.get("prio")),
        enqueued_at=_i(h.get("enqueued_at")),
        run_at=_i(h.get("run_at")),
        started_at=_i(h.get("started_at")),
        finished_at=_i(h.get("finished_at")),
        lease_deadline=_i(h.get("lease_deadline")) if _opt(h.get("state")) == "running" else None,
        reason=_opt(h.get("reason")),
        last_error=_opt(h.get("last_error")),
        result=_opt(h.get("result")),
        cancel_requested=_opt(h.get("cancel")) == "1",
        history=_history(h.get("history")),
        envelope=_b(h.get("env")),
        origin=_opt(h.get("origin")) or None,
        worker=_opt(h.get("worker")) or None,
        duplicates=_i(h.get("dups")) or 0,
        last_duplicate_at=_i(h.get("dup_at")),
        handed_back_since=_i(h.get("unhandled_since")) if _opt(h.get("state")) == "delayed" else None,
        tail=_link(h.get("tail")),
        tail_of=_link(h.get("parent")),
    )


def _link(value: Any) -> str | None:
    """A tail call's link (``<queue>\t<id>``) as ``<queue>/<id>``."""
    return (_opt(value) or "").replace("\t", "/", 1) or None


def _history(raw: Any) -> list[dict[str, Any]]:
    said = _opt(raw)
    if not said:
        return []
    loaded = json.loads(said)
    if not isinstance(loaded, list):
        return []
    # the lease token of a finished write is kept for idempotent retries (Lua's acked()); never shown
    return [
        {k: v for k, v in h.items() if k not in ("token", "after")} for h in loaded if isinstance(h, dict)
    ]


async def depth(
    client: RedisClient, queue: str, filter: Mapping[str, str] | None = None, *, now: int | None = None
) -> QueueDepth:
    """Jobs per state; ``by_filter``: the pending jobs having every ``meta`` pair of ``filter`` (any number
    of declared pairs), counted in Redis: ZCARD of one pair's index, ZINTERCARD of several (exact; it
    costs the smallest index times the pairs). Raises :class:`FilterInvalid` for a key the queue does
    not index, as a claim does."""
    keys = QueueKeys(queue)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.ready)
    pipe.zcard(keys.delayed)
    pipe.zcard(keys.running)
    pipe.hget(keys.counts, "blocked")
    pipe.zcard(keys.dead)
    pipe.zcard(keys.done)
    pipe.zrange(keys.ready, 0, 0)
    indexes = [keys.index(k, v) for k, v in sorted((filter or {}).items())]
    if indexes:
        pipe.hget(keys.config, "filter_keys")
        if len(indexes) == 1:
            pipe.zcard(indexes[0])
        else:
            pipe.zintercard(len(indexes), indexes)
    res = await pipe.execute()
    if indexes:
        declared = set((_opt(res[7]) or "").split(","))
        if missing := sorted(set(filter or {}) - declared):
            raise FilterInvalid(
                f"queue {queue!r} does not index meta key {missing[0]!r}; declare it in the queue's"
                " filter_keys to count by it"
            )
    oldest = None
    if res[6]:  # since the head became due (its run_at, else its enqueue), as jqengine.signals measures
        stamps = await client.hmget(keys.job(_opt(res[6][0]) or ""), ["enqueued_at", "run_at"])
        due = [v for v in (_i(x) for x in stamps) if v is not None]
        oldest = (now or now_ms()) - max(due) if due else None
    return QueueDepth(
        pending=int(res[0]),
        delayed=int(res[1]),
        running=int(res[2]),
        blocked=max(0, _i(res[3]) or 0),
        errored=int(res[4]),
        finished=int(res[5]) - int(res[4]),
        oldest_pending_age_ms=oldest,
        by_filter=int(res[8]) if indexes else None,
        far=await farreads.far_count(client, queue),
    )


async def past_due(client: RedisClient, queue: str, late_ms: int, now: int | None = None) -> int:
    """Jobs the timers should have moved more than ``late_ms`` ago: delayed jobs past their ``run_at``
    and running jobs past their lease deadline (non-zero for long: no scheduler keeps this queue)."""
    keys = QueueKeys(queue)
    before = (now or now_ms()) - late_ms
    pipe = client.pipeline(transaction=False)
    pipe.zcount(keys.delayed, "-inf", before)
    pipe.zcount(keys.running, "-inf", before)
    delayed, running = await pipe.execute()
    return int(delayed) + int(running)


LISTED = {
    "pending": "ready",
    "delayed": "delayed",
    "far": "far",
    "running": "running",
    "done": "done",
    "dead": "dead",
}
"""The states whose jobs can be listed, and the key each lives in: a ZSET, but ``far``'s is a HASH (``done``:
completed, canceled, expired and errored jobs until GC; ``dead``: the errored ones)."""


async def list_ids(
    client: RedisClient, queue: str, state: str, offset: int = 0, limit: int = 100, *, newest: bool = False
) -> tuple[list[str], int]:
    """Job ids of one listed state in the ZSET's order (pending: priority; delayed: run_at; running: lease
    deadline; done: GC time; dead: death time), ``newest`` reversed, and how many there are in all. The
    far-future index is a HASH: its ids come in no order (``newest`` ignored), each page sorted by
    ``run_at``; a page at ``offset`` scans the ``offset`` entries before it."""
    key = getattr(QueueKeys(queue), LISTED[state])
    if state == "far":
        return await farreads.far_ids(client, queue, offset, limit)
    pipe = client.pipeline(transaction=False)
    if newest:
        pipe.zrevrange(key, offset, offset + limit - 1)
    else:
        pipe.zrange(key, offset, offset + limit - 1)
    pipe.zcard(key)
    ids, total = await pipe.execute()
    return [_opt(i) or "" for i in ids], int(total)


async def dead_counts(client: RedisClient, queues: Sequence[str], chunk: int = 1000) -> dict[str, int]:
    """Errored jobs per queue, one pipelined round trip per ``chunk`` queues."""
    out: dict[str, int] = {}
    for i in range(0, len(queues), chunk):
        part = queues[i : i + chunk]
        pipe = client.pipeline(transaction=False)
        for queue in part:
            pipe.zcard(QueueKeys(queue).dead)
        out.update(zip(part, (int(n) for n in await pipe.execute()), strict=True))
    return out


async def dead_list(client: RedisClient, queue: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
    """Errored jobs, oldest first."""
    ids = await client.zrange(QueueKeys(queue).dead, offset, offset + limit - 1)
    jobs = [await get_job(client, queue, _opt(i) or "") for i in ids]
    return [j for j in jobs if j is not None]


async def queue_config(client: RedisClient, queue: str) -> QueueConfig:
    raw = {_opt(k): _opt(v) for k, v in (await client.hgetall(QueueKeys(queue).config)).items()}
    base = QueueConfig()
    return QueueConfig(
        mode="exclusive" if raw.get("mode") == "exclusive" else "simple",
        excl_key=raw.get("excl_key") or None,
        lease_ms=int(raw.get("lease_ms") or base.lease_ms),
        max_attempts=int(raw.get("max_attempts") or base.max_attempts),
        filter_keys=tuple(k for k in (raw.get("filter_keys") or "").split(",") if k),
        paused=raw.get("paused") == "1",
        retention_ms=int(raw.get("retention_ms") or base.retention_ms),
        dead_retention_ms=int(raw.get("dead_retention_ms") or base.dead_retention_ms),
        dedup="finished" if raw.get("dedup") == "finished" else "active",
        dedup_window_ms=int(raw.get("dedup_window_ms") or base.dedup_window_ms),
        id_from="content" if raw.get("id_from") == "content" else "random",
        events_cap=int(raw.get("events_cap") or base.events_cap),
        fair_key=raw.get("fair_key") or None,
        fair_weights=orjson.loads(raw.get("fair_weights") or "{}"),
        fair_limits=orjson.loads(raw.get("fair_limits") or "{}"),
        fair_rates=orjson.loads(raw.get("fair_rates") or "{}"),
        memory_budget=int(raw.get("memory_budget") or 0),
        default_delay_ms=int(raw.get("default_delay_ms") or 0),
        enqueue_blocked=raw.get("enqueue_blocked") == "1",
    )


async def configured(client: RedisClient, queues: list[str]) -> set[str]:
    """Which of ``queues`` have a configuration in Redis (set by ``configure_queue``; a queue a job
    created has only defaults)."""
    return {q for q in queues if await client.hexists(QueueKeys(q).config, "mode")}


async def stream_events(client: RedisClient, key: str, count: int) -> list[StreamEvent]:
    """The oldest ``count`` entries of a task graph's events stream (one event each)."""
    out: list[StreamEvent] = []
    for entry, fields in await client.xrange(key, count=count) or []:
        out.extend(decode_entry(entry, fields or {}))
    return out


def decode_entry(entry: Any, fields: Mapping[Any, Any] | Sequence[Any], queue: str = "") -> list[StreamEvent]:
    """The events of one stream entry: ``n <count> e <JSON array>`` a script call's (``_frame.lua``),
    each with only the fields that apply: completed here from :data:`jqcore.events.DEFAULTS` and ``queue``
    (the stream's); ``i <id> e <JSON>`` one with every field of the schema (a graph's stream, and a queue's
    written before its calls' single events became arrays of one). ``fields`` as XRANGE gives them: a
    mapping (redis-py) or the flat list a script returns."""
    if not isinstance(fields, Mapping):
        fields = dict(zip(fields[::2], fields[1::2], strict=True))
    f = {_opt(k): v for k, v in fields.items()}
    entry_id, value = _opt(entry) or "", _b(f.get("e")) or b""
    if f.get("n") is None:
        return [StreamEvent(entry_id, _opt(f.get("i")) or "", value)]
    base = {**DEFAULTS, "queue": queue}
    return [
        StreamEvent(entry_id, str(event.get("id", "")), None, {**base, **event})
        for event in orjson.loads(value)
    ]


async def trim_stream(client: RedisClient, key: str, upto: str) -> int:
    """Drop the entries of a graph's events stream up to ``upto`` inclusive (exactly: ``MINID`` of the
    next id)."""
    return int(await client.xtrim(key, minid=next_entry(upto), approximate=False))


def next_entry(entry: str) -> str:
    """The stream entry id right after ``entry`` (what ``MINID`` keeps first when trimming up to it)."""
    ms, _, seq = entry.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


async def events_backlog(client: RedisClient, queues: Sequence[str]) -> dict[str, int]:
    """Events waiting to be shipped, per queue (stats ``events_waiting``; a stream written before it was
    counted: its length)."""
    out = {}
    for queue in queues:
        keys = QueueKeys(queue)
        waiting = await client.hget(keys.stats, "events_waiting")
        out[queue] = int(waiting) if waiting is not None else int(await client.xlen(keys.events))
    return out


async def queue_stats(client: RedisClient, queue: str) -> dict[str, int]:
    """The queue's lifetime counters (enqueued, duplicates, claimed, completed, errored, canceled, ...)."""
    raw = await client.hgetall(QueueKeys(queue).stats)
    return {(_opt(k) or ""): int(v) for k, v in raw.items()}


def _kind_options(fields: Mapping[str, str | None]) -> dict[str, Any]:
    limit, attempts = fields.get("limit"), fields.get("attempts")
    return {
        "concurrency": int(limit) if limit else None,
        "max_attempts": int(attempts) if attempts else None,
        "delivery": fields.get("delivery") or "at_least_once",
        "priority": int(prio) if (prio := fields.get("prio")) else None,
        "ignore_result": fields.get("noresult") == "1",
    }


async def kinds(client: RedisClient, queues: list[str]) -> dict[str, dict[str, Any]]:
    """Every configured job type: its defaults for every queue (``defaults``, None when it was only set
    for some queues) and, per queue where it has options, those options and how many of it run now."""
    out: dict[str, dict[str, Any]] = {}
    for kind, encoded in (await client.hgetall(KINDS_KEY)).items():
        parts = dict(p.split("=", 1) for p in (_opt(encoded) or "").split(",") if "=" in p)
        out[_opt(kind) or ""] = {"defaults": _kind_options(parts), "queues": {}}
    for queue in queues:
        keys = QueueKeys(queue)
        per_kind: dict[str, dict[str, str | None]] = {}
        for field, value in (await client.hgetall(keys.kinds)).items():
            kind, _, name = (_opt(field) or "").rpartition("|")
            per_kind.setdefault(kind, {})[name] = _opt(value)
        running = {_opt(k) or "": int(v) for k, v in (await client.hgetall(keys.kindrun)).items()}
        for kind, fields in per_kind.items():
            entry = out.setdefault(kind, {"defaults": None, "queues": {}})
            entry["queues"][queue] = {**_kind_options(fields), "running": max(0, running.get(kind, 0))}
    return out
