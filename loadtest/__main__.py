"""``python -m loadtest SCENARIO`` (``./run bench SCENARIO``): run a benchmark, print a table, save a report.

The benchmarks are not part of the installed product: they run from a checkout, where the repository root is
on ``sys.path`` (``python -m`` from there; ``./run bench`` does it). ``./run bench`` forwards here when it can
import ``loadtest``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from loadtest import registry
from loadtest.report import Report

__all__ = ["SCENARIO_NAMES", "app", "bench", "main"]

SCENARIO_NAMES = tuple(registry.SCENARIOS)
"""Every scenario (``registry`` imports a scenario's module only when it runs)."""


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
    batch: Annotated[
        int | None, typer.Option("--batch", min=1, help="drain: a batch handler's items, batches of N.")
    ] = None,
    chaos: Annotated[
        bool, typer.Option("--chaos", help="faults: one seeded run of random faults (--seed, --minutes).")
    ] = False,
    seed: Annotated[
        int | None, typer.Option("--seed", help="faults --chaos: the seed (default: today, YYYYMMDD).")
    ] = None,
    minutes: Annotated[
        float, typer.Option("--minutes", min=0.1, max=600, help="faults --chaos: about how long.")
    ] = 5.0,
    backlog: Annotated[
        int | None,
        typer.Option("--backlog", min=1, help="neighbours: the held queue's backlog (50,000; quick 300)."),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option("--slots", min=1, help="peers: slots per worker process in the one-shape table (16)."),
    ] = None,
    hop: Annotated[
        str | None,
        typer.Option(
            "--hop",
            help="floors: only this hop, minutes not 17 (gateway; relay; worker: own Redis, no Kafka).",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            exists=True,
            file_okay=False,
            help="startup, trickle: another checkout's root, its jobq measured beside this one's.",
        ),
    ] = None,
) -> None:
    """Run a benchmark scenario; the report folder is printed at the end."""
    owned: dict[str, tuple[tuple[str, ...], object]] = {
        "--batch": (("drain",), batch),
        "--slots": (("peers",), slots),
    }
    owned["--backlog"] = (("neighbours",), backlog)
    owned["--hop"] = (("floors",), hop)
    owned["--baseline"] = (("startup", "trickle"), baseline)
    _only(scenario, web=(jobs, history_rows, requests), owned=owned, chaos=(chaos, seed))
    if chaos:
        report = registry.chaos(seed, minutes)
    elif scenario == "drain":
        report = registry.drain(quick, batch=batch or 0)
    elif scenario == "neighbours":
        report = registry.neighbours(quick, backlog=backlog)
    elif scenario == "floors":
        report = registry.floors(quick, hop=hop)
    elif scenario == "peers":
        report = registry.peers(quick, slots=slots)
    elif scenario == "startup":
        report = registry.startup(quick, baseline=baseline)
    elif scenario == "trickle":
        report = registry.trickle(quick, baseline=baseline)
    elif scenario == "web":
        report = registry.web(quick, jobs=jobs, history_rows=history_rows, requests=requests)
    else:
        report = registry.SCENARIOS[scenario](quick)
    _show(report, scenario, as_json)


def _show(report: Report, scenario: str, as_json: bool) -> None:
    """Save ``report`` and print it (a table, or one JSON object), with where it was saved."""
    folder = report.save()
    if as_json:
        typer.echo(json.dumps({**report.as_dict(), "report_dir": str(folder)}))
        return
    console = Console()
    if report.summary:  # the scenario's own table (floors: each hop beside its floor)
        console.print(Markdown(report.summary))
    else:
        table = Table("figure", "median", "unit", "spread", title=f"bench {scenario}")
        for fig in report.figures:
            table.add_row(fig.name, f"{fig.median:,.4g}", fig.unit, f"±{fig.spread:.1%}")
        console.print(table)
    console.print(f"report: {folder}")


def _only(
    scenario: str,
    *,
    web: tuple[int | None, ...],
    owned: dict[str, tuple[tuple[str, ...], object]],
    chaos: tuple[bool, int | None],
) -> None:
    """Refuse an unknown scenario and options of another scenario (``owned``: an option → the scenarios it
    belongs to, and its value)."""
    if scenario not in SCENARIO_NAMES:
        raise typer.BadParameter(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIO_NAMES)}")
    sizes = dict(zip(("--jobs", "--history-rows", "--requests"), web, strict=True))
    if scenario != "web" and any(v is not None for v in sizes.values()):
        raise typer.BadParameter(f"{', '.join(k for k, v in sizes.items() if v is not None)}: web only")
    for option, (owners, value) in owned.items():
        if scenario not in owners and value is not None:
            raise typer.BadParameter(f"{option}: {', '.join(owners)} only")
    if scenario != "faults" and (chaos[0] or chaos[1] is not None):
        raise typer.BadParameter("--chaos, --seed: faults only")
    if chaos[1] is not None and not chaos[0]:
        raise typer.BadParameter("--seed: with --chaos")
    hop = owned["--hop"][1]
    if hop is not None:
        from loadtest.floors_bench import ALONE

        if hop not in ALONE:
            raise typer.BadParameter(f"--hop {hop!r}: only {', '.join(ALONE)} runs alone")


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(bench)


def main(args: list[str] | None = None, prog_name: str = "python -m loadtest") -> None:
    """Run the command line (``args``: the arguments, default ``sys.argv[1:]``)."""
    app(args=args, prog_name=prog_name)


if __name__ == "__main__":
    main()
