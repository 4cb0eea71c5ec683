"""Starting, watching and stopping the stack's server processes.

Servers run detached (their own session, so Ctrl-C in a shell does not reach them) with stdout and
stderr in a log file; the pid is recorded by the caller. Every wait has a deadline: a server that does not
become ready, or dies while we wait, raises :class:`StackError` with the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jqcore.errors import StackError

__all__ = ["alive", "free_port", "log_tail", "run_step", "spawn", "terminate", "wait_until"]


def free_port(*, below: int | None = None, pair_offset: int | None = None) -> int:
    """A TCP port on loopback that nothing listens on right now.

    ``below``: the port must be lower (Redis Cluster needs ``port + 10000`` to be a valid port too);
    ``pair_offset``: ``port + pair_offset`` must be free as well (the cluster bus port).
    """
    if below is None and pair_offset is None:
        return _bind_free(0)
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, below or 60000)
        if _is_free(port) and (pair_offset is None or _is_free(port + pair_offset)):
            return port
    raise OSError("no free loopback port pair found")


def _bind_free(port: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
        return int(s.getsockname()[1])


def _is_free(port: int) -> bool:
    try:
        _bind_free(port)
    except OSError:
        return False
    return True


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
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 900,
    hint: str = "",
) -> str:
    """Run one provisioning command; on failure raise StackError naming the step, command and output."""
    try:
        proc = subprocess.run(
            list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise StackError(f"{what}: command not found: {cmd[0]}. {hint}".strip()) from exc
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"{what}: `{' '.join(cmd)}` did not finish within {timeout_s:.0f}s. {hint}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise StackError(f"{what}: `{' '.join(cmd)}` exited {proc.returncode}:\n{tail}\n{hint}".rstrip())
    return proc.stdout


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def spawn(
    cmd: Sequence[str], *, log: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> int:
    """Start a detached server process writing to ``log``; return its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc  # keeps Popen from warning "still running" when collected; reaped later
    return proc.pid


def alive(pid: int | None) -> bool:
    """True while ``pid`` runs (a zombie child of ours counts as dead and is reaped)."""
    if not pid:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def wait_until(
    check: Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
    pid: int | None = None,
    log: Path | None = None,
    interval_s: float = 0.1,
) -> None:
    """Poll ``check`` until true; fail early if ``pid`` dies, and at the deadline with the log tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid is not None and not alive(pid):
            tail = log_tail(log) if log else ""
            raise StackError(f"{what}: the process (pid {pid}) exited while starting. Log tail:\n{tail}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(interval_s)
    tail = log_tail(log) if log else ""
    raise StackError(f"{what}: not ready after {timeout_s:.0f}s. Log tail:\n{tail}")


def terminate(pid: int | None, *, timeout_s: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it lingers. Idempotent."""
    try:
        _stop_group(pid, timeout_s)
    finally:
        child = _CHILDREN.pop(pid or 0, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)


def _stop_group(pid: int | None, timeout_s: float) -> None:
    if not pid or not alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    while alive(pid) and time.monotonic() < deadline + 5:
        time.sleep(0.05)
