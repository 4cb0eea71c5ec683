"""The envelope micro-benchmark runs and reports every figure (a smoke run: tiny time budget)."""

from __future__ import annotations

from loadtest import envelope_bench


def test_every_figure_is_a_positive_cpu_time_per_envelope() -> None:
    figures = envelope_bench._round(budget_s=0.01)
    assert set(figures) == {
        "decode, small envelope",
        "decode, full envelope",
        "decode, relay batch of 500 mixed records",
        "new_envelope, a client's job (gateway validation)",
        "parse_jobs, 100-job batch body (gateway)",
        "parse_jobs, one-job body (gateway)",
    }
    assert all(0 < us < 10_000 for us in figures.values())
