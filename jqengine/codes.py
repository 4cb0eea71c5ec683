"""Script return codes and the errors they raise.

:class:`Code` mirrors the ``C_*`` constants of ``lua/_base.lua``, one meaning per number
(``tests/state/test_lua_contract.py`` holds the two equal). :mod:`jqengine.replies` turns whole
replies into typed values using it; :func:`check` raises for a refused single-job write, and
:func:`redis_errors` maps Redis failures to jobq errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import IntEnum

from redis.exceptions import ClusterDownError, OutOfMemoryError, ReadOnlyError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.errors import BackendUnavailable, JobqError

__all__ = [
    "SERVER_STATES",
    "Code",
    "FenceRejected",
    "FilterInvalid",
    "JobNotFound",
    "QueueConfigInvalid",
    "RedisMemoryFull",
    "ResultTooLarge",
    "StaleLease",
    "SwitchInvalid",
    "SwitchNotFound",
    "SwitchesFull",
    "check",
    "redis_errors",
    "refused_by_script",
    "server_reply",
]


class Code(IntEnum):
    """A Lua script's return code (``C_<NAME>`` in ``lua/_base.lua``)."""

    OK = 1
    """Done as asked."""
    STALE = 0
    """The attempt/token no longer owns the job (a late or lost worker)."""
    MISSING = -1
    """No such job."""
    FINAL = -2
    """The job is already in a terminal state: nothing changed."""
    FENCE_STALE = -3
    """The writer's fence is older than the newest seen (a deposed relay)."""
    CANCELED = -4
    """The job ended canceled while it ran (a cancel was requested, or its handler canceled it)."""
    PAUSED = -5
    """The queue is paused: nothing claimed."""
    FILTER_UNKNOWN = -6
    """A claim filters on a meta key the queue does not index."""
    ERRORED = 2
    """The job ended errored (the dead-letter list) instead of running again."""
    FLAGGED = 3
    """A running job was flagged for cancellation (its worker stops it)."""
    TOMBSTONED = 4
    """An id not in Redis yet: a canceled record waits for it."""
    RETRY = 5
    """A failed attempt is retried later."""
    RUNNING = 6
    """The graph is still running (a retry needs a finished graph)."""
    UNANNOUNCED = -7
    """A write to a queue with no configuration that the caller did not announce: nothing written."""


class StaleLease(JobqError):
    """The write names an attempt or lease token that no longer owns the job (a late or lost worker)."""

    code = "lease_stale"
    http_status = 409


class JobNotFound(JobqError):
    """No job with this id in the queue (never enqueued, or removed by GC)."""

    code = "job_not_found"
    http_status = 404


class FenceRejected(JobqError):
    """A relay write carried a fence older than the newest one seen: the writer was deposed."""

    code = "fence_stale"
    http_status = 409

    def __init__(self, source: str, fence: int, newest: int) -> None:
        super().__init__(f"fence {fence} for {source!r} is older than {newest}")
        self.source, self.fence, self.newest = source, fence, newest


class QueueConfigInvalid(JobqError):
    """A queue or job-type configuration value is not acceptable."""

    code = "queue_config_invalid"
    http_status = 400


class SwitchInvalid(QueueConfigInvalid):
    """A kill switch that cannot be put in force as given (bad name, action, glob, kind or meta)."""

    code = "switch_invalid"


class SwitchNotFound(JobqError):
    """No kill switch of that name is in force."""

    code = "switch_not_found"
    http_status = 404


class ResultTooLarge(JobqError):
    """A job's result is larger than the engine keeps (``MAX_RESULT_BYTES``): nothing was changed."""

    code = "result_too_large"
    http_status = 413


class SwitchesFull(JobqError):
    """No room for another kill switch: the total, or the ones on one queue (or glob), are at their cap."""

    code = "switches_full"
    http_status = 409


class FilterInvalid(JobqError):
    """A claim filters on a meta key the queue does not index (not among its ``filter_keys``)."""

    code = "filter_key_not_indexed"
    http_status = 400


class RedisMemoryFull(BackendUnavailable):
    """Redis refused a write at maxmemory (noeviction); nothing was changed. Retry later."""

    code = "redis_memory_full"
    http_status = 503


def check(code: int, job_id: str, what: str) -> None:
    """Raise for a single-job write the script refused (:class:`StaleLease`, :class:`JobNotFound`)."""
    if code == Code.STALE:
        raise StaleLease(f"{what} {job_id}: stale attempt or lease token")
    if code == Code.MISSING:
        raise JobNotFound(f"{what} {job_id}: no such job")


SERVER_STATES = (
    "MISCONF",
    "READONLY",
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOREPLICAS",
)
"""Error prefixes of a Redis that refuses every write for a while, whatever the job: its disk failed the AOF
or an RDB save (MISCONF — found by the fault suite: the relay used to park every job of a full-disk Redis
in ``<topic>.retry``), a replica or a master mid-failover, a dataset loading, a busy script, a cluster
without quorum."""

_SERVER_STATE_ERRORS = (ReadOnlyError, TryAgainError, ClusterDownError)
"""The same states as redis-py raises them: it gives READONLY, TRYAGAIN, CLUSTERDOWN and MASTERDOWN replies
classes of their own and strips the prefix from their text (so :data:`SERVER_STATES` cannot see them)."""


def server_reply(exc: ResponseError) -> str:
    """The error Redis answered: redis-py puts ``Command # 2 (…) of pipeline caused error: `` (and, for a
    single Redis, the repr of the error's arguments: ``('MISCONF …',)``) before it when the command was
    one of a pipeline's."""
    text = str(exc)
    if _PIPELINE_ERROR not in text:
        return text
    return text.split(_PIPELINE_ERROR, 1)[1].lstrip("(\"' ")


_PIPELINE_ERROR = "caused error: "


def refused_by_script(exc: BaseException) -> bool:
    """A script ran and failed on what it found — a key of the wrong type, a record Lua cannot read (Redis
    ends such a reply with ``script: <function>, on @user_function:<line>.``, ``… @user_script:<line>.``
    for a script sent by ``EVALSHA``): the data of the keys it was given refuses the write, and only those.
    Anything else Redis answers (an ACL refusal, a reply redis-py wraps or names, a command it does not
    know, a function Redis lacks) says nothing about the data: not this."""
    if type(exc) is not ResponseError:
        return False
    reply = server_reply(exc)
    return "@user_function:" in reply or "@user_script:" in reply


@asynccontextmanager
async def redis_errors(script: str) -> AsyncIterator[None]:
    """Map Redis failures: OOM → :class:`RedisMemoryFull`; connection trouble, and a server refusing every
    write for a while (:data:`SERVER_STATES`) → BackendUnavailable (retriable: the relay waits, it does not
    set the jobs aside)."""
    try:
        yield
    except OutOfMemoryError as exc:
        raise RedisMemoryFull(f"{script}: {exc}") from exc
    except _SERVER_STATE_ERRORS as exc:
        raise BackendUnavailable(f"{script}: Redis refuses writes for now: {exc}") from exc
    except ResponseError as exc:
        reply = server_reply(exc)
        if reply.startswith("OOM"):
            raise RedisMemoryFull(f"{script}: {exc}") from exc
        if reply.startswith(SERVER_STATES):
            raise BackendUnavailable(f"{script}: Redis refuses writes for now: {exc}") from exc
        raise
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise BackendUnavailable(f"{script}: Redis unreachable: {exc}") from exc
