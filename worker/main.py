"""Run a pool for an application's registry until a signal (``jobq worker``, ``python -m worker``), a stop
asked from the dashboard's Workers page, or a drained burst.

SIGTERM or SIGINT (or the dashboard's stop) stops claiming, lets running jobs finish within the grace
period and releases the rest (no attempt spent); a second SIGINT/SIGTERM is a hard stop (nothing written
back, leases expire and the reaper hands the jobs out again). ``burst`` exits 0 once the queues hold
nothing to do. SIGHUP re-reads the ``settings_file`` (when set): a changed concurrency applies to the
running pool at once.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
from pathlib import Path

from jqcore.errors import ConfigError
from jqcore.log import get_logger
from jqcore.settings.common import load
from jqcore.settings.observe import TraceSettings
from jqcore.settings.servers import RedisSettings
from jqengine import Engine, connect
from jqruntime.lifecycle import run_until_signal
from jqruntime.preflight import preflight
from jqruntime.tracing import setup_tracing
from worker.pool import Pool, PoolConfig
from worker.registry import Registry
from worker.settings import LiveSettings, WorkerSettings

__all__ = ["load_registry", "pool_config", "read_live", "reload", "reload_on_sighup", "run", "serve"]

log = get_logger("worker")


def load_registry(spec: str) -> Registry:
    """``package.module:attribute`` (attribute defaults to ``registry``) → the application's Registry."""
    module_name, _, attr = spec.partition(":")
    where = f"--app {spec!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import {module_name!r} ({exc})", code="app_invalid") from exc
    found = getattr(module, attr or "registry", None)
    if not isinstance(found, Registry):
        raise ConfigError(
            f"{where}: {module_name}.{attr or 'registry'} is not a worker.Registry", code="app_invalid"
        )
    return found


def pool_config(settings: WorkerSettings) -> PoolConfig:
    """The pool's configuration for these settings (seconds become the engine's milliseconds)."""
    live = read_live(settings.settings_file) if settings.settings_file else None
    return PoolConfig(
        queues=list(settings.queues),
        concurrency=(live and live.concurrency) or settings.concurrency,
        prefetch=settings.prefetch,
        lease_ms=settings.lease_ms,
        grace_s=settings.grace_s,
        burst=settings.burst,
        process_workers=settings.processes,
        filter=settings.filter or None,
        unknown_kind_retry_ms=round(settings.unknown_kind_retry_s * 1000),
        unknown_kind_dead_after_ms=round(settings.unknown_kind_dead_after_s * 1000),
    )


async def serve(settings: WorkerSettings, redis: RedisSettings, trace: TraceSettings) -> None:
    """Load the application, connect to Redis and run one pool until a signal (or a drained burst),
    serving its health and metrics on ``settings.metrics_port`` from its first claim round on (one
    endpoint per pool process: the processes of ``mode="process"`` handlers serve none, their jobs are
    counted by the pool)."""
    registry = load_registry(settings.app)
    setup_tracing("worker", trace)  # off unless JOBQ_TRACE_OTLP_ENDPOINT is set
    client = connect(redis)
    config = pool_config(settings)
    pool = Pool(registry, Engine(client), config, redis=client)
    log.info("worker starting", queues=list(settings.queues), concurrency=config.concurrency)
    if settings.settings_file is not None:
        reload_on_sighup(pool, settings.settings_file)
    try:
        await preflight(redis=(client, redis))  # an evicting Redis would drop the jobs it runs
        await run_until_signal(
            pool,
            on_second_signal=pool.hard_stop,
            until=pool.done,
            health_port=settings.metrics_port,
            health_after=pool.claimed_once,
        )
    finally:
        await client.aclose()
    log.info("worker stopped")


def read_live(path: Path) -> LiveSettings:
    """The live settings in ``path`` (a dotenv file); a missing or invalid file is a ConfigError."""
    if not path.is_file():
        raise ConfigError(f"settings file {str(path)!r} is not a readable file", code="config_invalid")
    return load(LiveSettings, _env_file=path)


def reload(pool: Pool, path: Path) -> None:
    """Apply ``path``'s live settings to the running pool (SIGHUP); a bad file changes nothing."""
    try:
        live = read_live(path)
    except ConfigError as exc:
        log.error("settings file not applied", path=str(path), error=exc.message)
        return
    if live.concurrency is not None and live.concurrency != pool.concurrency:
        pool.set_concurrency(live.concurrency)


def reload_on_sighup(pool: Pool, path: Path) -> None:
    """SIGHUP re-reads ``path`` into the running pool (:func:`reload`)."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload, pool, path)


def run(settings: WorkerSettings) -> None:
    """Run a pool until a signal (or, with ``burst``, until its queues hold nothing to do)."""
    asyncio.run(serve(settings, load(RedisSettings), load(TraceSettings)))
