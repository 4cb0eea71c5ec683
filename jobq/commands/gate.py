"""``jobq gate``: run a gateway."""

from __future__ import annotations

from typing import Annotated

import typer

from jqcore.extras import require
from jqcore.log import configure
from jqcore.settings.common import load

__all__ = ["gate"]


def gate(
    port: Annotated[int | None, typer.Option(help="Listen port (default JOBQ_GATE_PORT, 28080).")] = None,
    host: Annotated[
        str | None, typer.Option(help="Listen address (default JOBQ_GATE_HOST, 127.0.0.1).")
    ] = None,
    az: Annotated[str | None, typer.Option(help="This gateway's availability-zone label.")] = None,
    processes: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Gateway processes sharing the port (SO_REUSEPORT; 0 = one per core; "
            "default JOBQ_GATE_PROCESSES, 1).",
        ),
    ] = None,
    web: Annotated[
        bool, typer.Option("--web", help="Also serve the dashboard under /ui (its tokens: JOBQ_WEB_*).")
    ] = False,
) -> None:
    """Run the HTTP gateway: enqueue into Kafka (202 after Kafka's ack) and every job/queue operation.

    Tokens come from JOBQ_GATE_TOKENS (comma-separated) and JOBQ_TOKENS_FILE (named, scoped; SIGHUP reloads
    them); Kafka, Redis and routes from their settings.
    """
    require("jobq gate --web" if web else "jobq gate", "server", *(("web",) if web else ()))
    from kafkagate.main import run
    from kafkagate.settings import GateSettings

    configure()
    overrides = {
        k: v
        for k, v in {"port": port, "host": host, "az": az, "processes": processes}.items()
        if v is not None
    }
    mounts = None
    if web:
        from jqweb.app import make_app as make_web_app
        from jqweb.context import Web
        from jqweb.settings import WebSettings

        mounts = {"/ui": make_web_app(Web(load(WebSettings), base="/ui"))}
    run(load(GateSettings, **overrides), mounts)
