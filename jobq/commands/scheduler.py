"""``jobq scheduler``: run a scheduler instance."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jqcore.extras import require
from jqcore.log import configure
from jqcore.settings.common import load
from jqcore.settings.observe import LogSettings

__all__ = ["scheduler"]


def scheduler(
    name: Annotated[
        str | None, typer.Option(help="This instance's name in its group (JOBQ_SCHEDULER_NAME; host:pid).")
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(help="Instances of one group split its queues (JOBQ_SCHEDULER_GROUP, default)."),
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated queue name patterns (fnmatch) this group keeps "
            "(JOBQ_SCHEDULER_QUEUES; default: every queue)."
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65_535,
            help="Serve /healthz, /readyz and /metrics on this port (JOBQ_SCHEDULER_METRICS_PORT).",
        ),
    ] = None,
) -> None:
    """Keep the timers of every queue in Redis: promote due delayed and retried jobs, reap expired
    leases, collect garbage.

    Run one or several: instances of a group split the queues among themselves (heartbeats in Redis,
    rendezvous hashing) and re-deal within JOBQ_SCHEDULER_STALE_S (3 s) when one joins or dies.
    Every option has a JOBQ_SCHEDULER_* setting (docs/settings.md); an option given here wins.
    """
    require("jobq scheduler", "server")
    from jqsched.main import run
    from jqsched.settings import SchedulerSettings

    configure(load(LogSettings))
    given: dict[str, Any] = {"name": name, "group": group, "queues": queues, "metrics_port": metrics_port}
    run(load(SchedulerSettings, **{k: v for k, v in given.items() if v is not None}))
