"""``jobq relay``: run a relay process."""

from __future__ import annotations

from typing import Annotated

import typer

from jqcore.extras import require
from jqcore.log import configure
from jqcore.settings.common import load

__all__ = ["relay"]


def relay(
    topics: Annotated[
        str | None,
        typer.Option(help="Comma-separated topics (default: JOBQ_RELAY_TOPICS, else every routed topic)."),
    ] = None,
    holder: Annotated[str | None, typer.Option(help="This process's name in the Consul locks.")] = None,
    shadow: Annotated[bool, typer.Option(help="Read and count, write nothing (migrations).")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve /healthz, /readyz and Prometheus /metrics on this port (JOBQ_RELAY_METRICS_PORT)."
        ),
    ] = None,
) -> None:
    """Relay jobs from Kafka into Redis for every topic whose Consul lock this process wins.

    Offsets are committed only after Redis accepted every job up to them; writes are fenced by the lock's
    LockIndex; live rate limits come from Consul KV <prefix>/rates/<topic> and
    <prefix>/queue-rates/<queue> (jobs/s, 0 pauses).
    """
    require("jobq relay", "server")
    from jqrelay.main import run
    from jqrelay.settings import RelaySettings

    configure()
    overrides: dict[str, object] = {"shadow": shadow} if shadow else {}
    if topics is not None:
        overrides["topics"] = topics
    if holder is not None:
        overrides["holder"] = holder
    if metrics_port is not None:
        overrides["metrics_port"] = metrics_port
    run(load(RelaySettings, **overrides))
