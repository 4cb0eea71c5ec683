"""The fault suite's report: one row per scenario — acked, executed, lost, duplicates, recovery, then each
invariant's verdict and the fault's proof — saved as markdown and JSON like every benchmark's
(``<results>/faults-<time>/``), each row with its reproduce command. ``docs/reliability.md`` holds the
latest copy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.faults.checker import Verdict
from loadtest.faults.run import Scenario
from loadtest.report import Report

__all__ = ["FaultReport", "reproduce"]


def _legal(v: Verdict) -> str:
    """The duplicates the ``one-live-attempt`` check found legal, by cause (``2 seq. + 1 lease``)."""
    causes: dict[str, int] = next(
        (c.detail.get("duplicates", {}) for c in v.checks if c.name == "one-live-attempt"), {}
    )
    return f"{causes.get('sequential', 0)} seq. + {causes.get('lease_expired', 0)} lease"


def reproduce(name: str) -> str:
    return f".venv/bin/pytest 'tests/faults/test_scenarios.py::test_scenario[{name}]'"


@dataclass
class FaultReport(Report):
    rows: list[tuple[Scenario, Verdict]] = field(default_factory=list)

    def add_verdict(self, scenario: Scenario, verdict: Verdict) -> None:
        self.rows.append((scenario, verdict))

    def as_dict(self) -> dict[str, Any]:
        doc = super().as_dict()
        doc["scenarios"] = [
            {
                "title": s.title,
                "servers": s.servers,
                "acks": s.acks,
                "loss_allowed": s.loss_allowed,
                **v.as_dict(),
            }
            for s, v in self.rows
        ]
        return doc

    def table(self) -> str:
        """One row per scenario: the counts, then each invariant (``✓ n``: n judged, none broke it;
        ``✗ k of n``; ``n/a``: the scenario's load gave it nothing to judge), the fault's proof last."""
        names = list(dict.fromkeys(c.name for _, v in self.rows for c in v.checks))
        lines = [
            "| scenario | fault | acks | acked | executed | lost | dup. (legal) | failed req. | retried "
            "| recovery s | two holders | " + " | ".join(names) + " | reproduce |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---|" * len(names) + "---|",
        ]
        for s, v in self.rows:
            lost = f"**{v.lost}**" if v.lost and not s.loss_allowed else str(v.lost)
            cells = {c.name: c.cell() for c in v.checks}
            lines.append(
                f"| {s.name} | {s.title} | {s.acks} | {v.acked} | {v.executed} | {lost} "
                f"| {v.duplicates} ({_legal(v)}) | {v.failed_requests} | {v.retried} | {v.recovery_s:.1f} "
                f"| {v.overlapping_terms} | " + " | ".join(cells.get(n, "n/a") for n in names) + " "
                f"| `{reproduce(s.name)}` |"
            )
        return "\n".join(lines)

    def markdown(self) -> str:
        text = super().markdown()
        if not self.figures:  # a test run has verdicts only: no empty figure table
            text = text.replace(
                "| figure | median | unit | spread | samples |\n|---|---:|---|---:|---|\n", ""
            )
        return text.rstrip() + "\n\n" + self.table() + "\n"
