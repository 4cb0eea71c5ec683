"""The ``jobq`` command: the one composition root of every jobq part."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from jobq.commands import (
    bench,
    canary,
    cron,
    demo,
    dispatcher,
    doctor,
    gate,
    graph,
    history,
    rebuild,
    reconcile,
    relay,
    replay,
    scheduler,
    spark,
    stack,
    status,
    switch,
    tokens,
    topics,
    web,
    worker,
)
from jqcore.errors import JobqError
from jqstack.errors import StackError

__all__ = ["app", "main"]

app = typer.Typer(
    name="jobq",
    help="jobq: a job queue that never loses an accepted job (HTTP -> Kafka -> Redis -> workers).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(stack.app, name="stack")
app.command(
    "bench",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)(bench.bench)
app.command("demo")(demo.demo)
app.command("worker")(worker.worker)
app.command("gate")(gate.gate)
app.command("relay")(relay.relay)
app.command("scheduler")(scheduler.scheduler)
app.command("dispatcher")(dispatcher.dispatcher)
app.command("status")(status.status)
app.command("doctor")(doctor.doctor)
app.add_typer(web.app, name="web")
app.command("canary")(canary.canary)
app.command("reconcile")(reconcile.reconcile)
app.command("replay")(replay.replay)
app.command("rebuild")(rebuild.rebuild)
app.add_typer(topics.app, name="topics")
app.add_typer(spark.app, name="spark")
app.add_typer(cron.app, name="cron")
app.add_typer(graph.app, name="graph")
app.add_typer(history.app, name="history")
app.add_typer(switch.app, name="switch")
app.add_typer(tokens.app, name="tokens")


def main() -> None:
    """Entry point: jobq errors become one readable line and exit code 2, never a traceback."""
    try:
        app()
    except (JobqError, StackError) as exc:
        Console(stderr=True).print(f"[red]error[/] ({exc.code}): {exc.message}")
        sys.exit(2)


if __name__ == "__main__":
    main()
