"""Task graphs on the real stack: submitted over HTTP (and from Python) → gateway → Kafka (one record) →
relay → Redis → worker pools in two queues, with the scheduler service repairing hand-offs."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jqcore.graphs import Graph, Step, chain, fan_out, group, pipeline
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import ApiRefused, JobqClient
from jqstack.manager import Endpoints
from jqstack.pipeline import checkout_env
from jqstack.supervise import Child, Children, python_m
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

pytestmark = pytest.mark.usefixtures("scheduler")  # reaps, promotes and repairs graph hand-offs


Eventually = Callable[..., Awaitable[Any]]


@dataclass
class GraphStack:
    prefix: str
    qa: str
    qb: str
    client: JobqClient
    engine: Engine
    relay: RelayService
    registry: Registry
    eventually: Eventually
    redis: Any

    async def finished(self, graph_id: str, timeout_s: float = 120, after: int = 0) -> dict[str, Any]:
        """The graph (the gateway's view) once a pool of this test ended it (its last report went
        through ``engine``); ``after``: an end signalled after that mark (a retried graph's second)."""
        ended = self.engine.graphs.signals.ended
        await ended.wait_for(lambda g: g[0] == graph_id, timeout_s, after=after)
        got = await self.client.get_graph(graph_id)
        assert got is not None
        assert got["state"] != "running", got
        return got

    async def watched(self, graph_id: str, timeout_s: float = 120) -> dict[str, Any]:
        """The graph once it ended, watched: for graphs that workers in other processes end."""
        got: dict[str, Any] = await self.eventually(
            lambda: self.client.get_graph(graph_id),
            lambda g: g is not None and g["state"] != "running",
            timeout_s,
        )
        return got


@pytest.fixture
def gs(prefix: str, path: Any, eventually: Eventually) -> GraphStack:
    """The path (HTTP → gateway → Kafka → relay → Redis for ``<prefix>*``) and two queues of it."""
    qa, qb = f"{prefix}.ga", f"{prefix}.gb"
    return GraphStack(
        prefix, qa, qb, path.client, path.engine, path.relay, Registry(), eventually, path.redis
    )


def results(graph: dict[str, Any]) -> dict[str, Any]:
    return {n["name"]: n["result"] for n in graph["nodes"] if n["state"] == "completed"}


def arithmetic(gs: GraphStack) -> Counter[str]:
    """add (n + fed), sum (a callback's list) and tag handlers in both queues; counts runs per node."""
    runs: Counter[str] = Counter()

    for queue in (gs.qa, gs.qb):

        @gs.registry.job(f"add.{queue}", queue=queue)
        async def add(n: int = 0, *fed: int) -> int:
            g = current_job().graph
            runs[g.node if g else "?"] += 1
            return n + sum(fed)

        @gs.registry.job(f"sum.{queue}", queue=queue)
        async def total(*fed: list[int]) -> int:
            g = current_job().graph
            runs[g.node if g else "?"] += 1
            return sum(fed[0])

        @gs.registry.job(f"join.{queue}", queue=queue)
        async def join() -> dict[str, Any]:
            g = current_job().graph
            assert g is not None
            runs[g.node] += 1
            return {name: p.result for name, p in g.parents.items()}

    return runs


def pool(gs: GraphStack, concurrency: int = 50) -> Pool:
    return Pool(gs.registry, gs.engine, PoolConfig([gs.qa, gs.qb], concurrency=concurrency), redis=gs.redis)


async def test_every_shape_runs_over_http_with_results_flowing(gs: GraphStack) -> None:
    runs = arithmetic(gs)
    qa, qb, p = gs.qa, gs.qb, gs.prefix
    docs = {
        "pipe": pipeline(
            f"{p}-pipe",
            Step(f"add.{qa}", [1]),
            Step(f"add.{qb}", [10], queue=qb),
            Step(f"add.{qa}", [100]),
            queue=qa,
        ),
        "chain": chain(f"{p}-chain", Step(f"add.{qa}", [1]), Step(f"add.{qb}", [2], queue=qb), queue=qa),
        "group": group(
            f"{p}-group", [Step(f"add.{qb}", [i]) for i in range(5)], callback=Step(f"sum.{qa}"), queue=qb
        ),
        "map": fan_out(f"{p}-map", f"add.{qa}", [1, 2, 3], queue=qa, callback=Step(f"sum.{qb}", queue=qb)),
    }
    for doc in docs.values():
        accepted = await gs.client.submit_graph(doc)
        assert accepted["id"] == doc["id"]
        assert accepted["offset"] >= 0
    async with pool(gs):
        got = {name: await gs.finished(doc["id"]) for name, doc in docs.items()}
    assert {g["state"] for g in got.values()} == {"completed"}
    assert results(got["pipe"]) == {"step-1": 1, "step-2": 11, "step-3": 111}
    assert results(got["chain"]) == {"step-1": 1, "step-2": 2}, "a chain passes no results"
    assert results(got["group"])["callback"] == 10
    assert results(got["map"])["callback"] == 6
    assert runs["callback"] == 2, "each callback ran once"


async def test_a_five_node_multi_parent_dag_from_python(gs: GraphStack) -> None:
    arithmetic(gs)
    qa, qb = gs.qa, gs.qb
    g = Graph(f"{gs.prefix}-dag", queue=qa)
    a = g.add("a", f"add.{qa}", [1])
    b = g.add("b", f"add.{qb}", [2], queue=qb, parents=[a], feed="last")
    c = g.add("c", f"add.{qa}", [3], parents=[a], feed="last")
    d = g.add("d", f"join.{qb}", queue=qb, parents=[b, c])
    g.add("e", f"join.{qa}", parents=[d, a, c])
    async with pool(gs):
        await gs.client.submit_graph(g)
        await gs.client.submit_graph(g)  # the same id again: no second graph
        out = await gs.finished(g.id)
    assert out["state"] == "completed"
    assert results(out) == {
        "a": 1,
        "b": 3,
        "c": 4,
        "d": {"b": 3, "c": 4},
        "e": {"d": {"b": 3, "c": 4}, "a": 1, "c": 4},
    }
    assert (await gs.engine.reads.queue_stats(qa)).get("completed") == 3, "a, c and e ran once each"


async def test_a_thousand_wide_fan_out_fires_its_callback_once(gs: GraphStack) -> None:
    runs = arithmetic(gs)
    gid = f"{gs.prefix}-wide"
    doc = fan_out(
        gid,
        f"add.{gs.qa}",
        list(range(1000)),
        queue=gs.qa,
        callback=Step(f"sum.{gs.qb}", queue=gs.qb),
    )
    await gs.client.submit_graph(doc)
    async with pool(gs, concurrency=100):
        out = await gs.finished(gid, timeout_s=300)
    assert out["state"] == "completed"
    assert results(out)["callback"] == sum(range(1000))
    assert runs["callback"] == 1
    assert out["counts"] == {"completed": 1001}


async def test_failure_skips_dependents_runs_on_failure_then_retry_reruns_only_what_failed(
    gs: GraphStack,
) -> None:
    qa, qb = gs.qa, gs.qb
    broken = {"b": True}
    ran: list[str] = []

    @gs.registry.job(f"step.{qa}", queue=qa, max_attempts=1)
    async def step() -> str:
        g = current_job().graph
        assert g is not None
        ran.append(g.node)
        if broken.get(g.node):
            raise RuntimeError(f"{g.node} is broken")
        return g.node

    @gs.registry.job(f"alert.{qb}", queue=qb)
    async def alert(failures: list[dict[str, Any]]) -> list[str]:
        ran.append("on_failure")
        return [f"{f['node']}:{f['state']}" for f in failures]

    gid = f"{gs.prefix}-fail"
    doc = {
        "id": gid,
        "queue": qa,
        "nodes": [
            {"name": "a", "kind": f"step.{qa}"},
            {"name": "b", "kind": f"step.{qa}", "parents": ["a"]},
            {"name": "c", "kind": f"step.{qa}", "parents": ["b"]},
            {"name": "d", "kind": f"step.{qa}", "parents": [{"node": "b", "policy": "always"}]},
        ],
        "on_failure": {"kind": f"alert.{qb}", "queue": qb},
    }
    async with pool(gs):
        await gs.client.submit_graph(doc)
        out = await gs.finished(gid)
        assert out["state"] == "failed"
        assert {n["name"]: n["state"] for n in out["nodes"]} == {
            "a": "completed", "b": "failed", "c": "skipped", "d": "completed", "on_failure": "completed"
        }  # fmt: skip
        assert results(out)["on_failure"] == ["b:failed", "c:skipped"]
        b = next(n for n in out["nodes"] if n["name"] == "b")
        assert "b is broken" in b["error"]["error"]
        assert b["error"]["attempt"] == 1
        with pytest.raises(ApiRefused) as refused:
            await gs.client.submit_graph({"id": "x", "nodes": [{"name": "a", "kind": "k", "parents": ["a"]}]})
        assert refused.value.status == 400
        assert refused.value.code == "graph_invalid"
        broken["b"] = False
        ran.clear()
        mark = gs.engine.graphs.signals.ended.mark()
        assert (await gs.client.retry_graph(gid))["released"] == ["b"]
        out = await gs.finished(gid, after=mark)
    assert out["state"] == "completed"
    assert sorted(ran) == ["b", "c"], "completed nodes kept their results; on_failure had nothing to do"


async def test_cancel_a_running_graph_over_http(gs: GraphStack) -> None:
    gid = f"{gs.prefix}-cancel"
    doc = chain(gid, Step("never.run", queue=gs.qa), Step("never.run"), queue=gs.qa)
    await gs.client.submit_graph(doc)
    await gs.relay.relays[0].signals.batch.wait_for(lambda c: c.get("read", 0) >= 1)  # in Redis
    answer = await gs.client.cancel_graph(gid, "not needed")
    assert answer == {"canceled": True, "state": "canceled"}
    got = await gs.client.get_graph(gid)
    assert got is not None
    assert {n["state"] for n in got["nodes"]} == {"canceled"}
    with pytest.raises(ApiRefused) as missing:
        await gs.client.retry_graph(f"{gs.prefix}-nope")
    assert missing.value.status == 404


# ---- a worker SIGKILLed mid-graph ------------------------------------------------------------------


@pytest.fixture
def workers(endpoints: Endpoints, tmp_path: Path) -> Iterator[Callable[..., Child]]:
    env = checkout_env(JOBQ_REDIS_URL=endpoints.redis_url or "")  # examples/ is not installed
    with Children(grace_s=10.0) as children:

        def start(queue: str) -> Child:
            name = f"worker-{len(children.members)}"
            app = "examples.demo_app:registry"
            argv = python_m("jobq", "worker", "--app", app, "--queues", queue, "--concurrency", "4")
            return children.start(name, argv, output=tmp_path / f"{name}.log", env=env)

        yield start


async def test_a_worker_killed_mid_graph_the_graph_still_completes_and_the_callback_fires_once(
    gs: GraphStack, workers: Callable[..., Child], tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    marks.touch()
    gid = f"{gs.prefix}-kill"
    node = {
        "kind": "demo.graph.mark",
        "args": [str(marks), 0.3],
        "lease_ms": 5000,
    }  # a stall under 5 s re-runs nothing
    doc = {"id": gid, "queue": gs.qa, "nodes": [{"name": f"n{i}", **node} for i in range(12)]}
    doc["nodes"].append(
        {"name": "callback", **node, "args": [str(marks), 0.0], "parents": [f"n{i}" for i in range(12)]}
    )
    first = workers(gs.qa)
    await gs.client.submit_graph(doc)
    # some nodes ran, others are running: kill the worker now
    await gs.eventually(lambda: len(marks.read_text().split()), lambda n: n >= 3, 120)
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    workers(gs.qa)
    out = await gs.watched(gid, timeout_s=180)
    assert out["state"] == "completed"
    seen = Counter(marks.read_text().split())
    assert seen["callback"] == 1, "the callback fires exactly once"
    assert all(seen[f"n{i}"] >= 1 for i in range(12)), "every node ran"
    assert sum(seen.values()) - 13 <= 4, "re-runs only for the jobs the killed worker had in flight"
