"""Smoke runs of the benchmark scenarios with tiny sizes, so the harness cannot rot (no speed asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest import drain_bench, engine_bench


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_RESULTS_DIR", str(tmp_path))


def test_drain_scenario_runs_and_saves_a_report() -> None:
    report = drain_bench.run(quick=True)
    folder = report.save()
    saved = json.loads((folder / "results.json").read_text())
    figures = saved["figures"]
    assert {"drain", "worker CPU s per 1k jobs", "redis CPU s per 1k jobs"} <= set(figures)
    assert all(f["median"] > 0 for f in figures.values())


def test_engine_scenario_runs_and_saves_a_report() -> None:
    report = engine_bench.run(quick=True)
    folder = report.save()
    assert (folder / "report.md").exists()
    figures = {f.name: f for f in report.figures}
    assert figures["enqueue_batch"].median > 0
    assert figures["lateness min"].median >= 0, "a delayed job was claimed before its time"
