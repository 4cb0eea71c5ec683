"""``jobq status``: one screen for the whole pipeline (``--json`` for machines, ``--watch`` full-screen).

Kafka: per topic and partition the end offset, the relay group's committed offset, the lag in records
and in seconds (age of the oldest unrelayed record). Consul: who holds each topic's lock and since when.
Redis: every queue's depth per state, oldest pending age, dead letters; canary health per partition;
how many gateways and worker pools announced themselves in the last 20 s. The layout fits the terminal's
width (80 when piped): ``jobq/status_render.py``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from jobq.status_render import render
from jqweb import overview

__all__ = ["collect", "render", "status"]


def collect(sources: overview.Sources | None = None) -> dict[str, Any]:
    """Every part of :func:`jqweb.overview.collect`, read with ``sources`` (default: the environment's
    settings)."""
    return asyncio.run(overview.collect(sources))


def status(
    json: Annotated[bool, typer.Option("--json", help="Print one JSON document (for machines).")] = False,
    watch: Annotated[
        float,
        typer.Option(
            help="Open a full-screen view refreshed every WATCH seconds (q quits, r refreshes now, "
            "p pauses; 0: print once).",
        ),
    ] = 0.0,
) -> None:
    """Show the pipeline: Kafka lag per partition, relay lock holders, queue depths, canary health.

    Reads the same settings as the services (JOBQ_KAFKA_*, JOBQ_REDIS_*, CONSUL_HTTP_ADDR, JOBQ_ROUTES);
    `eval "$(jobq stack env)"` points it at the local stack.
    """
    console = Console()
    if json:
        console.print_json(orjson.dumps(collect()).decode())
        return
    if not watch:
        console.print(render(collect(), console.width))  # laid out for the width: no header cut to "…"
        return
    from jobq.commands.status_tui import StatusApp  # textual loads only for the full-screen view

    StatusApp(every_s=watch).run()
