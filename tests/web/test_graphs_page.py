"""The graphs pages: open graphs listed, one graph drawn (an SVG of its DAG) with its nodes' results and
errors (escaped), cancel and retry from the dashboard, refusals."""

from __future__ import annotations

import html as htmllib
from collections.abc import Callable
from typing import Any

import pytest

from jqcore.graphs import Graph

pytestmark = pytest.mark.asyncio

EVIL = '<script>alert("x")</script> & broke'


def states(body: dict[str, Any]) -> dict[str, str]:
    return {n["name"]: n["state"] for n in body["nodes"]}


async def _finish(engine: Any, q: str, gid: str, fail: str | None = None) -> None:
    """Claim every ready job of ``q`` and complete it (``fail``: that node fails for good), reported."""
    for job in await engine.jobs.claim(q, 100):
        triple = (job.id, job.attempt, job.token)
        if job.envelope.graph["node"] == fail:
            await engine.jobs.fail(q, triple, EVIL, permanent=True)
        else:
            await engine.jobs.complete(q, triple, b'{"rows": 3, "note": "<b>bold</b>"}')
        await engine.graphs.report_finished(q, [job.id])


@pytest.fixture
async def failed_graph(engine: Any, prefix: str) -> str:
    """``<prefix>-etl``: extract → transform (fails) → load, and extract → audit (always after transform);
    over two queues; ends failed."""
    q1, q2 = f"{prefix}.ga", f"{prefix}.gb"
    gid = f"{prefix}-etl"
    g = Graph(gid, queue=q1)
    g.add("extract", "etl.extract")
    g.add("transform", "etl.transform", parents=["extract"], queue=q2)
    g.add("load", "etl.load", parents=["transform"])
    g.add("audit", "etl.audit", parents=["extract", g.always("transform")], queue=q2)
    assert await engine.graphs.create(g.spec()) == "stored"
    await _finish(engine, q1, gid)
    await _finish(engine, q2, gid, fail="transform")
    await _finish(engine, q2, gid)
    await engine.graphs.signals.ended.wait_for(lambda ended: ended[0] == gid)
    assert (await engine.graphs.get(gid)).state == "failed"
    return gid


async def test_a_graph_is_drawn_with_node_states_results_and_escaped_errors(
    dash: Any, failed_graph: str, prefix: str
) -> None:
    gid = failed_graph
    r = await dash.get(f"/graphs/{gid}")
    assert r.status == 200
    body = r.json()
    assert body["graph"]["state"] == "failed"
    assert states(body) == {
        "extract": "completed",
        "transform": "failed",
        "load": "skipped",
        "audit": "completed",
    }
    assert [n["name"] for n in body["nodes"]][:1] == ["extract"], "nodes in layer order"
    transform = next(n for n in body["nodes"] if n["name"] == "transform")
    assert EVIL in transform["error"]["error"]
    assert transform["job_id"] == f"{gid}:transform"
    extract = next(n for n in body["nodes"] if n["name"] == "extract")
    assert extract["result"] == {"rows": 3, "note": "<b>bold</b>"}
    svg = body["svg"]
    boxes = {n["name"]: n for n in svg["nodes"]}
    # layers: the longest path from a root (audit waits for transform too: layer 2, as load)
    assert boxes["extract"]["x"] < boxes["transform"]["x"] < boxes["load"]["x"] == boxes["audit"]["x"]
    assert {(e["parent"], e["child"], e["policy"]) for e in svg["edges"]} == {
        ("extract", "transform", "require"),
        ("transform", "load", "require"),
        ("extract", "audit", "require"),
        ("transform", "audit", "always"),
    }
    assert body["can_retry"]
    assert not body["can_cancel"]

    page = await dash.get(f"/graphs/{gid}", token="admin", as_json=False)
    text = page.text
    assert '<svg class="dag" id="graph-svg"' in text
    assert 'id="nodes-table"' in text
    for name in ("extract", "transform", "load", "audit"):
        assert f'data-node="{name}"' in text
    assert 'class="gnode n-failed"' in text
    assert 'class="gnode n-skipped"' in text
    assert "<script>alert" not in text, "the node's error is escaped"
    assert htmllib.escape(EVIL, quote=False) in text or "&lt;script&gt;alert(&#34;x&#34;)" in text
    assert "<b>bold</b>" not in text
    assert " style=" not in text, "no inline style (the CSP forbids it)"
    assert 'id="graph-retry"' in text
    assert 'id="graph-cancel"' not in text, "a failed graph cannot be canceled"
    read = await dash.get(f"/graphs/{gid}", as_json=False)
    assert 'id="graph-retry"' not in read.text, "a read token gets no action buttons"


async def test_open_graphs_are_listed_and_found_by_id(dash: Any, engine: Any, prefix: str) -> None:
    gid = f"{prefix}-list"
    g = Graph(gid, queue=f"{prefix}.gl")
    g.add("one", "k")
    g.add("two", "k", parents=["one"])
    await engine.graphs.create(g.spec())
    r = await dash.get("/graphs", count=500)
    assert r.status == 200
    row = next(x for x in r.json()["graphs"] if x["id"] == gid)
    assert (row["state"], row["queue"], row["nodes"]) == ("running", f"{prefix}.gl", 2)
    html = await dash.get("/graphs", count=500, as_json=False)
    assert 'id="graphs-table"' in html.text
    assert f'href="/graphs/{gid}"' in html.text
    assert 'id="graph-lookup"' in html.text
    found = await dash.get("/graphs", id=gid, as_json=False)
    assert (found.status, found.headers["Location"]) == (303, f"/graphs/{gid}")
    for bad in ({"count": "0"}, {"offset": "x"}, {"id": "no spaces"}):
        r = await dash.get("/graphs", **bad)
        assert r.status == 400, bad
    await engine.graphs.cancel(gid)


async def test_ended_graphs_stay_browsable_after_the_scheduler_sweeps_them(
    dash: Any, engine: Any, failed_graph: str, make_scheduler: Callable[..., Any]
) -> None:
    """The scheduler's repair round sweeps an ended graph from the open index: it is listed under ended
    (with its state and when it ended) rather than lost; retried, it is open again."""
    gid = failed_graph

    async def listed(show: str) -> dict[str, Any]:
        r = await dash.get("/graphs", show=show, count=500)
        assert r.status == 200, r.text
        return {g["id"]: g for g in r.json()["graphs"]}

    assert gid in await listed("open")
    assert gid not in await listed("ended")
    async with make_scheduler(f"{dash.prefix}-s0") as scheduler:
        await scheduler.signals.graph_closed.wait_for(lambda g: g[0] == gid)
    assert gid not in await listed("open")
    row = (await listed("ended"))[gid]
    assert (row["state"], row["nodes"]) == ("failed", 4)
    assert row["ended_at"]
    assert gid in await listed("all")
    html = (await dash.get("/graphs", show="ended", count=500, as_json=False)).text
    assert f'href="/graphs/{gid}"' in html
    assert 'data-show="ended" class="here"' in html
    assert (await dash.get("/graphs", show="closed")).code == "query_invalid"

    await engine.graphs.retry(gid)
    assert gid in await listed("open")
    assert gid not in await listed("ended"), "running again: open, not ended"
    await engine.graphs.cancel(gid)


async def test_cancel_and_retry_from_the_dashboard(
    dash: Any, engine: Any, failed_graph: str, prefix: str
) -> None:
    gid = failed_graph
    r = await dash.post(f"/graphs/{gid}/retry")
    assert r.status == 200
    assert (r.json()["action"], r.json()["count"]) == ("graph.retry", 1), "transform runs again"
    body = (await dash.get(f"/graphs/{gid}")).json()
    assert body["graph"]["state"] == "running"
    assert states(body)["transform"] == "ready"
    assert next(n for n in body["nodes"] if n["name"] == "transform")["run"] == 2
    assert body["can_cancel"]

    r = await dash.post(f"/graphs/{gid}/retry")
    assert (r.status, r.code) == (409, "graph_conflict"), "still running"

    r = await dash.post(f"/graphs/{gid}/cancel", {"next": f"/graphs/{gid}"}, as_json=False)
    assert r.status == 303
    assert r.headers["Location"] == f"/graphs/{gid}"
    body = (await dash.get(f"/graphs/{gid}")).json()
    assert body["graph"]["state"] == "canceled"
    assert states(body)["transform"] == "canceled"
    r = await dash.post(f"/graphs/{gid}/cancel")
    assert (r.status, r.json()["count"]) == (200, 0)
    assert "had ended already" in r.json()["message"]

    audit = (await dash.get("/audit", count=50)).json()["entries"]
    done = [(e["action"], e["outcome"][:14]) for e in audit if e["target"] == gid]
    assert done[:4] == [
        ("graph.cancel", "ok"),
        ("graph.cancel", "ok"),
        ("graph.retry", "graph_conflict"),
        ("graph.retry", "ok"),
    ]


async def test_a_completed_graph_cannot_be_retried(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.gc"
    gid = f"{prefix}-done"
    g = Graph(gid, queue=q)
    g.add("only", "k")
    await engine.graphs.create(g.spec())
    await _finish(engine, q, gid)
    await engine.graphs.signals.ended.wait_for(lambda ended: ended[0] == gid)
    assert (await engine.graphs.get(gid)).state == "completed"
    r = await dash.post(f"/graphs/{gid}/retry")
    assert (r.status, r.code) == (409, "graph_conflict")


async def test_graph_refusals(dash: Any, failed_graph: str, prefix: str) -> None:
    gid = failed_graph
    for path in (f"/graphs/{gid}/cancel", f"/graphs/{gid}/retry"):
        r = await dash.post(path, token="read")
        assert (r.status, r.code) == (403, "admin_required"), path
    assert (await dash.get(f"/graphs/{gid}")).json()["graph"]["state"] == "failed", "nothing changed"
    missing = f"{prefix}-nope"
    r = await dash.get(f"/graphs/{missing}")
    assert (r.status, r.code) == (404, "graph_not_found")
    page = await dash.get(f"/graphs/{missing}", as_json=False)
    assert (page.status, page.headers["X-Jobq-Error"]) == (404, "graph_not_found")
    for verb in ("cancel", "retry"):
        r = await dash.post(f"/graphs/{missing}/{verb}")
        assert (r.status, r.code) == (404, "graph_not_found"), verb
        r = await dash.post(f"/graphs/-bad/{verb}")
        assert (r.status, r.code) == (400, "graph_id_invalid"), verb
    r = await dash.get("/graphs/-bad")
    assert (r.status, r.code) == (400, "graph_id_invalid")


async def test_a_large_graph_is_listed_not_drawn(dash: Any, engine: Any, prefix: str) -> None:
    gid = f"{prefix}-wide"
    g = Graph(gid, queue=f"{prefix}.gw")
    names = [g.add(f"part-{i}", "k") for i in range(210)]
    g.add("sum", "k", parents=names)
    await engine.graphs.create(g.spec())
    r = await dash.get(f"/graphs/{gid}")
    assert r.json()["svg"] is None
    assert len(r.json()["nodes"]) == 211
    assert [n["name"] for n in r.json()["nodes"]][:3] == ["part-0", "part-1", "part-2"]
    assert r.json()["nodes"][-1]["name"] == "sum"
    page = await dash.get(f"/graphs/{gid}", as_json=False)
    assert 'id="graph-too-big"' in page.text
    assert "<svg" not in page.text
    await engine.graphs.cancel(gid)


async def test_a_medium_graph_is_drawn_in_layers(dash: Any, engine: Any, prefix: str) -> None:
    gid = f"{prefix}-fan"
    g = Graph(gid, queue=f"{prefix}.gf")
    g.add("start", "k")
    g.add("lonely", "k")
    parts = [g.add(f"part-{i}", "k", parents=["start"]) for i in range(12)]
    g.add("sum", "k", parents=parts)
    await engine.graphs.create(g.spec())
    svg = (await dash.get(f"/graphs/{gid}")).json()["svg"]
    boxes = {n["name"]: n for n in svg["nodes"]}
    assert len({boxes[p]["x"] for p in parts}) == 1, "siblings share their layer"
    assert len({boxes[p]["y"] for p in parts}) == 12, "stacked, never on top of each other"
    assert boxes["start"]["x"] < boxes["part-0"]["x"] < boxes["sum"]["x"]
    assert boxes["lonely"]["x"] == boxes["start"]["x"], "every root in the first layer"
    assert svg["height"] >= max(b["y"] for b in svg["nodes"]) + svg["box_h"]
    await engine.graphs.cancel(gid)
