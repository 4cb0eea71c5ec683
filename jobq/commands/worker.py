"""``jobq worker``: run a worker pool (options override the ``JOBQ_WORKER_*`` settings, like ``jobq gate``).

``--app`` and ``--queues`` have no default. The command reads their variables too (``JOBQ_WORKER_APP``,
``JOBQ_WORKER_QUEUES``), so a missing one is a usage error naming both the option and the variable.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jqcore.log import configure
from jqcore.settings.common import load
from jqcore.settings.observe import LogSettings
from worker.main import run
from worker.settings import WorkerSettings

__all__ = ["worker"]


def worker(
    app: Annotated[
        str,
        typer.Option(
            envvar="JOBQ_WORKER_APP",
            help="module:attribute of your worker.Registry (the attribute defaults to registry).",
        ),
    ],
    queues: Annotated[
        str,
        typer.Option(
            envvar="JOBQ_WORKER_QUEUES", help="Comma-separated queues this pool serves, in claim order."
        ),
    ],
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Jobs run at once by this pool (default JOBQ_WORKER_CONCURRENCY, 10)."),
    ] = None,
    prefetch: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Jobs claimed beyond --concurrency, started the moment a slot frees; one that waits half "
            "its lease is handed back (default JOBQ_WORKER_PREFETCH, 0).",
        ),
    ] = None,
    processes: Annotated[
        int | None,
        typer.Option(
            min=0,
            help='Process-pool size for mode="process" handlers '
            "(default JOBQ_WORKER_PROCESSES, 0: the CPU count).",
        ),
    ] = None,
    burst: Annotated[
        bool | None,
        typer.Option(
            "--burst/--no-burst", help="Exit 0 once the queues hold nothing to do (JOBQ_WORKER_BURST)."
        ),
    ] = None,
    lease_ms: Annotated[
        int | None,
        typer.Option(
            min=100,
            help="Lease per claim in ms, renewed every third of it (default JOBQ_WORKER_LEASE_MS, "
            "else the job's own, else the queue's).",
        ),
    ] = None,
    filter: Annotated[
        list[str] | None,
        typer.Option(
            help="Claim only jobs with this meta KEY=VALUE (repeatable; KEY must be a filter key; "
            "default JOBQ_WORKER_FILTER=K=V,...)."
        ),
    ] = None,
    unknown_kind_retry: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds before a job of a kind this pool lacks is claimable again "
            "(default JOBQ_WORKER_UNKNOWN_KIND_RETRY_S, 5).",
        ),
    ] = None,
    unknown_kind_dead_after: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds of no pool running a kind before its jobs are dead-lettered "
            "(default JOBQ_WORKER_UNKNOWN_KIND_DEAD_AFTER_S, 3600).",
        ),
    ] = None,
    grace: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds running jobs get to finish on SIGTERM before release "
            "(default JOBQ_WORKER_GRACE_S, 30).",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65_535,
            help="Serve /healthz, /readyz and Prometheus /metrics on this port (JOBQ_WORKER_METRICS_PORT).",
        ),
    ] = None,
) -> None:
    """Run a worker pool: claim jobs of --queues from Redis and run the handlers of --app.

        Every option has a JOBQ_WORKER_* setting (docs/settings.md); an option given here wins.
        Redis comes from JOBQ_REDIS_URL. Delayed jobs, retries and expired leases need `jobq scheduler`
    running somewhere. SIGTERM/SIGINT: stop claiming, finish within --grace, release the rest;
        a second signal stops hard (leases expire, the jobs run again elsewhere).
    """
    configure(load(LogSettings))  # a bad JOBQ_LOG_* is one readable line too
    given: dict[str, Any] = {
        "app": app,
        "queues": queues,
        "concurrency": concurrency,
        "prefetch": prefetch,
        "processes": processes,
        "burst": burst,
        "lease_ms": lease_ms,
        "filter": filter,
        "unknown_kind_retry_s": unknown_kind_retry,
        "unknown_kind_dead_after_s": unknown_kind_dead_after,
        "grace_s": grace,
        "metrics_port": metrics_port,
    }
    run(load(WorkerSettings, **{k: v for k, v in given.items() if v is not None}))
