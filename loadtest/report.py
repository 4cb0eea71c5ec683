"""What every benchmark shares: repetitions with median and spread, machine facts, and a saved report.

A report is a folder ``<results>/<scenario>-<UTC timestamp>/`` with ``results.json`` (every figure and
every repetition), ``report.md`` (the table a person reads) and any plots the scenario draws. The results
root is ``JOBQ_RESULTS_DIR`` or ``JOBQ_HOME/results``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["Figure", "Report", "machine_facts", "ratio_table", "repeat", "results_root"]


@dataclass
class Figure:
    """One measured quantity over repetitions (higher or lower is better, as ``unit`` says)."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def spread(self) -> float:
        """Half the range over repetitions, as a fraction of the median (0.05 = ±5 %)."""
        if len(self.samples) < 2 or not self.median:
            return 0.0
        return (max(self.samples) - min(self.samples)) / 2 / abs(self.median)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "median": self.median, "spread": self.spread}


def repeat(fn: Callable[[], dict[str, float]], times: int) -> dict[str, list[float]]:
    """Run ``fn`` ``times`` times; gather each returned figure into a list of samples."""
    out: dict[str, list[float]] = {}
    for _ in range(times):
        for key, value in fn().items():
            out.setdefault(key, []).append(value)
    return out


async def until(
    check: Callable[[], Awaitable[bool]],
    what: str,
    timeout_s: float,
    *,
    alive: Callable[[], None] = lambda: None,
    poll_s: float = 0.05,
) -> None:
    """Wait until ``check()`` is true, polling every ``poll_s``; ``alive()`` raises when what the bench
    runs has died meanwhile. A :class:`RuntimeError` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done within {timeout_s:g} s")
        await asyncio.sleep(poll_s)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def machine_facts(extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Core count, CPU model, Python and library versions: enough to compare two reports honestly."""
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {d: _version(d) for d in ("jobq", "confluent-kafka", "redis", "aiohttp", "orjson")}
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {**versions, **(extra or {})},
    }


def results_root() -> Path:
    env = os.environ.get("JOBQ_RESULTS_DIR")
    if env:
        return Path(env)
    home = Path(os.environ.get("JOBQ_HOME", Path.home() / ".cache" / "jobq")).expanduser()
    return home / "results"


@dataclass
class Report:
    """The figures of one scenario run, saved as JSON and markdown."""

    scenario: str
    params: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    artifacts: dict[str, Callable[[Path], None]] = field(default_factory=dict)
    """File name → a function that writes it (plots) into the report folder when it is saved; images
    are shown in ``report.md``, other files linked."""
    sections: list[str] = field(default_factory=list)
    """Markdown blocks (with headings of their own) after the notes of ``report.md``."""
    summary: str = ""
    """A markdown table the command line prints instead of the figures' (also one of ``sections``)."""

    def add(self, name: str, unit: str, samples: list[float]) -> Figure:
        fig = Figure(name, unit, list(samples))
        self.figures.append(fig)
        return fig

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "started": datetime.fromtimestamp(self.started, UTC).isoformat(),
            "params": self.params,
            "machine": machine_facts(),
            "figures": {f.name: f.as_dict() for f in self.figures},
            "notes": self.notes,
        }

    def markdown(self) -> str:
        doc = self.as_dict()
        lines = [f"# jobq bench {self.scenario}", "", f"Run at {doc['started']}; params `{self.params}`.", ""]
        m = doc["machine"]
        lines += [f"Machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}; {m['versions']}", ""]
        lines += ["| figure | median | unit | spread | samples |", "|---|---:|---|---:|---|"]
        for f in self.figures:
            samples = ", ".join(f"{s:.4g}" for s in f.samples)
            lines.append(f"| {f.name} | {f.median:.4g} | {f.unit} | ±{f.spread:.1%} | {samples} |")
        lines += ["", *(f"- {n}" for n in self.notes)]
        lines += [line for section in self.sections for line in ("", section)]
        images = [name for name in self.artifacts if name.endswith((".png", ".svg", ".jpg"))]
        others = [f"[{name}]({name})" for name in self.artifacts if name not in images]
        lines += ["", *(f"![{name}]({name})" for name in images)]
        lines += [f"Files: {', '.join(others)}"] if others else []
        return "\n".join(lines) + "\n"

    def save(self, root: Path | None = None) -> Path:
        stamp = datetime.fromtimestamp(self.started, UTC).strftime("%Y%m%dT%H%M%SZ")
        folder = (root or results_root()) / f"{self.scenario}-{stamp}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(self.as_dict(), indent=2))
        (folder / "report.md").write_text(self.markdown())
        for name, write in self.artifacts.items():
            write(folder / name)
        return folder


def ratio_table(
    title: str, samples: dict[str, list[float]], measures: Sequence[str], systems: Sequence[str], digits: int
) -> str:
    """A markdown table of each measure's median per system (``samples`` named ``"<measure>: <system>"``;
    "—" where a system has none), then jobq over the floor and over a baseline where they ran: the ratio
    per repetition, then its median."""
    others = [s for s in ("floor", "baseline") if s in systems]
    lines = [
        title,
        "",
        f"| measure | {' | '.join(systems)} |" + "".join(f" jobq / {o} |" for o in others),
        "|---|" + "---:|" * (len(systems) + len(others)),
    ]
    for measure in measures:
        got = {s: samples.get(f"{measure}: {s}", []) for s in systems}
        cells = [f"{statistics.median(got[s]):.{digits}f}" if got[s] else "—" for s in systems]
        for other in others:
            ratios = [j / o for j, o in zip(got["jobq"], got[other], strict=True) if o]
            cells.append(f"{statistics.median(ratios):.2f}×" if ratios else "—")
        lines.append(f"| {measure} | {' | '.join(cells)} |")
    return "\n".join(lines)
