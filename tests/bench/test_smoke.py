"""Smoke runs of the benchmark scenarios with tiny sizes, so the harness cannot rot (no speed asserted)."""

from __future__ import annotations

import json

from jqstack.manager import Endpoints
from loadtest import (
    drain_bench,
    e2e_bench,
    engine_bench,
    events_bench,
    gate_bench,
    relay_bench,
    scheduler_bench,
)


def test_drain_scenario_runs_and_saves_a_report() -> None:
    report = drain_bench.run(quick=True)
    folder = report.save()
    saved = json.loads((folder / "results.json").read_text())
    figures = saved["figures"]
    assert {
        "drain",
        "worker CPU s per 1k jobs",
        "worker start-up CPU s",
        "redis CPU s per 1k jobs",
        "script calls per 1k jobs",
    } <= set(figures)
    assert all(f["median"] > 0 for f in figures.values())


def test_drain_of_a_batch_handler_runs_and_counts_items() -> None:
    report = drain_bench.run(quick=True, batch=500)
    figures = {f.name: f for f in report.figures}
    assert (figures["drain"].unit, report.params["batch"]) == ("items/s", 500)
    assert all(f.median > 0 for f in figures.values())


def test_engine_scenario_runs_and_saves_a_report() -> None:
    report = engine_bench.run(quick=True)
    folder = report.save()
    assert (folder / "report.md").exists()
    figures = {f.name: f for f in report.figures}
    assert figures["enqueue_batch"].median > 0
    assert figures["lateness min"].median >= 0, "a delayed job was claimed before its time"


def test_events_scenario_writes_one_stream_entry_per_script_call() -> None:
    report = events_bench.run(quick=True)
    figures = {f.name: f.median for f in report.figures}
    # 4,000 jobs: 2 enqueue calls and 81 rounds of 50 — one entry each, not one per event (12,000)
    assert figures["stream entries per 1k jobs"] < 25, figures
    assert all(v > 0 for k, v in figures.items() if k.startswith(("ship", "rounds, events on"))), figures


def test_gate_relay_and_e2e_scenarios_run_on_the_session_stack(endpoints: Endpoints) -> None:
    """The Kafka scenarios with tiny sizes on the session's servers (their own topics, queues and keys)."""
    for module in (gate_bench, relay_bench, e2e_bench):
        report = module.run(quick=True, endpoints=endpoints)
        folder = report.save()
        assert (folder / "report.md").exists()
        figures = {f.name: f.median for f in report.figures}
        rates = [v for k, v in figures.items() if k.startswith(("batch", "relay throughput", "sustained"))]
        assert rates, figures
        assert all(v > 0 for v in rates), figures
    e2e = {f.name: f.median for f in report.figures}
    assert e2e["enqueue→started p50 at 200/s"] >= e2e["accepted→started p50 at 200/s"] > 0
    processes = ("gateway", "relay", "workers (2)", "scheduler", "redis", "system total", "generator")
    assert all(e2e[f"cpu {name}"] > 0 for name in processes), e2e  # Kafka, Consul: only if native
    assert 0 < e2e["events topic records per job at 200/s"] < 3, "≈ 3 events a job, in fewer records"


def test_scheduler_scenario_runs_on_the_session_stack(endpoints: Endpoints) -> None:
    """Three scheduler processes shipping the lifecycle events (as shipped), one SIGKILLed, a far-future
    share: every job claimed once, none early."""
    report = scheduler_bench.run(quick=True, endpoints=endpoints)
    assert (report.save() / "report.md").exists()
    figures = {f.name: f.median for f in report.figures}
    assert figures["early starts"] == figures["jobs run twice"] == figures["jobs never run"] == 0, figures
    assert figures["Redis bytes per far-future job"] > 0, figures
    assert figures["re-deal after SIGKILL"] > 0, figures
