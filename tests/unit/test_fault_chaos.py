"""The seeded multi-fault plan (pure): a seed reproduces its faults, the run fills its minutes, every fault
of the catalogue is one the single-node stack can inject."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from loadtest.faults.chaos import CATALOGUE, FAULT_S, GAP_S, chaos_scenario, daily_seed, plan
from loadtest.faults.scenarios import SCENARIOS


def test_a_seed_reproduces_its_plan_and_another_seed_differs() -> None:
    assert plan(7, 5) == plan(7, 5)
    assert plan(7, 5) != plan(8, 5)
    assert plan(7, 2) == plan(7, 5)[: len(plan(7, 2))], "a longer run of a seed begins as the shorter one"


def test_a_plan_fills_its_minutes_without_repeating_a_fault_twice_in_a_row() -> None:
    steps = plan(20261128, 5)
    budget = sum(s.gap_s + FAULT_S for s in steps)
    assert 300 <= budget < 300 + GAP_S[1] + FAULT_S
    assert all(GAP_S[0] <= s.gap_s <= GAP_S[1] for s in steps)
    assert all(a.fault != b.fault for a, b in itertools.pairwise(steps))
    assert {s.fault for s in plan(1, 60)} == set(CATALOGUE), "a long run draws every fault"
    assert len(plan(1, 0.01)) == 1


def test_the_catalogue_holds_single_stack_faults_the_scenarios_run_on_the_same_links() -> None:
    by_fault = {s.fault: s for s in SCENARIOS}
    scenario = chaos_scenario(3, 1)
    for name, fault in CATALOGUE.items():
        single = by_fault[fault]
        assert single.name == name
        assert single.servers in ("shared", "own"), name
        assert not single.consul_state_lost, name
        assert not single.graceful, name
        assert set(single.links) <= set(scenario.links), name
    assert (scenario.name, scenario.servers) == ("chaos-3", "own")


def test_the_daily_seed_is_the_utc_date() -> None:
    assert daily_seed(datetime(2026, 11, 28, 23, 59, tzinfo=UTC)) == 20261128
