"""The one place where script return codes and Redis errors become jobq exceptions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.errors import BackendUnavailable, JobqError

__all__ = [
    "CANCELED",
    "FENCE_STALE",
    "FILTER_UNKNOWN",
    "MISSING",
    "OK",
    "PAUSED",
    "STALE",
    "FenceRejected",
    "FilterInvalid",
    "JobNotFound",
    "QueueConfigInvalid",
    "RedisMemoryFull",
    "StaleLease",
    "check",
    "redis_errors",
]

OK, STALE, MISSING, FENCE_STALE, CANCELED, PAUSED, FILTER_UNKNOWN = 1, 0, -1, -3, -4, -5, -6


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


class FilterInvalid(JobqError):
    """A claim filters on a meta key the queue does not index (not among its ``filter_keys``)."""

    code = "filter_key_not_indexed"
    http_status = 400


class RedisMemoryFull(BackendUnavailable):
    """Redis refused a write at maxmemory (noeviction); nothing was changed. Retry later."""

    code = "redis_memory_full"
    http_status = 503


def check(code: int, job_id: str, what: str) -> None:
    """Raise for a single-job script's failure code."""
    if code == STALE:
        raise StaleLease(f"{what} {job_id}: stale attempt or lease token")
    if code == MISSING:
        raise JobNotFound(f"{what} {job_id}: no such job")


@asynccontextmanager
async def redis_errors(script: str) -> AsyncIterator[None]:
    """Map Redis failures: OOM → :class:`RedisMemoryFull`; connection trouble → BackendUnavailable."""
    try:
        yield
    except OutOfMemoryError as exc:
        raise RedisMemoryFull(f"{script}: {exc}") from exc
    except ResponseError as exc:
        if str(exc).startswith("OOM"):
            raise RedisMemoryFull(f"{script}: {exc}") from exc
        raise
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise BackendUnavailable(f"{script}: Redis unreachable: {exc}") from exc
