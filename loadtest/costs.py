"""Where a benchmark's CPU goes: CPU seconds of a set of processes over a window, and sampling profiles.

* **CPU over a window** (:class:`CpuMeter`): named clocks — a process or process tree from ``/proc``
  (:func:`process_clock`), a server found by the port it listens on (:func:`listening_pid`), Redis's
  ``INFO cpu``, this process, the whole machine — read at the window's start and end; the difference
  divided by the work done in between is the cost per unit (:func:`per_unit_us`, :func:`cost_table`).
* **Profiles** (:func:`record_profiles`): ``py-spy record --format raw`` on running Python processes,
  all at once, for a few seconds; the collapsed stacks are summarised (:func:`summarise`) as the share
  of samples each ``file:function`` is on top of the stack (self time) and anywhere on it (total time).

Sampling costs the profiled process CPU: measure CPU in a window without py-spy running.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jqstack.procs import log_tail
from jqstack.supervise import start
from loadtest.cpu import TICK, cpu_s, tree_cpu_s

__all__ = [
    "CpuClock",
    "CpuMeter",
    "CpuReading",
    "FrameShare",
    "Profile",
    "StackSummary",
    "cost_table",
    "frame_key",
    "listening_pid",
    "machine_busy_s",
    "parse_collapsed",
    "per_unit_us",
    "process_clock",
    "profile_section",
    "pyspy_path",
    "record_profiles",
    "summarise",
]

CpuClock = Callable[[], float]
"""CPU seconds something has used so far (only differences between two readings mean anything)."""


# ---- CPU over a window ---------------------------------------------------------------------------------
def process_clock(*pids: int, tree: bool = True) -> CpuClock:
    """User + system CPU seconds of these processes; ``tree``: with every live descendant and the reaped
    children (a process that runs a pool of its own is counted whole)."""
    if tree:
        return lambda: tree_cpu_s(pids)
    return lambda: sum(cpu_s(pid) for pid in pids)


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has been busy (``/proc/stat``: all but idle and iowait),
    whoever used them: the kernel's network work and other tenants' processes included."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICK


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (IPv4 or IPv6) in this network namespace."""
    out: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                out.add(f"socket:[{cols[9]}]")
    return out


def listening_pid(port: int, comm: str | None = None) -> int | None:
    """The process listening on TCP ``port`` on this machine, or None (no listener, or its command name
    does not start with ``comm``: a server in a container shows up as its port forwarder, which is not
    the server)."""
    sockets = _listening_inodes(port)
    if not sockets:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if comm is not None and not (entry / "comm").read_text().startswith(comm):
                continue
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in sockets:
                    return int(entry.name)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return None


@dataclass(frozen=True)
class CpuReading:
    """Every clock of a :class:`CpuMeter` at one instant (``at``: ``time.monotonic()``)."""

    at: float
    seconds: dict[str, float]


@dataclass
class CpuMeter:
    """Named CPU clocks read together: ``used(before, after)`` is CPU seconds per name in between."""

    clocks: dict[str, CpuClock] = field(default_factory=dict)

    def read(self) -> CpuReading:
        return CpuReading(time.monotonic(), {name: clock() for name, clock in self.clocks.items()})

    @staticmethod
    def used(before: CpuReading, after: CpuReading) -> dict[str, float]:
        return {name: after.seconds[name] - s for name, s in before.seconds.items()}


def per_unit_us(used: Mapping[str, float], units: float) -> dict[str, float]:
    """CPU microseconds per unit of work (a job, a request) of each name."""
    return {name: s / units * 1e6 for name, s in used.items()} if units > 0 else {}


def cost_table(
    per_unit: Mapping[str, float],
    total: str,
    *,
    unit: str = "job",
    rate: float | None = None,
    extra: tuple[str, Mapping[str, str]] | None = None,
) -> list[str]:
    """A markdown table: µs per ``unit`` of each name and its share of ``total`` (a name in the mapping;
    the rows after it, such as the load generator, get a share of it too); ``rate`` (units/s over the
    window) adds the cores each kept busy; ``extra``: a column of its own (header, name → text)."""
    whole = per_unit.get(total, 0.0)
    header = ["process", f"CPU µs/{unit}", f"share of {total}"]
    header += ["cores busy"] if rate else []
    header += [extra[0]] if extra else []
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for name, us in per_unit.items():
        cells = [name, f"{us:,.0f}", f"{us / whole:.0%}" if whole and name != total else ""]
        cells += [f"{us * rate / 1e6:.2f}"] if rate else []
        cells += [extra[1].get(name, "")] if extra else []
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# ---- profiles ------------------------------------------------------------------------------------------
def pyspy_path() -> str | None:
    """The ``py-spy`` next to this interpreter (the venv's, from the ``bench`` extra), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class Profile:
    """One process's recording: the collapsed stacks (``frame;frame;... count`` lines, outermost frame
    first), and the process's own CPU meanwhile (to see how much of it the Python threads account for)."""

    name: str
    pid: int
    seconds: float
    rate: int
    raw: str = ""
    cpu_s: float = 0.0
    error: str | None = None


async def record_profiles(
    targets: Mapping[str, int], seconds: float, folder: Path, *, rate: int = 250
) -> dict[str, Profile]:
    """Record every target (name → pid) at once with ``py-spy record --nonblocking`` for ``seconds``;
    the raw stacks are ``folder/<name>.txt``. A recording that fails (no py-spy, no ptrace permission, a
    process gone) comes back with ``error`` set rather than raising."""
    profiles = {name: Profile(name, pid, seconds, rate) for name, pid in targets.items()}
    exe = pyspy_path()
    if exe is None:
        for p in profiles.values():
            p.error = "py-spy is not installed (pip install 'jobq[bench]')"
        return profiles
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    children = {}
    before = {name: tree_cpu_s([pid]) for name, pid in targets.items()}
    for name, pid in targets.items():
        argv = [exe, "record", "--pid", str(pid), "--duration", str(round(seconds)), "--rate", str(rate)]
        argv += ["--format", "raw", "--output", str(folder / f"{name}.txt"), "--nonblocking"]
        children[name] = start(f"py-spy {name}", argv, output=folder / f"{name}.log")
    for name, child in children.items():
        p = profiles[name]
        try:
            code = await child.exited(seconds + 60)
        except TimeoutError:
            child.stop(grace_s=5)
            code = -1
        p.cpu_s = tree_cpu_s([p.pid]) - before[name]
        out = folder / f"{name}.txt"
        if code == 0 and out.exists():
            p.raw = out.read_text()
        else:
            p.error = f"py-spy exited with {code}: {log_tail(folder / f'{name}.log', 5)}"
    return profiles


_FRAME = re.compile(r"(?P<func>.+) \((?P<file>[^()]+?)(?::(?P<line>\d+))?\)")


def frame_key(frame: str) -> str:
    """``function (file:line)`` as py-spy writes a frame → ``file:function``; other frames as they are."""
    m = _FRAME.fullmatch(frame)
    if m is None or (m["line"] is None and not m["file"].endswith((".py", ".pyx"))):
        return frame
    return f"{m['file']}:{m['func']}"


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    """Collapsed stacks (``outer;...;inner count`` per line) → (frames, samples) pairs."""
    out: list[tuple[list[str], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


@dataclass(frozen=True)
class FrameShare:
    """A ``file:function`` and its share of all samples: on top of the stack (self) and anywhere on it."""

    frame: str
    self_share: float
    total_share: float


@dataclass(frozen=True)
class StackSummary:
    samples: int
    top: list[FrameShare]


def summarise(text: str, top: int = 15) -> StackSummary:
    """The ``top`` functions by self time (line numbers merged) of collapsed stacks, with total time."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for frames, count in parse_collapsed(text):
        keys = [frame_key(f) for f in frames]
        samples += count
        own[keys[-1]] += count
        for key in set(keys):
            anywhere[key] += count
    if not samples:
        return StackSummary(0, [])
    rows = [FrameShare(k, n / samples, anywhere[k] / samples) for k, n in own.most_common(top)]
    return StackSummary(samples, rows)


def profile_section(
    profiles: Sequence[Profile], top: int = 15, files: Mapping[str, str] | None = None
) -> str:
    """Markdown: per profile, the top functions by self time, the samples beside the process's CPU, and
    a link to its raw stacks (``files``: profile name → file name in the report folder).

    py-spy samples a thread when it is not idle (by its OS state): running, or runnable and waiting for a
    core, so on a saturated machine the samples exceed the CPU the process got and a thread just woken
    from ``select`` shows there. Time in native code called from Python (a C extension) is charged to the
    calling Python function."""
    lines: list[str] = []
    for p in profiles:
        lines += ["", f"### {p.name} (pid {p.pid})", ""]
        if p.error:
            lines.append(f"Not recorded: {p.error}")
            continue
        summary = summarise(p.raw, top)
        lines.append(
            f"{summary.samples:,} samples of active Python threads in {p.seconds:g} s at {p.rate} Hz "
            f"({summary.samples / p.rate:.2f} thread-seconds); the process used {p.cpu_s:.2f} s of CPU "
            f"meanwhile ({p.cpu_s / p.seconds:.0%} of a core)"
            + (f"; raw stacks: [{files[p.name]}]({files[p.name]})" if files and p.name in files else "")
            + "."
        )
        lines += ["", "| self % | total % | file:function |", "|---:|---:|---|"]
        lines += [f"| {r.self_share:.1%} | {r.total_share:.1%} | `{r.frame}` |" for r in summary.top]
    return "\n".join(lines)
