"""A smoke run of ``./run bench neighbours`` (a 300-job backlog) on the session's stack: the neighbour is
measured alone and beside each held case, and after each release every held job ran once, in order per
exclusivity key, with the global memory guard never holding a batch (no speed asserted)."""

from __future__ import annotations

import json
import math

from jqstack.manager import Endpoints
from loadtest import neighbours_bench


def test_neighbours_reports_each_case_and_its_held_jobs_ran_once_in_order(endpoints: Endpoints) -> None:
    report = neighbours_bench.run(quick=True, endpoints=endpoints)
    folder = report.save()
    doc = json.loads((folder / "results.json").read_text())
    figures = {name: fig["median"] for name, fig in doc["figures"].items()}
    assert doc["params"]["backlog"] == 300
    for case in neighbours_bench.CASES:
        for name in ("alone p50", "alone p99", "beside p50", "beside p99", "p99 ratio"):
            value = figures[f"{case}: {name}"]
            assert math.isfinite(value), (case, name, value)
            assert value >= 0, (case, name, value)
        assert f"{case}: held for {case}" in doc["notes"], "held for the case's reason"
        assert figures[f"{case}: held jobs"] > 300, "the backlog and the window's jobs"
        assert figures[f"{case}: missing"] == 0, case
        assert figures[f"{case}: duplicated"] == 0, case
        assert figures[f"{case}: out of order"] == 0, case
        assert figures[f"{case}: guard held"] == 0, case
    table = (folder / "report.md").read_text()
    assert "| case | held for | alone p50 | alone p99 | beside p50 | beside p99 |" in table
