"""``jobq bench SCENARIO``: the benchmarks (``loadtest``), which only a checkout holds.

They are not part of the installed product; from a checkout ``./run bench SCENARIO`` runs them
(``python -m loadtest``). This command forwards there when ``loadtest`` is importable and says so in one
line (exit 2) when it is not.
"""

from __future__ import annotations

import typer

__all__ = ["NOT_INSTALLED", "bench"]

NOT_INSTALLED = "jobq bench: the benchmarks are not installed; run ./run bench SCENARIO from a checkout"


def bench(ctx: typer.Context) -> None:
    """Run a benchmark scenario from a checkout (forwards to python -m loadtest)."""
    try:
        from loadtest.__main__ import main
    except ModuleNotFoundError as exc:
        if exc.name != "loadtest":
            raise
        typer.echo(NOT_INSTALLED, err=True)
        raise typer.Exit(2) from None
    main(list(ctx.args), prog_name="jobq bench")
