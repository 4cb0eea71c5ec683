"""The promise under faults: every scenario of :mod:`loadtest.faults.scenarios` under load through the real
gateway → Kafka → relay → Redis → worker (+ scheduler) path, judged by the one checker.

Scenarios that kill no server run on the session's servers; the others get a private stack per shape
(one node of each; three Kafka brokers; a six-node Redis Cluster), shared by the tests of that shape and
purged after the package (``tests/faults/conftest.py``). Consecutive scenarios with the same servers and
settings run on one path of processes (:class:`loadtest.faults.run.Pipelines`: each faults, restarts and
heals what it touched, and is judged on its own jobs only). The verdicts of the session are saved as a
report (``JOBQ_HOME/results/faults-<time>/``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jqstack.manager import Stack
from jqstack.testing.backends import SessionStack
from loadtest.faults.report import FaultReport
from loadtest.faults.run import Pipelines, Scenario, Servers, run_scenario
from loadtest.faults.scenarios import SCENARIOS
from loadtest.faults.stacks import can_mount

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def fault_report() -> Iterator[FaultReport]:
    report = FaultReport("faults", {"source": "pytest tests/faults/test_scenarios.py"})
    yield report
    if report.rows:
        print(f"\nfault report: {report.save()}")


@pytest.fixture(scope="module")
def pipelines(
    tmp_path_factory: pytest.TempPathFactory, private_stacks: Callable[[Servers], Stack]
) -> Iterator[Pipelines]:
    """The running paths the module's scenarios share (stopped before the private stacks go)."""
    paths = Pipelines(tmp_path_factory.mktemp("paths"))
    yield paths
    asyncio.run(paths.close())
    print(f"\nfault paths started: {paths.started} for the module's scenarios")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_scenario(
    scenario: Scenario,
    stack: SessionStack,
    private_stacks: Callable[[Servers], Stack],
    pipelines: Pipelines,
    fault_report: FaultReport,
    tmp_path: Path,
) -> None:
    if scenario.servers == "disk" and not can_mount():
        pytest.skip("the disk scenarios mount a small tmpfs per server: that needs root (CI has it)")
    await pipelines.leave_servers(scenario.servers)  # before another shape's stack stops this one's
    own = None if scenario.servers == "shared" else private_stacks(scenario.servers)
    ep = own.endpoints if own is not None else stack.endpoints
    verdict = await run_scenario(scenario, ep, tmp_path, stack=own, pipelines=pipelines)
    fault_report.add_verdict(scenario, verdict)
    print(verdict)
    assert verdict.acked > 0
    assert not verdict.notes["exited"], "a process the scenario did not kill exited (see its log)"
    assert verdict.early == 0, f"a delayed job ran before it was due: {verdict.notes.get('early_ms')}"
    assert verdict.claimed_early == 0, "Redis records a delayed job claimed before its run_at"
    if not scenario.consul_state_lost:  # Consul's lock-delay keeps a new holder out until the old one knows
        assert verdict.overlapping_terms == 0, "two relays held the topic's lock at once (their logs say so)"
    if scenario.graceful:
        assert verdict.duplicates == 0, "a job ran twice although every stop was graceful"
    if not scenario.loss_allowed:
        assert verdict.lost == 0, f"acknowledged jobs never ran: {verdict.lost_ids}"
    bite = verdict.check("fault-took-effect")
    assert not bite.failed, f"the fault did not take effect: {list(bite.ids)} ({dict(bite.detail)})"
    allowed = {"acked-not-lost"} if scenario.loss_allowed else set()
    broken = [c for c in verdict.failed_checks if c.name not in allowed]
    assert not broken, "invariants broken: " + "; ".join(
        f"{c.name} {c.violations} of {c.checked}: {list(c.ids)} {dict(c.detail)}" for c in broken
    )
