"""A smoke run of the peer comparison with tiny sizes: every peer's virtualenv, runner and worker CLI
still work, the report and its plots are written (no speed asserted)."""

from __future__ import annotations

from loadtest import peers_bench


def test_every_peer_and_jobq_drain_and_the_report_has_its_plots() -> None:
    report = peers_bench.run(quick=True)
    folder = report.save()
    figures = {f.name: f.median for f in report.figures}
    failed = [n for n in report.notes if " failed: " in n]
    assert not failed, failed
    for system in peers_bench.SYSTEMS:
        assert figures[f"drain {system}"] > 0, system
        assert figures[f"latency p50 {system}"] > 0, system
    assert figures["early starts jobq"] == 0, "a delayed jobq job started before its time"
    assert (folder / "throughput.png").stat().st_size > 0
    assert (folder / "latency.png").stat().st_size > 0
    assert any(n.startswith("drain: jobq") for n in report.notes), report.notes
