"""Task graph documents: shapes, validation (refused whole, every problem named), derived ids, feeding,
and the terminal drawing."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from jobq.commands.graph import render
from jqcore.envelope import MAX_ENVELOPE_BYTES
from jqcore.errors import GraphInvalid
from jqcore.graphs import (
    Graph,
    Step,
    chain,
    fan_out,
    graph_envelope,
    group,
    node_job_id,
    parse,
    pipeline,
    spec_of,
)
from jqengine import GraphInfo, NodeInfo, NodeInputs, ParentOutcome


def edges(doc: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {n.name: [(e.parent, e.policy) for e in n.parents] for n in parse(doc).all_nodes()}


def test_shapes_expand_to_dags() -> None:
    assert edges(pipeline("p", Step("a"), Step("b"), queue="q")) == {
        "step-1": [],
        "step-2": [("step-1", "require")],
    }
    assert parse(pipeline("p", Step("a"), Step("b"), queue="q")).nodes[1].feed == "last"
    assert parse(chain("c", Step("a"), Step("b"), queue="q")).nodes[1].feed == "none"
    g = parse(group("g", [Step("a"), Step("b")], callback=Step("cb"), queue="q"))
    assert [n.name for n in g.nodes] == ["task-1", "task-2", "callback"]
    assert g.nodes[2].feed == "list"
    m = parse(fan_out("m", "k", [10, 20], queue="q"))
    assert [n.args for n in m.nodes] == [[10], [20]]


def test_nodes_come_in_topological_order_and_ids_are_derived() -> None:
    g = Graph("g1", queue="q")
    g.add("late", "k", parents=["early"])
    g.add("early", "k")
    assert [n.name for n in g.spec().nodes] == ["early", "late"]
    assert node_job_id("g1", "late") == "g1:late"
    assert node_job_id("g1", "late", 2) == "g1:late@2"


@pytest.mark.parametrize(
    ("doc", "field", "needle"),
    [
        ({"id": "g", "queue": "q"}, "nodes", "exactly one of"),
        ({"id": "g", "queue": "q", "nodes": [], "pipeline": []}, "nodes", "exactly one of"),
        ({"id": "bad id", "queue": "q", "nodes": [{"name": "a", "kind": "k"}]}, "id", "characters"),
        ({"id": "g", "nodes": [{"name": "a", "kind": "k"}]}, "nodes[0].queue", "required"),
        (
            {"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k"}, {"name": "a", "kind": "k"}]},
            "nodes[1].name",
            "duplicate",
        ),
        (
            {"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k", "parents": ["a"]}]},
            "nodes[0].parents",
            "own parent",
        ),
        (
            {
                "id": "g",
                "queue": "q",
                "nodes": [
                    {"name": "a", "kind": "k", "parents": [{"node": "b", "policy": "maybe"}]},
                    {"name": "b", "kind": "k"},
                ],
            },
            "nodes[0].parents[0].policy",
            "one of",
        ),
        (
            {
                "id": "g",
                "queue": "q",
                "nodes": [{"name": "a", "kind": "k", "feed": "list", "args": {"x": 1}}],
            },
            "nodes[0].args",
            "positional",
        ),
        (
            {"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k", "lease_ms": 1}]},
            "nodes[0].lease_ms",
            "between",
        ),
        (
            {"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k"}], "deadline_ms": 0},
            "deadline_ms",
            "positive",
        ),
        (
            {"id": "g", "queue": "q", "chain": [{"kind": "k", "parents": []}]},
            "chain[0].parents",
            "sets the parents",
        ),
        (
            {
                "id": "g",
                "queue": "q",
                "nodes": [{"name": "a", "kind": "k"}],
                "on_failure": {"kind": "k", "parents": ["a"]},
            },
            "on_failure.parents",
            "no parents",
        ),
        (
            {"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k"}], "surprise": 1},
            "surprise",
            "unknown field",
        ),
    ],
)
def test_bad_graphs_are_refused_whole_naming_the_field(doc: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(GraphInvalid) as info:
        parse(doc)
    assert info.value.code == "graph_invalid"
    problems = {f.field: f.problem for f in info.value.fields}
    assert field in problems, problems
    assert needle in problems[field]


def test_a_cycle_is_named() -> None:
    doc = {
        "id": "g",
        "queue": "q",
        "nodes": [{"name": n, "kind": "k", "parents": [p]} for n, p in ("ab", "bc", "ca")],
    }
    with pytest.raises(GraphInvalid, match="cycle through a, b, c"):
        parse(doc)


def test_the_graph_envelope_round_trips_and_refuses_a_graph_larger_than_a_record() -> None:
    spec = parse(fan_out("big", "k", list(range(50)), queue="q", callback=Step("cb")))
    env = graph_envelope(spec, at_ms=1_800_000_000_000)
    assert env.kind == "jobq.graph"
    assert spec_of(env) == spec
    huge = parse(fan_out("huge", "k", ["x" * 2000] * 600, queue="q"))
    with pytest.raises(GraphInvalid) as info:
        graph_envelope(huge)
    assert info.value.code == "graph_too_large"
    assert str(MAX_ENVELOPE_BYTES) in info.value.message


def test_feeding_parents_results() -> None:
    ok, bad = ParentOutcome("completed", 3), ParentOutcome("failed", None, "boom", 2)
    assert NodeInputs("g", "n", "last", {"a": ok}).fed() == [3]
    assert NodeInputs("g", "n", "list", {"a": ok, "b": bad}).fed() == [
        [3, {"node": "b", "state": "failed", "error": "boom", "attempt": 2}]
    ]
    assert NodeInputs("g", "n", "none", {"a": ok}).fed() == []
    assert NodeInputs("g", "on_failure", failures=[{"node": "b"}]).fed() == [[{"node": "b"}]]


def test_the_terminal_drawing_shows_every_node_escaped() -> None:
    def node(name: str, state: str, parents: list[str], **kw: Any) -> NodeInfo:
        return NodeInfo(name, "q", "k", state, f"g:{name}", [(p, "require") for p in parents], **kw)

    info = GraphInfo(
        "g",
        "q",
        "failed",
        1,
        2,
        None,
        "1 node(s) did not complete",
        "on_failure",
        {"completed": 2},
        [
            node("a", "completed", [], result=1),
            node("b", "failed", ["a"], error={"error": "x\n[red]<script>", "attempt": 3}),
            node("c", "skipped", ["a", "b"]),
            node("on_failure", "completed", []),
        ],
    )
    console = Console(record=True, width=200)
    console.print(render(info))
    text = console.export_text()
    for needle in (
        "graph g failed",
        "a completed",
        "→ 1",
        "b failed",
        "[red]<script>",
        "attempt 3",
        "c also waits",
    ):
        assert needle in text, text
    assert "on failure" in text
