"""A smoke run of the task-graph benchmark with tiny sizes on the session's Redis (a database of its own,
flushed between systems): jobq's graphs and the same jobs without a graph, celery's and dramatiq's graph
runners in their own virtualenvs; the report and its plot are written (no speed asserted)."""

from __future__ import annotations

import json
import math

from jqstack.manager import Endpoints
from loadtest import graph_bench

TINY = graph_bench.Sizes(fanouts=2, width=5, pipelines=2, length=4, reps=1)


def test_graph_scenario_runs_every_system_on_the_session_stack(endpoints: Endpoints) -> None:
    report = graph_bench.run(sizes=TINY, endpoints=endpoints)
    folder = report.save()
    failed = [n for n in report.notes if " failed (" in n]
    assert not failed, failed
    figures = {
        k: f["median"] for k, f in json.loads((folder / "results.json").read_text())["figures"].items()
    }
    for shape in graph_bench.SHAPES:
        for system in graph_bench.SYSTEMS:
            assert figures[f"{shape} jobs/s {system}"] > 0, (shape, system)
            assert figures[f"{shape} e2e max {system}"] >= figures[f"{shape} e2e p50 {system}"] > 0
        assert figures[f"{shape} plain jobs/s jobq"] > 0, shape
        assert figures[f"{shape} submit (graphs.create) p50 jobq"] > 0, shape
        overhead = figures[f"{shape} graph overhead per node jobq"]
        assert math.isfinite(overhead), shape  # its sign is not asserted: noise at this size
        for peer in graph_bench.PEERS:
            assert figures[f"{shape} jobs/s ratio jobq/{peer}"] > 0, (shape, peer)
    assert (folder / "graphs.png").stat().st_size > 0
    assert any(n.startswith("fan-out jobs/s: jobq") for n in report.notes), report.notes
