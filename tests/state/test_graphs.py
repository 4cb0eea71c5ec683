"""Task graphs in the engine (single Redis and the 3-master Cluster): release, fan-in counted once,
every failure policy, on_failure, cancel, retry from failure, deadline, and the repair of hand-offs a
crash interrupted. Nodes of one graph live in two queues (two slots on the Cluster)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from jqcore.errors import GraphConflict, GraphInvalid
from jqcore.graphs import Graph, Step, fan_out, parse, pipeline
from jqengine import Engine
from jqengine.keys import GraphKeys, QueueKeys

Handler = Callable[[str, Any, Any], Any]
"""(node name, args, inputs) → result; raising fails the node for good."""


async def run_graph(
    engine: Engine, gid: str, queues: list[str], handler: Handler, *, report: bool = True, rounds: int = 500
) -> dict[str, Any]:
    """A minimal worker over ``queues``: claim, run ``handler``, complete/fail, report; until the graph
    ends. Returns the graph (``as_dict``)."""
    for _ in range(rounds):
        info = await engine.graphs.get(gid)
        if info.state != "running":
            return info.as_dict()
        claimed = 0
        for q in queues:
            for job in await engine.jobs.claim(q, 100):
                claimed += 1
                env = job.envelope
                assert env.graph is not None
                inputs = await engine.graphs.inputs(env.graph["id"], env.graph["node"])
                triple = (job.id, job.attempt, job.token)
                try:
                    value = handler(env.graph["node"], env.args, inputs)
                except Exception as exc:  # the node's failure
                    await engine.jobs.fail(q, triple, f"RuntimeError: {exc}", permanent=True)
                else:
                    await engine.jobs.complete(q, triple, orjson.dumps(value))
                if report:
                    await engine.graphs.report_finished(q, [job.id])
        if not claimed and not report:
            break
    return (await engine.graphs.get(gid)).as_dict()


def states(graph: dict[str, Any]) -> dict[str, str]:
    return {n["name"]: n["state"] for n in graph["nodes"]}


def results(graph: dict[str, Any]) -> dict[str, Any]:
    return {n["name"]: n["result"] for n in graph["nodes"] if n["state"] == "completed"}


@pytest.fixture
def qs(prefix: str) -> list[str]:
    return [f"{prefix}.ga", f"{prefix}.gb"]


async def test_pipeline_across_two_queues_feeds_each_result_to_the_next(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-pipe"
    doc = pipeline(
        gid, Step("add", [1], queue=qs[0]), Step("add", [10], queue=qs[1]), Step("add", [100], queue=qs[0])
    )
    assert await engine.graphs.create(parse(doc)) == "stored"
    g = await run_graph(engine, gid, qs, lambda _n, args, inputs: sum(args) + sum(inputs.fed()[0:1]))
    assert g["state"] == "completed"
    assert results(g) == {"step-1": 1, "step-2": 11, "step-3": 111}


async def test_resubmitting_a_graph_id_does_not_fork_a_second_graph(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-dup"
    spec = parse(fan_out(gid, "sq", [1, 2, 3], queue=qs[0], callback=Step("sum", queue=qs[1])))
    assert await engine.graphs.create(spec) == "stored"
    assert await engine.graphs.create(spec) == "duplicate"
    assert (await engine.reads.depth(qs[0])).pending == 3
    g = await run_graph(
        engine, gid, qs, lambda n, args, inputs: sum(inputs.fed()[0]) if n == "callback" else args[0] ** 2
    )
    assert g["state"] == "completed"
    assert results(g)["callback"] == 14
    stats = await engine.reads.queue_stats(qs[1])
    assert stats.get("completed") == 1, "the callback ran once"


async def test_a_wide_fan_in_counts_each_node_once_under_duplicate_reports(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-wide"
    spec = parse(fan_out(gid, "one", list(range(200)), queue=qs[0], callback=Step("sum", queue=qs[1])))
    await engine.graphs.create(spec)
    jobs = await engine.jobs.claim(qs[0], 300)
    assert len(jobs) == 200
    for job in jobs:
        await engine.jobs.complete(qs[0], (job.id, job.attempt, job.token), b"1")
    node = jobs[0].envelope.graph["node"]  # type: ignore[index]
    for _ in range(3):  # the same outcome delivered again, and a stale report of an old run: no effect
        assert int(await engine.graphs.report(gid, node, jobs[0].id, "completed", result=b"1")) in (1, -2)
    assert int(await engine.graphs.report(gid, node, jobs[0].id + "@7", "completed")) == 0
    assert await engine.graphs.report_finished(qs[0]) == 200
    assert await engine.graphs.report_finished(qs[0]) == 0
    g = await run_graph(engine, gid, qs, lambda _n, _a, inputs: sum(inputs.fed()[0]))
    assert g["state"] == "completed"
    assert results(g)["callback"] == 200
    assert (await engine.reads.queue_stats(qs[1])).get("completed") == 1


async def test_a_failed_parent_skips_its_dependents_transitively_and_on_failure_gets_every_error(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-fail"
    g = Graph(gid, queue=qs[0])
    g.add("a", "k")
    g.add("b", "boom", parents=["a"])
    g.add("c", "k", parents=["b"], queue=qs[1])
    g.add("d", "k", parents=["c"])
    g.add("e", "k", parents=["a"], queue=qs[1])
    g.add("f", "k", parents=[g.always("b"), "e"], feed="list")
    g.add("h", "k", parents=[g.ignore("b"), "e"], feed="list")
    g.on_failure("alert", queue=qs[1])
    seen: dict[str, Any] = {}

    def handler(node: str, _args: Any, inputs: Any) -> Any:
        seen[node] = inputs.fed()
        if node == "b":
            raise ValueError("b broke")
        return node

    await engine.graphs.create(g.spec())
    out = await run_graph(engine, gid, qs, handler)
    assert out["state"] == "failed"
    assert states(out) == {"a": "completed", "b": "failed", "c": "skipped", "d": "skipped", "e": "completed",
                           "f": "completed", "h": "completed", "on_failure": "completed"}  # fmt: skip
    assert seen["f"][0][0]["state"] == "failed"
    assert "b broke" in seen["f"][0][0]["error"]
    assert seen["f"][0][1] == "e"
    assert seen["h"] == [["e"]], "an ignored failed parent gives no input"
    failures = seen["on_failure"][0]
    assert [f["node"] for f in failures][:1] == ["b"]
    assert {f["node"] for f in failures} == {"b", "c", "d"}
    assert not {"c", "d"} & set(seen), "skipped nodes never ran"


async def test_cancel_on_failure_cancels_the_running_siblings(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-cof"
    g = Graph(gid, queue=qs[0], cancel_on_failure=True)
    g.add("x", "boom")
    g.add("y", "slow", queue=qs[1])
    g.add("z", "k", parents=["y"])
    await engine.graphs.create(g.spec())
    (y,) = await engine.jobs.claim(qs[1], 1)
    (x,) = await engine.jobs.claim(qs[0], 1)
    await engine.jobs.fail(qs[0], (x.id, x.attempt, x.token), "boom", permanent=True)
    await engine.graphs.report_finished(qs[0])
    out = (await engine.graphs.get(gid)).as_dict()
    assert out["state"] == "failed"
    assert states(out) == {"x": "failed", "y": "canceled", "z": "canceled"}
    job = await engine.reads.get_job(qs[1], y.id)
    assert job is not None
    assert job.cancel_requested, "the running sibling is told to stop"


async def test_cancel_a_graph_then_retry_from_failure_runs_only_what_failed(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-retry"
    g = Graph(gid, queue=qs[0])
    g.add("a", "k")
    g.add("b", "flaky", parents=["a"], queue=qs[1])
    g.add("c", "k", parents=["b"])
    await engine.graphs.create(g.spec())
    runs: list[str] = []
    broken = True

    def handler(node: str, _a: Any, _i: Any) -> str:
        runs.append(node)
        if node == "b" and broken:
            raise RuntimeError("not yet")
        return node

    assert (await run_graph(engine, gid, qs, handler))["state"] == "failed"
    with pytest.raises(GraphConflict, match="still running"):
        await _retry_running(engine, qs, prefix)
    broken = False
    assert await engine.graphs.retry(gid) == ["b"]
    out = await run_graph(engine, gid, qs, handler)
    assert out["state"] == "completed"
    assert [r for r in runs if r != "only"] == ["a", "b", "b", "c"], "a kept its result; b and c ran again"
    b = next(n for n in out["nodes"] if n["name"] == "b")
    assert b["run"] == 2
    assert b["job_id"] == f"{gid}:b@1"
    with pytest.raises(GraphConflict, match="nothing to retry"):
        await engine.graphs.retry(gid)


async def _retry_running(engine: Engine, qs: list[str], prefix: str) -> None:
    gid = f"{prefix}-running"
    g = Graph(gid, queue=qs[0])
    g.add("only", "k")
    await engine.graphs.create(g.spec())
    await engine.graphs.retry(gid)


async def test_cancel_ends_every_node_and_the_jobs_in_queues(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-cancel"
    g = Graph(gid, queue=qs[0])
    g.add("a", "k")
    g.add("b", "k", parents=["a"], queue=qs[1])
    await engine.graphs.create(g.spec())
    assert await engine.graphs.cancel(gid, "operator") is True
    assert await engine.graphs.cancel(gid) is False
    out = (await engine.graphs.get(gid)).as_dict()
    assert out["state"] == "canceled"
    assert states(out) == {"a": "canceled", "b": "canceled"}
    assert (await engine.reads.depth(qs[0])).pending == 0


async def test_a_graph_past_its_deadline_fails_with_its_nodes_canceled(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-late"
    g = Graph(gid, queue=qs[0], deadline_ms=1000)
    g.add("a", "k")
    spec = g.spec()
    await engine.graphs.create(spec)
    assert spec.deadline_at is not None
    assert await engine.graphs.repair_graph(gid, now_ms=spec.deadline_at - 1) == "running"
    assert await engine.graphs.repair_graph(gid, now_ms=spec.deadline_at + 1) == "failed"
    out = (await engine.graphs.get(gid)).as_dict()
    assert out["reason"] == "deadline passed"
    assert states(out) == {"a": "canceled"}


async def test_a_crash_between_completion_and_report_and_between_report_and_release_is_repaired(
    engine: Engine, qs: list[str], prefix: str
) -> None:
    gid = f"{prefix}-crash"
    g = Graph(gid, queue=qs[0])
    g.add("a", "k")
    g.add("b", "k", parents=["a"], queue=qs[1], feed="last")
    await engine.graphs.create(g.spec())
    (a,) = await engine.jobs.claim(qs[0], 1)
    await engine.jobs.complete(qs[0], (a.id, a.attempt, a.token), b"41")
    # the worker died before reporting: the outcome waits in the queue's gdone hash
    assert await engine._client.hexists(QueueKeys(qs[0]).gdone, a.id)
    assert await engine.graphs.report_finished(qs[0], older_ms=60_000) == 0, "too young to repair yet"
    with pytest.MonkeyPatch.context() as skewed:  # this host's clock an hour ahead: Redis's clock judges
        real = time.time_ns
        skewed.setattr(time, "time_ns", lambda: real() + 3_600_000 * 1_000_000)
        assert await engine.graphs.report_finished(qs[0], older_ms=60_000) == 0, "judged by the host clock"
    # a report that reached the graph, then the process died before releasing b into its queue
    entry = orjson.loads(await engine._client.hget(QueueKeys(qs[0]).gdone, a.id))
    reply = await engine.graphs._run(
        "graph_report", gid, ["a", a.id, "completed", 1, entry["result"], ""], None
    )
    assert reply.released == ["b"]
    assert await engine._client.sismember(GraphKeys(gid).named("rel"), "b")
    assert (await engine.reads.depth(qs[1])).pending == 0
    # the scheduler's repair: the stale gdone entry (counted once: a no-op now) and the stuck release
    assert await engine.graphs.report_finished(qs[0]) == 1
    far = 10**13
    assert await engine.graphs.repair_graph(gid, now_ms=far) == "running"
    assert (await engine.reads.depth(qs[1])).pending == 1
    await engine.graphs.repair_graph(gid, now_ms=far)  # again: a duplicate, never a second job
    assert (await engine.reads.depth(qs[1])).pending == 1
    out = await run_graph(engine, gid, qs, lambda _n, _a, inputs: inputs.fed()[0] + 1)
    assert out["state"] == "completed"
    assert results(out)["b"] == 42


def test_bad_graphs_are_refused_whole_naming_the_problem() -> None:
    with pytest.raises(GraphInvalid, match="cycle"):
        parse({"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k", "parents": ["b"]},
                                                  {"name": "b", "kind": "k", "parents": ["a"]}]})  # fmt: skip
    with pytest.raises(GraphInvalid, match="unknown node 'zz'"):
        parse({"id": "g", "queue": "q", "nodes": [{"name": "a", "kind": "k", "parents": ["zz"]}]})
