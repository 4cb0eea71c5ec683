"""A seeded multi-fault run (:mod:`loadtest.faults.chaos`) under load, judged by every invariant of the
checker v2. The seed is today's (UTC, ``YYYYMMDD``) unless ``JOBQ_CHAOS_SEED`` names one, and is printed with
the command that replays its faults; ``JOBQ_CHAOS_MINUTES`` sets the length (the suite's run is short: the
long seeded runs are in ``docs/reliability.md``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jqstack.manager import Stack
from loadtest.faults.chaos import chaos_scenario, daily_seed
from loadtest.faults.run import Servers, run_scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]

MINUTES = float(os.environ.get("JOBQ_CHAOS_MINUTES", "1"))


async def test_a_seeded_run_of_random_faults_breaks_no_promise(
    private_stacks: Callable[[Servers], Stack], tmp_path: Path
) -> None:
    seed = int(os.environ.get("JOBQ_CHAOS_SEED") or daily_seed())
    scenario = chaos_scenario(seed, MINUTES)
    print(f"\n{scenario.title}\nreplay: ./run bench faults --chaos --seed {seed} --minutes {MINUTES:g}")
    own = private_stacks(scenario.servers)
    verdict = await run_scenario(scenario, own.endpoints, tmp_path, stack=own, cap_s=300)
    print(verdict)
    steps = verdict.notes["chaos"]["steps"]
    assert len(steps) == len(scenario.title.split(": ", 1)[1].split(", ")), "every planned fault ran"
    assert not verdict.notes["exited"], "a process the run did not kill exited (see its log)"
    assert verdict.lost == 0, f"acknowledged jobs never ran: {verdict.lost_ids}"
    assert verdict.overlapping_terms == 0, "two relays held the topic's lock at once (their logs say so)"
    assert not verdict.failed_checks, "invariants broken: " + "; ".join(
        f"{c.name} {c.violations} of {c.checked}: {list(c.ids)} {dict(c.detail)}"
        for c in verdict.failed_checks
    )
