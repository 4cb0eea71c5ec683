"""The one process supervisor: start a child, wait until it is really ready, stop it and all it started.

Every jobq tool that runs processes uses this module: the stack's servers (detached, recorded by pid and
stopped later, possibly by another ``jobq`` invocation), the demo's services, the benchmarks' gateways,
relays and workers, and the tests' relays and workers.

* **Start**: each child gets its own session, hence its own process group (Ctrl-C in a shell reaches the
  parent only, which stops the children in order), with stdout and stderr in a log file (or discarded,
  a pipe, or the parent's).
* **Ready**: a real probe (an HTTP answer, an open TCP port, a Redis ``PING``) polled until a deadline; a
  child that exits meanwhile fails at once (:class:`ChildExited`) with the tail of its log.
* **Stop**: SIGTERM to the leader (it stops its own children in order), then to what it left in its
  group, within a grace period shared by every child stopped together; then SIGKILL to the groups that
  linger, and the children are reaped: nothing is left behind.

Owned children are :class:`Child` objects, started one by one (:func:`start`) or as a group
(:class:`Children`, a context manager). Servers that outlive this process are plain pids (:func:`spawn`,
:func:`alive`, :func:`terminate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from jqstack.errors import StackError
from jqstack.procs import log_tail

__all__ = [
    "Child",
    "ChildExited",
    "Children",
    "Output",
    "Probe",
    "alive",
    "http_ok",
    "python_m",
    "spawn",
    "start",
    "stop_pids",
    "tcp_open",
    "terminate",
    "wait_until",
]

Output = Path | Literal["discard", "pipe", "inherit"]
"""Where a child's stdout and stderr go: appended to a log file, discarded, a pipe, or the parent's."""

Probe = Callable[[], bool]
"""A readiness check: true once the service answers; an exception counts as "not yet"."""

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Children of this process by pid: reaped when they end, so none lingers as a zombie."""

_POLL_S = 0.05
"""How often a stop re-checks whether the groups it signalled are gone."""


class ChildExited(StackError):
    """A child ended while we waited for it to become ready (the message holds its log tail)."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


# ---- probes --------------------------------------------------------------------------------------------
def http_ok(url: str, timeout_s: float = 5.0) -> Probe:
    """A probe: ``url`` answers a GET with a 2xx status."""

    def probe() -> bool:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return 200 <= int(response.status) < 300

    return probe


def tcp_open(host: str, port: int, timeout_s: float = 1.0) -> Probe:
    """A probe: something accepts TCP connections on ``host:port``."""

    def probe() -> bool:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True

    return probe


def _probe_says_ready(probe: Probe) -> bool:
    try:
        return bool(probe())
    except Exception:  # refused, timed out, a 5xx, a half-started server: not ready yet
        return False


# ---- pids ----------------------------------------------------------------------------------------------
def alive(pid: int | None) -> bool:
    """True while ``pid`` runs (a zombie counts as dead; a zombie child of ours is reaped)."""
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
    return _stat(pid)[0] != "Z"


def _stat(pid: int | str) -> tuple[str, int]:
    """(state letter, process group) from ``/proc/<pid>/stat``; ("?", -1) when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return "?", -1
    return fields[0], int(fields[2])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by ``pid`` (every child here leads its own); the process alone if
    it leads none."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _group_alive(pid: int) -> bool:
    """True while any live process of the group led by ``pid`` is left (the leader may be gone).

    Zombies do not count: an orphaned grandchild is re-parented to PID 1, which in a container may
    never reap it, and a group of zombies would otherwise look alive forever.
    """
    if alive(pid):
        return True
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if entry.name.isdigit():
            state, group = _stat(entry.name)
            if group == pid and state != "Z":
                return True
    return False


def _wait_gone(pids: Sequence[int], deadline: float) -> list[int]:
    """Poll until every group in ``pids`` is gone or ``deadline`` passes; the groups still there."""
    left = [pid for pid in pids if _group_alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = [pid for pid in left if _group_alive(pid)]
    return left


def stop_pids(pids: Iterable[int | None], *, grace_s: float = 15.0) -> list[int]:
    """Stop process groups the way systemd's ``KillMode=mixed`` does; returns the pids that had to be killed.

    SIGTERM goes to each group's leader first, so a service stops its own children in order (a worker's
    process pool finishes within the worker's grace instead of dying with the first signal). Once a
    leader is gone, whatever it left in its group gets SIGTERM too. At the shared deadline every group
    still alive gets SIGKILL, and our children are reaped. A stopped (SIGSTOP) group is continued first,
    or it would never see the TERM. Idempotent: pids already gone are skipped.
    """
    given = [pid for pid in pids if pid]
    running = [pid for pid in given if _group_alive(pid)]
    for pid in running:
        _signal_group(pid, signal.SIGCONT)
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    termed: set[int] = set()
    left = running
    while left:
        for pid in left:
            if pid not in termed and not alive(pid):  # the leader is done; the rest of its group next
                _signal_group(pid, signal.SIGTERM)
                termed.add(pid)
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
        left = [pid for pid in left if _group_alive(pid)]
    killed = [pid for pid in left if _group_alive(pid)]
    for pid in killed:
        _signal_group(pid, signal.SIGKILL)
    _wait_gone(killed, time.monotonic() + 10)
    for pid in given:
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)
    return killed


def terminate(pid: int | None, *, timeout_s: float = 15.0) -> bool:
    """Stop one process group (see :func:`stop_pids`); True if it had to be killed."""
    return bool(stop_pids([pid], grace_s=timeout_s))


def wait_until(
    check: Probe,
    *,
    what: str,
    timeout_s: float,
    pid: int | None = None,
    log: Path | None = None,
    interval_s: float = 0.1,
) -> None:
    """Poll ``check`` until true; :class:`ChildExited` as soon as ``pid`` dies, StackError at the
    deadline, both with the tail of ``log``."""
    deadline = time.monotonic() + timeout_s
    ours = _CHILDREN.get(pid) if pid else None  # alive() forgets it once it ended
    while True:
        if pid is not None and not alive(pid):
            code = ours.returncode if ours is not None else None
            raise ChildExited(f"{what}: the process (pid {pid}) exited while starting.{_tail(log)}", code)
        if _probe_says_ready(check):
            return
        if time.monotonic() > deadline:
            raise StackError(f"{what}: not ready after {timeout_s:.0f}s.{_tail(log)}")
        time.sleep(interval_s)


def _tail(log: Path | None) -> str:
    return f" Log tail:\n{log_tail(log)}" if log else ""


# ---- owned children ------------------------------------------------------------------------------------
def python_m(module: str, *args: str) -> list[str]:
    """``python -m module args...`` with this interpreter (the argv of every jobq service)."""
    return [sys.executable, "-m", module, *args]


def _popen(
    argv: Sequence[str], *, output: Output, env: Mapping[str, str] | None, cwd: Path | None
) -> subprocess.Popen[bytes]:
    out: IO[bytes] | int | None
    if isinstance(output, Path):
        output.parent.mkdir(parents=True, exist_ok=True)
        out = output.open("ab")
    else:
        out = {"discard": subprocess.DEVNULL, "pipe": subprocess.PIPE, "inherit": None}[output]
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        if isinstance(output, Path) and not isinstance(out, int) and out is not None:
            out.close()  # the child has its own copy of the descriptor
    _CHILDREN[proc.pid] = proc
    return proc


def spawn(
    cmd: Sequence[str], *, log: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> int:
    """Start a detached server writing to ``log``; return its pid (stopped later with :func:`terminate`,
    possibly by another process that read the pid from a state file)."""
    return _popen(cmd, output=log, env=env, cwd=cwd).pid


@dataclass
class Child:
    """A child process of ours, leading its own process group (signals reach all of it)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once it ended (negative: the signal that ended it), else None."""
        return self.proc.poll()

    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the child's whole group (SIGSTOP/SIGCONT pause and resume all of it; a
        SIGKILL here simulates a crash — stopping is :meth:`stop`)."""
        if self.running():
            _signal_group(self.pid, sig)

    def wait_ready(
        self, probe: Probe, *, timeout_s: float, what: str | None = None, interval_s: float = 0.1
    ) -> None:
        """Block until ``probe()`` is true; :class:`ChildExited` at once if the child exits, StackError
        after ``timeout_s``; both name ``what`` (default: the child's name) and hold its log tail."""
        wait_until(
            probe,
            what=what or self.name,
            timeout_s=timeout_s,
            pid=self.pid,
            log=self.log,
            interval_s=interval_s,
        )

    async def wait_ready_async(
        self, probe: Probe, *, timeout_s: float, what: str | None = None, interval_s: float = 0.1
    ) -> None:
        """:meth:`wait_ready` for async code: the probe runs in a thread, the loop keeps running."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.running():
                raise ChildExited(
                    f"{what or self.name}: the process (pid {self.pid}) exited with {self.returncode} "
                    f"while starting.{_tail(self.log)}",
                    self.returncode,
                )
            if await asyncio.to_thread(_probe_says_ready, probe):
                return
            if time.monotonic() > deadline:
                raise StackError(f"{what or self.name}: not ready after {timeout_s:.0f}s.{_tail(self.log)}")
            await asyncio.sleep(interval_s)

    def wait(self, timeout_s: float) -> int:
        """The exit code, waiting up to ``timeout_s`` (``subprocess.TimeoutExpired`` after that)."""
        return self.proc.wait(timeout_s)

    async def exited(self, timeout_s: float) -> int:
        """Await the child's exit (polled, the loop keeps running); TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (code := self.proc.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} (pid {self.pid}) still runs after {timeout_s:.0f}s")
            await asyncio.sleep(_POLL_S)
        return code

    def stop(self, grace_s: float = 15.0) -> bool:
        """TERM the group, wait up to ``grace_s``, KILL what is left, reap; True if it had to kill.
        Idempotent."""
        return terminate(self.pid, timeout_s=grace_s)


def start(
    name: str,
    argv: Sequence[str],
    *,
    output: Output = "discard",
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Child:
    """Start ``argv`` as a :class:`Child` in its own session; ``output`` as in :data:`Output`."""
    proc = _popen(argv, output=output, env=env, cwd=cwd)
    return Child(name, proc, output if isinstance(output, Path) else None)


RESTARTS = 5
"""How many times :meth:`Children.revive` starts one child again."""


@dataclass(frozen=True, slots=True)
class _Launch:
    argv: Sequence[str]
    output: Output
    env: Mapping[str, str] | None
    cwd: Path | None


@dataclass
class Children:
    """Children started together and stopped together with one shared grace deadline.

    A context manager: leaving the ``with`` block (normally or by an exception) stops every child.
    """

    grace_s: float = 15.0
    members: list[Child] = field(default_factory=list)
    _launches: list[_Launch] = field(default_factory=list)
    _restarts: list[int] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        output: Output = "discard",
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        """Start one more child (see :func:`start`); it is stopped with the others."""
        child = start(name, argv, output=output, env=env, cwd=cwd)
        self.members.append(child)
        self._launches.append(_Launch(argv, output, env, cwd))
        self._restarts.append(0)
        return child

    def revive(self) -> list[str]:
        """Start again, as it was started, each child that exited with status 1 — a server it needs did
        not answer (the retriable exit of every jobq service and command) — as a supervisor that restarts
        on failure would, up to :data:`RESTARTS` times each; the names started again. Any other exit, or
        one more, is left for :meth:`dead`."""
        again = []
        for i, child in enumerate(self.members):
            if child.returncode == 1 and self._restarts[i] < RESTARTS:
                launch = self._launches[i]
                self._restarts[i] += 1
                self.members[i] = start(
                    child.name, launch.argv, output=launch.output, env=launch.env, cwd=launch.cwd
                )
                again.append(child.name)
        return again

    def __iter__(self) -> Iterator[Child]:
        return iter(self.members)

    def pids(self) -> dict[str, int]:
        return {c.name: c.pid for c in self.members}

    def dead(self) -> list[str]:
        """``name (exit N)`` of every child that has ended."""
        return [f"{c.name} (exit {c.returncode})" for c in self.members if c.returncode is not None]

    def stop(self, grace_s: float | None = None) -> list[str]:
        """Stop every child (see :func:`stop_pids`); the names of those that had to be killed."""
        grace = self.grace_s if grace_s is None else grace_s
        killed = set(stop_pids([c.pid for c in self.members], grace_s=grace))
        return [c.name for c in self.members if c.pid in killed]

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
