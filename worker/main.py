"""``jobq worker`` / ``python -m worker``: run a pool for an application's registry until a signal.

SIGTERM or SIGINT stops claiming, lets running jobs finish within the grace period and releases the rest
(no attempt spent); a second SIGINT/SIGTERM is a hard stop (nothing written back, leases expire and the
reaper hands the jobs out again). ``--burst`` exits 0 once the queues hold nothing to do.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jqcore import metrics
from jqcore.errors import ConfigError
from jqcore.lifecycle import run_until_signal
from jqcore.log import get_logger
from jqcore.redisconn import connect
from jqcore.settings import RedisSettings, load
from jqcore.state import Engine
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

__all__ = ["WorkerOptions", "load_registry", "run"]

log = get_logger("worker")


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    app: str
    queues: Sequence[str]
    concurrency: int = 10
    processes: int = 0
    burst: bool = False
    lease_ms: int | None = None
    grace_s: float = 30.0
    metrics_port: int | None = None
    filter: Mapping[str, str] | None = None
    unknown_kind_retry_ms: int = 5_000
    unknown_kind_dead_after_ms: int = 3_600_000
    scheduler_only: bool = False


def load_registry(spec: str) -> Registry:
    """``package.module:attribute`` (attribute defaults to ``registry``) → the application's Registry."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"--app {spec!r}: cannot import {module_name!r} ({exc})", code="app_invalid"
        ) from exc
    found = getattr(module, attr or "registry", None)
    if not isinstance(found, Registry):
        raise ConfigError(
            f"--app {spec!r}: {module_name}.{attr or 'registry'} is not a worker.Registry", code="app_invalid"
        )
    return found


async def serve(options: WorkerOptions, redis: RedisSettings | None = None) -> None:
    registry = load_registry(options.app)
    if not options.queues:
        raise ConfigError("--queues names no queue", code="queues_missing")
    client = connect(redis or load(RedisSettings))
    config = PoolConfig(
        queues=list(options.queues),
        concurrency=options.concurrency,
        lease_ms=options.lease_ms,
        grace_s=options.grace_s,
        burst=options.burst,
        process_workers=options.processes,
        filter=options.filter or None,
        unknown_kind_retry_ms=options.unknown_kind_retry_ms,
        unknown_kind_dead_after_ms=options.unknown_kind_dead_after_ms,
        claim=not options.scheduler_only,
    )
    pool = Pool(registry, Engine(client), config)
    log.info("worker starting", queues=list(options.queues), concurrency=options.concurrency)
    try:
        await run_until_signal(pool, on_second_signal=pool.hard_stop, until=pool.drained)
    finally:
        await client.aclose()
    log.info("worker stopped")


def run(options: WorkerOptions) -> None:
    if options.metrics_port is not None:
        metrics.serve(options.metrics_port)
    asyncio.run(serve(options))
