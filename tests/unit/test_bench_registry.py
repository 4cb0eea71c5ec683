"""``jobq bench`` knows exactly the scenarios ``loadtest.registry`` can run."""

from __future__ import annotations

from jobq.commands.bench import SCENARIO_NAMES
from loadtest.registry import SCENARIOS


def test_cli_names_every_registered_scenario() -> None:
    assert tuple(SCENARIOS) == SCENARIO_NAMES
