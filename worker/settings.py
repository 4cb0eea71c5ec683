"""A worker pool's settings (``JOBQ_WORKER_*``; the ``jobq worker`` options override them).

Documented with units and defaults in ``docs/settings.md``. ``app`` and ``queues`` have no default: a pool
that silently ran the demo handlers, or served no queue, would look healthy and do nothing useful.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from jqcore.settings.common import QueueNames

__all__ = ["LiveSettings", "WorkerSettings", "parse_filter"]


def parse_filter(value: object) -> object:
    """``KEY=VALUE`` pairs → a dict: a comma-separated string (``JOBQ_WORKER_FILTER=region=eu,tier=a``) or
    a list of pairs (``--filter region=eu --filter tier=a``); the value may contain ``=``. A dict passes."""
    if value is None or isinstance(value, dict):
        return value or {}
    if isinstance(value, str):
        pairs = value.split(",")
    elif isinstance(value, list | tuple):
        pairs = [str(p) for p in value]
    else:
        raise ValueError(f"expected KEY=VALUE pairs, not {value!r}")
    out: dict[str, str] = {}
    for pair in (p.strip() for p in pairs):
        if not pair:
            continue
        key, eq, val = pair.partition("=")
        if not eq or not key.strip() or not val.strip():
            raise ValueError(f"filter {pair!r}: expected KEY=VALUE")
        out[key.strip()] = val.strip()
    return out


FilterPairs = Annotated[dict[str, str], NoDecode, BeforeValidator(parse_filter)]
"""A filter setting: ``KEY=VALUE`` pairs, comma-separated in the environment."""


class WorkerSettings(BaseSettings):
    """One worker pool: which code runs, for which queues, how many jobs at once."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_WORKER_", extra="ignore", populate_by_name=True)

    app: str = Field(min_length=1)
    """``module[:attribute]`` of the application's ``worker.Registry`` (the attribute defaults to
    ``registry``)."""
    queues: QueueNames
    """Queues this pool serves, in claim order (comma-separated)."""
    concurrency: int = Field(10, ge=1)
    """Jobs run at once by this pool. Raise it for handlers that mostly wait (I/O); lower it for ones that
    load a shared resource."""
    prefetch: int = Field(0, ge=0)
    """Jobs claimed beyond the concurrency, each started the moment a handler's slot frees (no round trip
    between one job's end and the next one's start); leased like running jobs, handed back (attempt refunded)
    when no slot freed within half its lease. Set it when jobs are so short that the claim's round trip is a
    noticeable part of each."""
    processes: int = Field(0, ge=0)
    """Process-pool size for ``mode="process"`` handlers (0: the CPU count). Set it below the CPU count to
    leave cores to the rest of the machine."""
    burst: bool = False
    """Exit 0 once the queues hold nothing to do. Set it for a pool run to completion (a CronJob, a CI
    step)."""
    lease_ms: int | None = Field(None, ge=100)
    """Lease per claim (ms), renewed every third of it; unset: the job's own, else the queue's. Set it when
    this pool's handlers need another lease than their queues give."""
    filter: FilterPairs = Field(default_factory=dict)
    """Claim only jobs whose meta has these ``KEY=VALUE`` pairs (each KEY a filter key of the queue). Set it
    to dedicate a pool to part of a queue (a region's, a tenant's jobs)."""
    unknown_kind_retry_s: float = Field(5.0, ge=0)
    """Seconds before a job of a kind this pool lacks is claimable again (by a pool that has it). Lower it for
    such jobs to reach their pool sooner, raise it for fewer wasted claims."""
    unknown_kind_dead_after_s: float = Field(3600.0, ge=0)
    """Seconds with no pool running a kind before its jobs are dead-lettered. Raise it when a kind's pool may
    be absent longer (a slow rollout)."""
    grace_s: float = Field(30.0, ge=0)
    """Seconds running jobs get to finish on SIGTERM before they are released. Raise it for handlers that take
    longer to finish; keep it under the pod's termination grace period."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``JOBQ_METRICS_HOST``:PORT. Set it so probes and
    Prometheus can reach the process."""
    settings_file: Path | None = None
    """A dotenv file read at start and again on SIGHUP: its ``JOBQ_WORKER_CONCURRENCY`` replaces the
    pool's concurrency (over the environment and ``--concurrency``) while it runs, without a restart."""

    @field_validator("app")
    @classmethod
    def _app_shape(cls, value: str) -> str:
        module, colon, attr = value.strip().partition(":")
        if not module or (colon and not attr) or ":" in attr:
            raise ValueError(f"{value!r}: expected module[:attribute], e.g. myapp.jobs:registry")
        return value.strip()


class LiveSettings(BaseSettings):
    """What a running pool takes from its ``settings_file`` (at start and on SIGHUP): the file's values
    only, since a running process's environment never changes."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_WORKER_", extra="ignore")

    concurrency: int | None = Field(None, ge=1)
    """Jobs run at once by this pool (unset: unchanged)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, dotenv_settings)
