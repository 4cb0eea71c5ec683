"""A smoke run of the lifecycle-events benchmark with tiny sizes on the session's servers: events off
and on, one scheduler's shipping, the history query under a short flow (it starts Spark); the report
and its plot are written (no speed asserted)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jqstack.manager import Endpoints
from loadtest import history_bench

pytestmark = pytest.mark.spark


@pytest.mark.timeout(600)  # ~1.5 min alone; Spark's first batch is slow on a busy machine
def test_history_scenario_runs_on_the_session_stack(endpoints: Endpoints, spark: Any) -> None:
    """``spark``: the run's session, which the benchmark uses instead of starting (and stopping) its own."""
    assert spark is not None
    report = history_bench.run(quick=True, endpoints=endpoints)
    folder = report.save()
    figures = {
        k: f["median"] for k, f in json.loads((folder / "results.json").read_text())["figures"].items()
    }
    at = f" at {history_bench.QUICK.rates[0]:g} jobs/s"
    for name in (
        "drain, events off",
        "drain, events on",
        "drain ratio events on / off",
        "events shipped per second, one scheduler",
        "history lag p50" + at,
        "spark batch throughput (rows / batch time)" + at,
    ):
        assert figures[name] > 0, name
    assert figures["events per job (enqueue, claim, complete)"] == 3
    assert figures["events per Kafka record"] > 10, "a backlog ships in full rounds, a record per partition"
    assert figures["events dropped at the cap"] == 0
    assert figures["history lag max" + at] >= figures["history lag p50" + at]
    assert figures["all events visible after the flow" + at] >= 0
    assert (folder / "lag.png").stat().st_size > 0
