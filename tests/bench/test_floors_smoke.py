"""A smoke run of ``./run bench floors --quick`` on the session's stack: every hop is measured for jobq and
for its floor and has a ratio (no speed asserted)."""

from __future__ import annotations

import json
import math

from jqstack.manager import Endpoints
from loadtest import floors_bench


def test_floors_report_every_hop_beside_its_floor_with_a_ratio(endpoints: Endpoints) -> None:
    report = floors_bench.run(quick=True, endpoints=endpoints)
    folder = report.save()
    figures = json.loads((folder / "results.json").read_text())["figures"]
    for hop in floors_bench.HOPS:
        names = [n.removeprefix(f"{hop}: ") for n in figures if n.startswith(f"{hop}: ")]
        measures = {n.rsplit(" — ", 1)[0] for n in names}
        assert measures, f"{hop}: not measured"
        for measure in measures:
            assert {f"{measure} — {s}" for s in (*floors_bench.SYSTEMS, "ratio")} <= set(names), measure
        ratios = [figures[f"{hop}: {m} — ratio"]["median"] for m in measures]
        assert any(math.isfinite(r) and r > 0 for r in ratios), (hop, ratios)
    for hop, measure in (
        ("gateway", "requests/s"),
        ("relay", "jobs/s"),
        ("worker", "jobs/s steady"),
        ("path, 1 job/request", "CPU system total"),
        ("path, batched", "CPU system total"),
    ):
        for system in floors_bench.SYSTEMS:
            assert figures[f"{hop}: {measure} — {system}"]["median"] > 0, (hop, measure, system)
    table = (folder / "report.md").read_text()
    assert "| hop | measure | unit | jobq | floor | jobq / floor |" in table
