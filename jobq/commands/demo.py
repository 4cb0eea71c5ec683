"""``jobq demo``: the README's first command — bring the whole stack up and show it working."""

from __future__ import annotations

import time

import typer
from rich.console import Console

from jobq.commands.stack import open_stack, print_status

__all__ = ["demo"]


def demo() -> None:
    """Provision (cached) and start Kafka, Consul and Redis, then show their status."""
    console = Console()
    started = time.monotonic()
    stack = open_stack("default")
    with console.status("starting the stack (the first run downloads jars and builds Consul)..."):
        stack.up()
    console.print(f"stack up in {time.monotonic() - started:.1f}s")
    if not print_status(stack):
        raise typer.Exit(1)
    for key, value in stack.endpoints.exports().items():
        console.print(f"  {key}={value}")
