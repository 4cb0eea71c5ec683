"""The ``jobq`` command: the one composition root of every jobq part.

A bare ``pip install jobq`` has the client, the worker and this command; the other commands need an extra
(``jqcore.extras``). A command whose module cannot be imported for want of its extra stays listed, and
running it says which extra to install in one line.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from jqcore.errors import JobqError
from jqcore.extras import MissingExtra, extra_for, install_hint
from jqstack.errors import StackError

__all__ = ["app", "main", "version"]

app = typer.Typer(
    name="jobq",
    help="jobq: a job queue that never loses an accepted job (HTTP -> Kafka -> Redis -> workers).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def version() -> str:
    """This installation's version (the distribution's metadata: ``pyproject.toml``'s ``version``)."""
    try:
        return importlib.metadata.version("jobq")
    except importlib.metadata.PackageNotFoundError:  # a checkout run from PYTHONPATH without an install
        return "unknown (not installed)"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"jobq {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print jobq's version and exit."
        ),
    ] = False,
) -> None:
    pass


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
COMMANDS: list[tuple[str, str, str]] = [
    # (name, module under jobq.commands, attribute: a function is a command, a Typer a group)
    ("stack", "stack", "app"),
    ("bench", "bench", "bench"),
    ("demo", "demo", "demo"),
    ("dev", "dev", "dev"),
    ("worker", "worker", "worker"),
    ("gate", "gate", "gate"),
    ("relay", "relay", "relay"),
    ("scheduler", "scheduler", "scheduler"),
    ("dispatcher", "dispatcher", "dispatcher"),
    ("status", "status", "status"),
    ("doctor", "doctor", "doctor"),
    ("enqueue", "enqueue", "enqueue"),
    ("job", "job", "app"),
    ("queue", "queue", "app"),
    ("dead", "dead", "app"),
    ("web", "web", "app"),
    ("canary", "canary", "canary"),
    ("reconcile", "reconcile", "reconcile"),
    ("replay", "replay", "replay"),
    ("rebuild", "rebuild", "rebuild"),
    ("topics", "topics", "app"),
    ("spark", "spark", "app"),
    ("cron", "cron", "app"),
    ("graph", "graph", "app"),
    ("history", "history", "app"),
    ("switch", "switch", "app"),
    ("apply", "apply", "apply"),
    ("export", "apply", "export"),
    ("tokens", "tokens", "app"),
    ("rollout", "rollout", "rollout"),
]
"""Every subcommand, in ``--help``'s order."""


def _needs(missing: MissingExtra) -> Callable[[], None]:
    def command() -> None:
        raise missing

    command.__doc__ = escape(f"(needs the {missing.extra} extra: {install_hint(missing.extra)})")
    return command


def _register(name: str, module: str, attribute: str) -> None:
    try:
        found: Any = getattr(importlib.import_module(f"jobq.commands.{module}"), attribute)
    except ImportError as exc:  # a library of an extra that is not installed
        extra = extra_for(exc)
        if extra is None:
            raise
        app.command(name, context_settings=_PASS_THROUGH)(_needs(MissingExtra(f"jobq {name}", extra)))
        return
    if isinstance(found, typer.Typer):
        app.add_typer(found, name=name)
    elif name == "bench":  # forwards every argument to loadtest
        app.command(name, context_settings=_PASS_THROUGH)(found)
    else:
        app.command(name)(found)


for _name, _module, _attribute in COMMANDS:
    _register(_name, _module, _attribute)


def _invoked(argv: list[str]) -> str:
    """``jobq`` and the (sub)command names at the start of ``argv``: what the user ran."""
    words, command = ["jobq"], typer.main.get_command(app)
    for arg in argv:
        subcommands = getattr(command, "commands", None)  # a group's (typer vendors click)
        sub = subcommands.get(arg) if isinstance(subcommands, dict) else None
        if sub is None:
            break
        words.append(arg)
        command = sub
    return " ".join(words)


def main() -> None:
    """Entry point: jobq errors become one readable line and exit code 2, never a traceback; so does a
    library of an extra that is not installed (which extra to install, in one line)."""
    try:
        app()
    except ImportError as exc:
        extra = extra_for(exc)
        if extra is None:
            raise
        what = exc.what if isinstance(exc, MissingExtra) and exc.what.startswith("jobq ") else None
        line = f"{what or _invoked(sys.argv[1:])} needs the {extra} extra: {install_hint(extra)}"
        Console(stderr=True, soft_wrap=True).print(f"[red]error[/] (missing_extra): {escape(line)}")
        sys.exit(2)
    except (JobqError, StackError) as exc:
        Console(stderr=True).print(f"[red]error[/] ({exc.code}): {exc.message}")
        sys.exit(2)


if __name__ == "__main__":
    main()
