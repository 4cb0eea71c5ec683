"""``jobq bench SCENARIO``: run a benchmark from ``loadtest/``, print a table, save a report."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["SCENARIO_NAMES", "bench"]

SCENARIO_NAMES = (
    "stack",
    "engine",
    "drain",
    "relay",
    "gate",
    "scheduler",
    "spark",
    "e2e",
    "peers",
    "history",
    "graphs",
    "web",
    "faults",
    "envelope",
)
"""The names in ``loadtest.registry.SCENARIOS`` (listed here so ``--help`` need not load ``loadtest``)."""


def bench(
    scenario: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCENARIO_NAMES)}.")],
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sizes, one repetition (a smoke run).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object of the figures.")] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", min=400, help="web: jobs in Redis (default 1M; quick 20k).")
    ] = None,
    history_rows: Annotated[
        int | None,
        typer.Option("--history-rows", min=3, help="web: history rows (default 10M; quick 200k)."),
    ] = None,
    requests: Annotated[
        int | None, typer.Option("--requests", min=1, help="web: measured requests per page (default 20).")
    ] = None,
) -> None:
    """Run a benchmark scenario; the report folder is printed at the end."""
    if scenario not in SCENARIO_NAMES:
        raise typer.BadParameter(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIO_NAMES)}")
    sizes = {"--jobs": jobs, "--history-rows": history_rows, "--requests": requests}
    if scenario != "web" and any(v is not None for v in sizes.values()):
        raise typer.BadParameter(f"{', '.join(k for k, v in sizes.items() if v is not None)}: web only")
    from loadtest import registry  # the benchmarks' libraries load only when one runs

    if scenario == "web":
        report = registry.web(quick, jobs=jobs, history_rows=history_rows, requests=requests)
    else:
        report = registry.SCENARIOS[scenario](quick)
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
