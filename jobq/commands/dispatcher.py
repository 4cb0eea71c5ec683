"""``jobq dispatcher``: run a push dispatcher."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jqcore.log import configure
from jqcore.settings.common import load
from jqcore.settings.observe import LogSettings
from jqdispatch.main import run
from jqdispatch.settings import DispatcherSettings

__all__ = ["dispatcher"]


def dispatcher(
    queues: Annotated[
        str | None,
        typer.Option(help="Comma-separated queues of dispatch kinds to claim from (JOBQ_DISPATCHER_QUEUES)."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Jobs held at once, callbacks awaited included (default 100)."),
    ] = None,
    callback_url: Annotated[
        str | None,
        typer.Option(help="The gateway's base URL as downstreams reach it (JOBQ_DISPATCHER_CALLBACK_URL)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65_535,
            help="Serve /healthz, /readyz and /metrics on this port (JOBQ_DISPATCHER_METRICS_PORT).",
        ),
    ] = None,
) -> None:
    """POST each job of a dispatch kind to its URL (PUT /v1/kinds/{kind} {"dispatch": {"url": ...}}).

    2xx completes the job, 202 waits for the downstream's callback (POST /v1/callbacks/... with the
    signed token sent along), anything else or a timeout fails the attempt (retried with the kind's
    backoff). The callback tokens' secret is JOBQ_CALLBACK_SECRET, the gateways' too. Every option has a
    JOBQ_DISPATCHER_* setting (docs/settings.md); an option given here wins. See docs/dispatcher.md.
    """
    configure(load(LogSettings))
    given: dict[str, Any] = {
        "queues": queues,
        "concurrency": concurrency,
        "callback_url": callback_url,
        "metrics_port": metrics_port,
    }
    run(load(DispatcherSettings, **{k: v for k, v in given.items() if v is not None}))
