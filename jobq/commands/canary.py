"""``jobq canary``: run the heartbeat canary."""

from __future__ import annotations

from typing import Annotated

import typer

from jqcore.extras import require
from jqcore.log import configure
from jqcore.settings.common import load

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
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Send one round, wait for every heartbeat, print a line per partition and exit 1 if one "
            "was late or failed (the Helm chart's `helm test`).",
        ),
    ] = False,
) -> None:
    """Send one heartbeat job through the gateway to every partition of every routed topic each interval,
    time each hop, and flag late or missing partitions (metrics jobq_canary_*, and `jobq status`).

    Gateways and token: JOBQ_CANARY_GATEWAYS (url[@az],...) and JOBQ_CANARY_TOKEN.
    """
    require("jobq canary", "server")
    from canary.main import run
    from canary.settings import CanarySettings

    configure()
    if once:
        from canary.main import once as one_round

        results = one_round(load(CanarySettings))
        for line, _ok in results:
            typer.echo(line)
        if not results or not all(ok for _line, ok in results):
            raise typer.Exit(1)
        return
    given = {"interval_s": interval, "metrics_port": metrics_port}
    run(load(CanarySettings, **{k: v for k, v in given.items() if v is not None}))
