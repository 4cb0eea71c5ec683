"""Small process chores of the stack: free loopback ports, log tails, provisioning steps.

Starting, probing and stopping processes is :mod:`jqstack.supervise`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from jqstack.errors import StackError
from jqstack.ports import loose_port
from jqstack.progress import Step, step

__all__ = ["free_port", "log_tail", "run_step"]


def free_port(*, pair_offset: int | None = None, avoid: Collection[int] = ()) -> int:
    """A TCP port on loopback that nothing listens on right now, for a server about to start: a loose
    port (:func:`jqstack.ports.loose_port`), never one an outgoing connection can take meanwhile.

    ``pair_offset``: ``port + pair_offset`` must be free as well (the cluster bus port); ``avoid``: ports
    already promised to another server.
    """
    return loose_port(pair_offset=pair_offset, avoid=avoid)


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def run_step(
    what: str,
    cmd: Sequence[str],
    *,
    note: str = "",
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 900,
    hint: str = "",
    secrets: Sequence[str] = (),
) -> str:
    """Run one provisioning command, saying what it does (``note``: e.g. ``first run only, ~3 min``)
    and showing it alive meanwhile (:func:`jqstack.progress.step`); on failure raise StackError naming
    the step, command and output (``secrets``: values the command carries that the error shows as
    ``***``)."""

    def shown(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, "***")
        return text

    with step(what, note) as running:
        try:
            proc = subprocess.Popen(
                list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except FileNotFoundError as exc:
            raise StackError(f"{what}: command not found: {cmd[0]}. {hint}".strip()) from exc
        with proc:
            command = shown(" ".join(cmd))
            out, err = _communicate(proc, running, timeout_s, f"{what}: `{command}`", hint)
        if proc.returncode != 0:
            tail = shown("\n".join((out + err).splitlines()[-30:]))
            raise StackError(f"{what}: `{command}` exited {proc.returncode}:\n{tail}\n{hint}".rstrip())
    return out


def _communicate(
    proc: subprocess.Popen[str], running: Step, timeout_s: float, what: str, hint: str
) -> tuple[str, str]:
    """Wait for ``proc`` (its output collected, none lost), telling ``running`` every second that it is
    alive; kill it at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return proc.communicate(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                proc.kill()
                proc.communicate()
                raise StackError(f"{what} did not finish within {timeout_s:.0f}s. {hint}".rstrip()) from None
            running.alive()
