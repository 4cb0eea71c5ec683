"""``./run bench faults``: every fault scenario of :mod:`loadtest.faults.scenarios` in one run, on stacks of
its own (one single-node stack for the scenarios that kill no server or one of each, one whose Redis and
Kafka sit on small tmpfs mounts, three Kafka brokers, a six-node Redis Cluster), and the report
``docs/reliability.md`` copies: per scenario acked, executed, lost, duplicates, recovery time, and each
invariant's verdict with the fault's proof.
``--quick`` runs the scenarios that need only the single-node stack. ``--chaos --seed N --minutes M``
runs one seeded multi-fault scenario instead (:mod:`loadtest.faults.chaos`).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from loadtest.faults.chaos import chaos_scenario
from loadtest.faults.report import FaultReport
from loadtest.faults.run import Servers, run_scenario
from loadtest.faults.scenarios import SCENARIOS
from loadtest.faults.stacks import can_mount, private_stack

__all__ = ["run", "run_chaos"]

ORDER: tuple[Servers, ...] = ("own", "disk", "kafka3", "cluster")
"""Stack shapes in the order they run; ``shared`` scenarios run on the ``own`` stack (they kill no server);
``disk`` only as root (it mounts a tmpfs per server)."""


def run(quick: bool = False) -> FaultReport:
    report = FaultReport("faults", {"quick": quick})
    work = Path(tempfile.mkdtemp(prefix="jobq-faults-"))
    for shape in ORDER[:1] if quick else ORDER:
        if shape == "disk" and not can_mount():
            report.notes.append("the disk scenarios were skipped: mounting their tmpfs needs root")
            continue
        wanted = [s for s in SCENARIOS if s.servers == shape or (shape == "own" and s.servers == "shared")]
        with private_stack(shape) as stack:
            for scenario in wanted:
                folder = work / scenario.name
                verdict = asyncio.run(run_scenario(scenario, stack.endpoints, folder, stack=stack))
                report.add_verdict(scenario, verdict)
                print(f"{scenario.name}: {verdict}", flush=True)
    for name, unit, value in _totals(report):
        report.add(name, unit, [value])
    report.notes.append(f"logs and every scenario's verdict.json: {work}")
    return report


def run_chaos(seed: int, minutes: float) -> FaultReport:
    """One seeded multi-fault run on a single-node stack of its own; its seed and steps in the report."""
    scenario = chaos_scenario(seed, minutes)
    report = FaultReport("faults-chaos", {"seed": seed, "minutes": minutes})
    print(f"chaos seed {seed}: {scenario.title}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="jobq-chaos-"))
    with private_stack("own") as stack:
        verdict = asyncio.run(run_scenario(scenario, stack.endpoints, work, stack=stack, cap_s=300))
    report.add_verdict(scenario, verdict)
    print(f"{scenario.name}: {verdict}", flush=True)
    for name, unit, value in _totals(report):
        report.add(name, unit, [value])
    report.notes.append(f"reproduce: ./run bench faults --chaos --seed {seed} --minutes {minutes:g}")
    report.notes.append(f"logs and the verdict.json: {work}")
    return report


def _totals(report: FaultReport) -> list[tuple[str, str, float]]:
    strict = [v for s, v in report.rows if not s.loss_allowed]
    broken = [  # acked-not-lost excepted where loss is the documented trade
        c
        for s, v in report.rows
        for c in v.failed_checks
        if not (s.loss_allowed and c.name == "acked-not-lost")
    ]
    return [
        ("scenarios", "count", float(len(report.rows))),
        ("acked jobs lost where loss is not allowed", "jobs", float(sum(v.lost for v in strict))),
        ("invariants broken (fault proofs included)", "checks", float(len(broken))),
        ("acked jobs", "jobs", float(sum(v.acked for _, v in report.rows))),
        ("duplicate executions", "jobs", float(sum(v.duplicates for _, v in report.rows))),
        ("longest recovery", "s", max((v.recovery_s for _, v in report.rows), default=0.0)),
    ]
