"""``jobq topics create``: every topic of the declaration (``jqcore/topics.py``), created or fixed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings, EventSettings, FarSettings
from jqcore.topics import JOB_PARTITIONS, declaration, min_isr
from jqruntime.topicadmin import apply

__all__ = ["app"]

app = typer.Typer(
    help="jobq's Kafka topics: the routed job topics with their .retry/.dead, the events topic and the "
    "schedule topic, as declared in jqcore/topics.py.",
    no_args_is_help=True,
)


@app.command("create")
def create(
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of each job topic (and its .retry/.dead) created.")
    ] = JOB_PARTITIONS,
    replication: Annotated[
        int | None,
        typer.Option(
            min=1, help="Replication factor (default JOBQ_KAFKA_REPLICATION, else min(3, brokers))."
        ),
    ] = None,
    extra: Annotated[
        list[str] | None, typer.Argument(help="More job topics besides the routed ones.")
    ] = None,
) -> None:
    """Create every declared topic that is missing and set the configs of existing ones in place
    (cleanup.policy, retention.ms of the schedule topic, min.insync.replicas = RF - 1). A replication
    factor below the declared one cannot be raised in place: it is reported (exit status 1) with the fix.
    """
    kafka = load(KafkaSettings, **({"replication": replication} if replication else {}))
    names = [*load(RoutingSettings).topics(), *(extra or [])]
    specs = declaration(
        names, load(EventSettings), load(FarSettings), partitions=partitions, audit=load(AuditSettings)
    )
    done = apply(kafka, specs)
    out = Console()
    out.print(f"replication factor {done.replication}, min.insync.replicas {min_isr(done.replication)}")
    for name in done.created:
        out.print(f"created {name}")
    for name, conf in done.altered.items():
        out.print(f"altered {name}: " + ", ".join(f"{k}={v}" for k, v in conf.items()))
    kept = len(specs) - len(done.created)
    out.print(f"{len(specs)} topics declared: {len(done.created)} created, {kept} present")
    for p in done.left:
        Console(stderr=True).print(f"[red]problem[/] {p.line}")
    if done.left:
        raise typer.Exit(1)
