"""``jobq gate`` (run a gateway) and ``jobq topics`` (create the routed topics)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from jqcore.kafka import ensure_topics
from jqcore.log import configure
from jqcore.routing import RoutingSettings
from jqcore.settings import KafkaSettings, load
from jqweb.app import make_app as make_web_app
from jqweb.context import Web
from jqweb.settings import WebSettings
from kafkagate.main import run
from kafkagate.settings import GateSettings

__all__ = ["gate", "topics_app"]

topics_app = typer.Typer(
    help="Kafka topics of the routes (JOBQ_ROUTES / JOBQ_DEFAULT_TOPIC).", no_args_is_help=True
)


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

    Tokens come from JOBQ_GATE_TOKENS (comma-separated); Kafka, Redis and routes from their settings.
    """
    configure()
    overrides = {
        k: v
        for k, v in {"port": port, "host": host, "az": az, "processes": processes}.items()
        if v is not None
    }
    mounts = {"/ui": make_web_app(Web(load(WebSettings), base="/ui"))} if web else None
    run(load(GateSettings, **overrides), mounts)


@topics_app.command("create")
def create(
    partitions: Annotated[int, typer.Option(min=1, help="Partitions per topic.")] = 3,
    replication: Annotated[int, typer.Option(min=1, help="Replication factor.")] = 1,
    extra: Annotated[
        list[str] | None, typer.Argument(help="More topics to create besides the routed ones.")
    ] = None,
) -> None:
    """Create every routed topic (and EXTRA ones) that does not exist yet."""
    routing = load(RoutingSettings)
    names = [*routing.topics(), *(extra or [])]
    created = ensure_topics(load(KafkaSettings), names, partitions=partitions, replication=replication)
    Console().print(f"created: {', '.join(created) or 'none'}; present: {', '.join(names)}")
