"""The fault suite's report: one row per scenario — acked, executed, lost, duplicates, recovery — saved as
markdown and JSON like every benchmark's (``<results>/faults-<time>/``), each row with its reproduce command.
``docs/reliability.md`` holds the latest copy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.faults.checker import Verdict
from loadtest.faults.run import Scenario
from loadtest.report import Report

__all__ = ["FaultReport", "reproduce"]


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
        lines = [
            "| scenario | fault | acks | acked | executed | lost | duplicates | unacked ran | failed req. "
            "| retried | early (handler/claim) | two holders | recovery s | reproduce |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for s, v in self.rows:
            lost = f"**{v.lost}**" if v.lost and not s.loss_allowed else str(v.lost)
            lines.append(
                f"| {s.name} | {s.title} | {s.acks} | {v.acked} | {v.executed} | {lost} | {v.duplicates} "
                f"| {v.unacked_executed} | {v.failed_requests} | {v.retried} | {v.early}/{v.claimed_early} "
                f"| {v.overlapping_terms} | {v.recovery_s:.1f} "
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
