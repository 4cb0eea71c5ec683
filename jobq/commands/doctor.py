"""``jobq doctor``: check a deployment, one line per problem (the checks: ``jobq/doctor.py``)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from jobq.doctor import examine, judge

__all__ = ["doctor"]


def doctor(
    gateway: Annotated[
        list[str] | None,
        typer.Option(
            "--gateway",
            envvar="JOBQ_URL",
            help="A gateway URL whose /readyz is asked (repeatable; default JOBQ_URL, else the gateway of "
            "JOBQ_GATE_HOST/JOBQ_GATE_PORT).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of lines.")] = False,
) -> None:
    """Check a deployment as its services see it (the same JOBQ_* settings): Kafka topics against the
    declaration, Redis's eviction policy and persistence, Consul's ACLs and the relays' locks, clock
    offsets (this host, Redis, Consul, the processes' heartbeats), gateways, relays, schedulers and
    canaries alive, gateways ready, and the tokens a non-loopback gateway or dashboard accepts.

    Exit status 1 with one line per problem; 0 when only warnings (or nothing) were found.
    """
    found = judge(asyncio.run(examine(gateways=gateway or ())))
    problems = [f for f in found if f.level == "problem"]
    if as_json:
        doc = {"ok": not problems, "findings": [f.as_dict() for f in found]}
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        out = Console(highlight=False, soft_wrap=True)
        for f in found:
            colour = "red" if f.level == "problem" else "yellow"
            out.print(f"[{colour}]{f.level}[/] [{f.check}] {escape(f.line)}")
        if not problems:
            out.print(f"[green]all clear[/]: no problem found ({len(found)} warning(s))")
    if problems:
        raise typer.Exit(1)
