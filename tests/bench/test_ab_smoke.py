"""Smoke runs of the benches that compare this checkout with a baseline tree (A/B: the Lua's cost in Redis
time and instructions, the event shipper, start-up), tiny sizes and this checkout against itself, so the
harness cannot rot (no speed asserted). ``./run test`` runs them in the fault scenarios' lane."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jqstack.manager import Endpoints
from loadtest import script_ab, ship_ab, startup_bench, trickle_bench


def test_script_ab_compares_two_trees_on_one_redis() -> None:
    report = script_ab.run(Path(__file__).parents[2], quick=True)  # this checkout against itself
    names = {f.name for f in report.figures}
    trees = ("this", "baseline")
    per_job = {f"{p}, events {e}" for p in ("enqueue", "rounds") for e in ("on", "off")}
    others = {"load all scripts", "script bytes", "complete, missing job"}
    assert {f"{figure}: {t}" for figure in per_job | others for t in trees} | {"rounds: floor"} == names
    assert all(f.median > 0 for f in report.figures)
    figures = {f.name: f.median for f in report.figures}
    assert figures["script bytes: this"] == figures["script bytes: baseline"], "the same scripts"


@pytest.mark.skipif(not shutil.which("valgrind"), reason="no valgrind on this machine")
def test_script_ab_counts_two_trees_instructions_under_callgrind() -> None:
    report = script_ab.instructions(Path(__file__).parents[2], quick=True)  # this checkout against itself
    figures = {f.name: f.median for f in report.figures}
    floor = figures.pop("settle_claim rounds of 50, a job: floor")
    phases = {n.rsplit(": ", 1)[0] for n in figures}
    assert {"claim of 1, a call", "settle_claim rounds of 7, a job", "enqueue_batch of 50, a job"} <= phases
    assert {f"{p}: {t}" for p in phases for t in ("this", "baseline")} == set(figures)
    assert all(v > 10 for v in figures.values()), figures  # k instructions: each phase ran Lua
    assert 0 < floor < figures["settle_claim rounds of 50, a job: this"], "the floor's least Lua counted"
    same = (
        figures["settle_claim rounds of 50, a job: this"]
        / figures["settle_claim rounds of 50, a job: baseline"]
    )
    assert 0.8 < same < 1.25, "the same library counted twice"


def test_ship_ab_measures_two_schedulers_and_one_with_its_shipper_off(endpoints: Endpoints) -> None:
    root = Path(__file__).parents[2]  # this checkout against itself
    report = ship_ab.run(root, quick=True, off=True, endpoints=endpoints)
    figures = {f.name: f.median for f in report.figures}
    for tree in ("this", "baseline"):
        assert figures[f"scheduler CPU: {tree}"] > 0, figures
        assert figures[f"events records: {tree}"] > 0, "the events reached Kafka"
        assert figures[f"stream reads: {tree}"] > 0, figures
    assert figures["events records: shipper off"] == 0, figures


def test_startup_times_each_system_and_a_baseline_checkout() -> None:
    report = startup_bench.run(quick=True, baseline=Path(__file__).parents[2])  # this checkout against itself
    systems = (*startup_bench.SYSTEMS, "baseline")
    measures = ("spawn → first claim, wall", "spawn → first claim, CPU", "--help, wall", "--help, CPU")
    figures = {f.name: f.median for f in report.figures}
    assert set(figures) == {f"{m}: {s}" for m in measures for s in systems} - {
        "--help, wall: jobq-port",
        "--help, CPU: jobq-port",
    }
    assert all(value > 0 for value in figures.values()), figures
    assert "jobq / baseline" in report.summary


def test_trickle_measures_each_system_and_a_baseline_checkout_per_job() -> None:
    report = trickle_bench.run(quick=True, baseline=Path(__file__).parents[2])  # this checkout against itself
    figures = {f.name: f.median for f in report.figures}
    systems = ("jobq", "floor", "baseline")
    assert set(figures) == {f"{m}: {s}" for m in trickle_bench.MEASURES for s in systems}
    for tree in ("jobq", "baseline"):  # each job: its enqueue's call, at least; the worker ran them
        assert figures[f"script calls/job: {tree}"] >= 1, figures
        assert figures[f"worker CPU, µs/job: {tree}"] > 0, figures
    assert figures["Redis commands/job: floor"] >= 3, figures  # its write (2) and the job's INCR
    assert "jobq / baseline" in report.summary
    assert any("**floor**: " in section and "incrby 1.00" in section for section in report.sections)
