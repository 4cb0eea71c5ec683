"""The ``worker`` command (``jobq worker`` and ``python -m worker``)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from jqcore.errors import JobqError
from jqcore.log import configure
from worker.main import WorkerOptions, run

__all__ = ["main", "parse_filter", "worker"]


def worker(
    queues: Annotated[str, typer.Option(help="Comma-separated queues this pool serves, in claim order.")],
    app: Annotated[
        str, typer.Option(help="module:attribute of your worker.Registry (attribute defaults to registry).")
    ] = "worker.examples:registry",
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs run at once by this pool.")] = 10,
    processes: Annotated[
        int, typer.Option(min=0, help='Process-pool size for mode="process" handlers (0: CPU count).')
    ] = 0,
    burst: Annotated[bool, typer.Option(help="Exit 0 once the queues hold nothing to do.")] = False,
    lease_ms: Annotated[
        int | None,
        typer.Option(
            min=100,
            help="Lease per claim, renewed every third of it [default: the job's own, else the queue's]",
        ),
    ] = None,
    filter: Annotated[
        list[str] | None,
        typer.Option(help="Claim only jobs with this meta KEY=VALUE (repeatable; KEY must be a filter key)."),
    ] = None,
    unknown_kind_retry: Annotated[
        float, typer.Option(min=0, help="Seconds before a job of a kind this pool lacks is claimable again.")
    ] = 5.0,
    unknown_kind_dead_after: Annotated[
        float,
        typer.Option(min=0, help="Seconds of no pool running a kind before its jobs are dead-lettered."),
    ] = 3600.0,
    scheduler_only: Annotated[
        bool,
        typer.Option(help="Only keep the queues' timers (promote due jobs, reap leases); claim nothing."),
    ] = False,
    grace: Annotated[
        float, typer.Option(min=0, help="Seconds running jobs get to finish on SIGTERM before release.")
    ] = 30.0,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus /metrics on 127.0.0.1:PORT.")
    ] = None,
) -> None:
    """Run a worker pool: claim jobs of QUEUES from Redis and execute their handlers.

    Redis comes from JOBQ_REDIS_URL (see docs/settings.md). SIGTERM/SIGINT: stop claiming, finish within
    --grace, release the rest; a second signal stops hard (leases expire, the jobs run again elsewhere).
    """
    configure()
    names = [q.strip() for q in queues.split(",") if q.strip()]
    run(
        WorkerOptions(
            app=app,
            queues=names,
            concurrency=concurrency,
            processes=processes,
            burst=burst,
            lease_ms=lease_ms,
            grace_s=grace,
            scheduler_only=scheduler_only,
            filter=parse_filter(filter or []),
            unknown_kind_retry_ms=int(unknown_kind_retry * 1000),
            unknown_kind_dead_after_ms=int(unknown_kind_dead_after * 1000),
            metrics_port=metrics_port,
        )
    )


def parse_filter(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key or not value:
            raise typer.BadParameter(f"--filter {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def main() -> None:
    try:
        typer.run(worker)
    except JobqError as exc:
        Console(stderr=True).print(f"[red]error[/] ({exc.code}): {exc.message}")
        sys.exit(2)
