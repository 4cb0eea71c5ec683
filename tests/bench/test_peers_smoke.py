"""A smoke run of the peer comparison with tiny sizes: the harness (virtualenvs, runners, worker CLIs, the
report, its tables and plots) works for jobq, its worker floor and two peers, in the one shape and each at
its best (no speed asserted). Every peer takes ~10 s even this small, so the suite checks two that share
nothing (huey, rq); `./run bench peers --quick` runs them all."""

from __future__ import annotations

from loadtest import peers_bench

SMOKE = ["jobq", "floor", "huey", "rq"]


def test_jobq_and_two_peers_drain_and_the_report_has_its_plots() -> None:
    report = peers_bench.run(quick=True, systems=SMOKE)
    folder = report.save()
    figures = {f.name: f.median for f in report.figures}
    failed = [n for n in report.notes if " failed: " in n]
    assert not failed, failed
    for system in SMOKE:
        assert figures[f"drain {system}"] > 0, system
        assert figures[f"latency p50 {system}"] > 0, system
        assert figures[f"2x16 drain {system}"] > 0, system
        assert figures[f"2x16 spawn → last job {system}"] > 0, system
    assert figures["early starts jobq"] == 0, "a delayed jobq job started before its time"
    assert (folder / "throughput.png").stat().st_size > 0
    assert (folder / "latency.png").stat().st_size > 0
    assert any(n.startswith("drain: jobq") for n in report.notes), report.notes
    markdown = (folder / "report.md").read_text()
    assert "## One shape: 2 worker processes × 16 slots" in markdown
    assert "## Each system at its best" in markdown
