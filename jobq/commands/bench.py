"""``jobq bench SCENARIO``: run a benchmark from ``loadtest/``, print a table, save a report."""

from __future__ import annotations

import importlib
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["SCENARIOS", "bench"]

SCENARIOS: dict[str, str] = {
    "stack": "loadtest.stack_bench",
    "engine": "loadtest.engine_bench",
    "drain": "loadtest.drain_bench",
    "relay": "loadtest.relay_bench",
    "gate": "loadtest.gate_bench",
    "spark": "loadtest.spark_bench",
    "e2e": "loadtest.e2e_bench",
    "peers": "loadtest.peers_bench",
}
"""Scenario name → module exposing ``run(quick: bool) -> loadtest.report.Report``."""


def bench(
    scenario: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCENARIOS)}.")],
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sizes, one repetition (a smoke run).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object of the figures.")] = False,
) -> None:
    """Run a benchmark scenario; the report folder is printed at the end."""
    if scenario not in SCENARIOS:
        raise typer.BadParameter(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    module = importlib.import_module(SCENARIOS[scenario])
    report = module.run(quick=quick)
    folder = report.save()
    if as_json:
        typer.echo(json.dumps({**report.as_dict(), "report_dir": str(folder)}))
        return
    table = Table("figure", "median", "unit", "spread", title=f"jobq bench {scenario}")
    for fig in report.figures:
        table.add_row(fig.name, f"{fig.median:,.4g}", fig.unit, f"±{fig.spread:.1%}")
    console = Console()
    console.print(table)
    console.print(f"report: {folder}")
