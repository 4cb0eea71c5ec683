"""A smoke run of the dashboard benchmark with tiny sizes on the session's servers (its jobs in a Redis
database of their own, flushed afterwards): the fill, the in-process dashboard, every page requested; the
report, its page table and its plot are written (no speed asserted)."""

from __future__ import annotations

import json

from jqstack.manager import Endpoints
from loadtest import web_bench

TINY = web_bench.Sizes(jobs=400, history_rows=300, requests=2, warmups=1)


def test_web_scenario_requests_every_page_on_the_session_stack(endpoints: Endpoints) -> None:
    report = web_bench.run(sizes=TINY, endpoints=endpoints)
    folder = report.save()
    doc = json.loads((folder / "results.json").read_text())

    assert doc["params"]["jobs"] == 400
    assert doc["params"]["history_rows"] == 300
    assert sum(doc["params"]["jobs_per_state"].values()) == 400
    assert doc["params"]["history_events"] == 300
    assert doc["params"]["event_folders"] >= 1
    assert doc["params"]["current_segments"] >= 1

    pages = {p["page"]: p for p in doc["pages"]}
    assert list(pages) == list(web_bench.PAGES)
    per_page = TINY.warmups + TINY.requests
    for name, p in pages.items():
        assert p["status"] in ("ok", "missing", "failed"), name
        assert 0 not in p["statuses"], (name, p["codes"])  # every request was answered
        if p["status"] == "missing":
            assert p["statuses"][0] == 404, name
            assert p["under_target"] is None, name
            continue
        assert len(p["statuses"]) == per_page, name
        if p["status"] == "ok":
            assert len(p["times_ms"]) == TINY.requests, name
            assert p["max_ms"] >= p["p95_ms"] >= p["p50_ms"] > 0, name
            assert isinstance(p["under_target"], bool), name
            assert doc["figures"][f"{name} p95"]["median"] == p["p95_ms"], name
    for stable in ("/", "/audit"):  # pages that exist and read only Redis: they must answer
        assert pages[stable]["status"] == "ok", pages[stable]
    assert "/jobs/wb" in pages["/jobs/{q}/{id}"]["path"]

    markdown = (folder / "report.md").read_text()
    assert "| page | path | status | p50 ms | p95 ms | max ms | requests | < 300 ms |" in markdown
    assert markdown.count("\n| `/") == len(web_bench.PAGES)
    assert (folder / "pages.png").stat().st_size > 0
    assert any("answering pages have p95 <" in n for n in report.notes), report.notes
