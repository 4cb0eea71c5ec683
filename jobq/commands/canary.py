"""``jobq canary``: run the heartbeat canary."""

from __future__ import annotations

from typing import Annotated

import typer

from jqcore.extras import require
from jqcore.log import configure
from jqcore.settings import load

__all__ = ["canary"]


def canary(
    interval: Annotated[float | None, typer.Option(help="Seconds between rounds (default 60).")] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65_535,
            help="Serve /healthz, /readyz and Prometheus /metrics on this port (JOBQ_CANARY_METRICS_PORT).",
        ),
    ] = None,
) -> None:
    """Send one heartbeat job through the gateway to every partition of every routed topic each interval,
    time each hop, and flag late or missing partitions (metrics jobq_canary_*, and `jobq status`).

    Gateways and token: JOBQ_CANARY_GATEWAYS (url[@az],...) and JOBQ_CANARY_TOKEN.
    """
    require("jobq canary", "server")
    from canary.main import run
    from canary.settings import CanarySettings

    configure()
    given = {"interval_s": interval, "metrics_port": metrics_port}
    run(load(CanarySettings, **{k: v for k, v in given.items() if v is not None}))
