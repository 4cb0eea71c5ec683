"""``jobq web``: run the dashboard (its own process; ``jobq gate --web`` serves it under ``/ui``)."""

from __future__ import annotations

from typing import Annotated

import typer

from jqcore.log import configure
from jqcore.settings import load
from jqweb.main import run
from jqweb.settings import WebSettings

__all__ = ["web"]


def web(
    port: Annotated[int | None, typer.Option(help="Listen port (default JOBQ_WEB_PORT, 28090).")] = None,
    host: Annotated[
        str | None, typer.Option(help="Listen address (default JOBQ_WEB_HOST, 127.0.0.1).")
    ] = None,
) -> None:
    """Run the web dashboard: the pipeline from HTTP to execution, seen and repaired.

    Pages: overview (24 h rates, alerts, canaries), topics (lag, relay locks and fences, live rate limits),
    queues, jobs (search live and archived, bulk actions), a job's timeline, dead letters, schedules,
    graphs, workers and the audit log. Tokens: JOBQ_WEB_READ_TOKENS (see) and JOBQ_WEB_ADMIN_TOKENS (act);
    Kafka, Consul, Redis and the history from the services' settings (`eval "$(jobq stack env)"`).
    """
    configure()
    overrides = {k: v for k, v in {"port": port, "host": host}.items() if v is not None}
    run(load(WebSettings, **overrides))
