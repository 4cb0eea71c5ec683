"""Saying what a long provisioning step is doing while it runs.

A cold ``jobq demo`` / ``jobq stack up`` spends minutes in Maven and ``go build``; a silent terminal looks
hung. Each step announces itself with what it does and how long it takes the first time, then shows it is
alive: on a terminal a rich spinner with the elapsed time, elsewhere (CI logs, pipes) plain lines without
control characters, one when the step starts, one every ``heartbeat_s`` while it runs and one at the end.
Everything goes to stderr, so ``eval "$(jobq stack env)"`` and ``--json`` output stay clean.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

__all__ = ["Step", "step"]


@dataclass
class Step:
    """A running step: :meth:`alive` is called now and then by whoever waits for it."""

    title: str
    heartbeat_s: float
    out: TextIO | None
    """Where plain lines go; ``None`` on a terminal (the spinner shows it is alive)."""
    started: float = field(default_factory=time.monotonic)
    _last_line: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def alive(self) -> None:
        """On a plain stream, one ``... still <title> (N s)`` line per ``heartbeat_s``."""
        now = time.monotonic()
        if self.out is not None and now - self._last_line >= self.heartbeat_s:
            self._last_line = now
            _line(self.out, f"... still {self.title} ({self.elapsed_s:.0f} s)")


@contextmanager
def step(what: str, note: str = "", *, heartbeat_s: float = 30.0) -> Iterator[Step]:
    """Announce ``what`` (with ``note``, e.g. ``first run only, ~3 min``) and show it alive until the
    block ends; the end line says how long it took (or that it failed)."""
    title = f"{what} ({note})" if note else what
    console = Console(stderr=True)
    if not console.is_terminal:
        running = Step(title, heartbeat_s, sys.stderr)
        _line(sys.stderr, f"==> {title}")
        try:
            yield running
        except BaseException:
            _line(sys.stderr, f"==> failed after {running.elapsed_s:.0f} s: {what}")
            raise
        _line(sys.stderr, f"==> done in {running.elapsed_s:.0f} s: {what}")
        return
    running = Step(title, heartbeat_s, None)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        bar.add_task(title, total=None)
        try:
            yield running
        except BaseException:
            console.print(f"[red]✗[/] {what} [dim](failed after {running.elapsed_s:.0f} s)[/]")
            raise
    console.print(f"[green]✓[/] {what} [dim]({running.elapsed_s:.0f} s)[/]")


def _line(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()
