"""HTTP workers on a par with Python pools, against the real gateway and Redis: a claim names its worker;
release, snooze, cancel and a many-job heartbeat fenced by the claim's attempt and token; graph nodes
claimed over HTTP get their parents' outcomes, and their ends advance the graph at once.

No scheduler runs here (nor a relay: jobs and graphs are put into Redis through the engine, as the relay
does), so nothing but the gateway's own writes can move a graph on."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from jqcore.clock import now_ms
from jqcore.graphs import Graph
from jqengine import Engine
from jqengine.keys import QueueKeys
from jqruntime.stores import presence
from jqruntime.stores.presence import count_alive
from jqweb.overview import claimer_rows, queue_row
from kafkagate import state
from kafkagate.app import policy_for

Call = tuple[int, Any]


async def claim(gw: Any, queue: str, n: int = 1, **body: Any) -> list[dict[str, Any]]:
    status, reply = await gw.call("POST", f"/v1/queues/{queue}/claims", json={"n": n, **body})
    assert status == 200, reply
    return list(reply["jobs"])


async def claim_one(gw: Any, queue: str, **body: Any) -> dict[str, Any]:
    (job,) = await claim(gw, queue, **body)
    return job


async def write(gw: Any, job: dict[str, Any], action: str, queue: str = "", **body: Any) -> Call:
    """POST .../jobs/{id}/<action> with the claim's attempt and token (overridable by ``body``)."""
    owner = {"attempt": job["attempt"], "token": job["token"], **body}
    path = f"/v1/queues/{queue or gw.queue}/jobs/{job['id']}/{action}"
    status, reply = await gw.call("POST", path, json=owner)
    return status, reply


def code(call: Call) -> tuple[int, str]:
    status, body = call
    return status, body["error"]["code"]


async def test_a_claim_records_its_worker_on_the_job_and_in_its_events(
    gw: Any, engine: Engine, put: Any
) -> None:
    q = gw.queue
    a, b = await put(q, priority=1), await put(q, priority=2)
    job = await claim_one(gw, q, worker="billing-go:pod-7f9c:1")
    assert job["id"] == a
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{a}")
    assert (status, got["worker"]) == (200, "billing-go:pod-7f9c:1")
    events = [orjson.loads(e.value) for e in await engine.events.read(q) if e.job_id == a]
    assert [e["worker"] for e in events if e["to"] == "running"] == ["billing-go:pod-7f9c:1"]
    assert "billing-go:pod-7f9c:1" in await count_alive(engine._client, "http-worker", 60), "jobq status"
    await claim_one(gw, q)  # no name given: the token's
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{b}")
    assert got["worker"].startswith("http:gate-"), "the token's name (a bare gateway secret's)"
    for bad in ("has space", "", "x" * 129, "-leading", "brace{q}", "new\nline", 7, ["w"]):
        status, body = await gw.call("POST", f"/v1/queues/{q}/claims", json={"n": 1, "worker": bad})
        assert (status, body["error"]["code"]) == (400, "body_invalid"), bad
        assert [f["field"] for f in body["error"]["fields"]] == ["worker"]


async def test_release_gives_a_job_back_with_its_attempt_refunded(gw: Any, put: Any) -> None:
    q = gw.queue
    job_id = await put(q, max_attempts=1)
    job = await claim_one(gw, q)
    assert code(await write(gw, job, "release", token="forged")) == (409, "lease_stale")
    assert code(await write(gw, job, "release", attempt=2)) == (409, "lease_stale")
    for bad in ({"attempt": 0}, {"started": "maybe"}, {"token": ""}, {"colour": 1}):
        assert code(await write(gw, job, "release", **bad)) == (400, "body_invalid"), bad
    assert await write(gw, job, "release") == (200, {"id": job_id, "outcome": "released"})
    assert code(await write(gw, job, "release")) == (409, "lease_stale"), "given back: that pair is spent"
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{job_id}")
    assert (status, got["state"], got["attempt"]) == (200, "pending", 0)
    again = await claim_one(gw, q)
    assert (again["id"], again["attempt"]) == (job_id, 1), "its only attempt was refunded"
    gone = {**again, "id": "no-such-job"}
    assert code(await write(gw, gone, "release")) == (404, "job_not_found")


async def test_release_of_a_started_at_most_once_job_ends_it_errored(
    gw: Any, engine: Engine, put: Any
) -> None:
    q = gw.queue
    status, _ = await gw.call("PUT", "/v1/kinds/once", json={"delivery": "at_most_once", "queues": [q]})
    assert status == 200
    first, second = await put(q, kind="once", priority=1), await put(q, kind="once", priority=2)
    jobs = await claim(gw, q, 2)
    assert [j["id"] for j in jobs] == [first, second]
    assert await write(gw, jobs[0], "release") == (200, {"id": first, "outcome": "errored"})
    assert await write(gw, jobs[1], "release", started=False) == (200, {"id": second, "outcome": "released"})
    assert [j.id for j in await engine.reads.dead_list(q)] == [first]


async def test_snooze_puts_the_job_back_after_a_delay_without_spending_an_attempt(gw: Any, put: Any) -> None:
    q = gw.queue
    job_id = await put(q, max_attempts=1)
    job = await claim_one(gw, q)
    for bad in ({}, {"delay_ms": -1}, {"delay_ms": 366 * 86_400_000}, {"delay_ms": "soon"}):
        assert code(await write(gw, job, "snooze", **bad)) == (400, "body_invalid"), bad
    assert code(await write(gw, job, "snooze", delay_ms=0, token="forged")) == (409, "lease_stale")
    status, body = await write(gw, job, "snooze", delay_ms=0)
    assert (status, body["state"]) == (200, "pending")
    job = await claim_one(gw, q)
    assert job["attempt"] == 1, "the snooze spent no attempt"
    status, body = await write(gw, job, "snooze", delay_ms=3_600_000)
    assert (status, body["state"]) == (200, "delayed")
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{job_id}")
    assert (got["state"], got["attempt"], got["run_at"]) == ("delayed", 0, body["run_at_ms"])
    assert await claim(gw, q) == [], "not claimable before its time"
    assert code(await write(gw, job, "snooze", delay_ms=0)) == (409, "lease_stale")


async def test_a_worker_cancels_a_job_it_holds(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    job_id = await put(q)
    job = await claim_one(gw, q)
    assert code(await write(gw, job, "cancel", reason="x" * 1001)) == (400, "body_invalid")
    assert code(await write(gw, job, "cancel", reason="")) == (400, "body_invalid")
    assert code(await write(gw, job, "cancel", token="forged")) == (409, "lease_stale")
    assert code(await write(gw, {**job, "id": "nope"}, "cancel")) == (404, "job_not_found")
    done = (200, {"id": job_id, "state": "canceled"})
    assert await write(gw, job, "cancel", reason="customer gone") == done
    assert await write(gw, job, "cancel", reason="customer gone") == done, "sent again: the same answer"
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{job_id}")
    assert (status, got["state"], got["reason"]) == (200, "canceled", "customer gone")
    assert code(await write(gw, job, "complete")) == (409, "lease_stale"), "never completed after"
    assert (await engine.reads.depth(q)).pending == 0, "never retried"


async def test_heartbeat_extends_many_leases_and_says_which_are_still_held(
    gw: Any, engine: Engine, put: Any
) -> None:
    q = gw.queue
    ids = [await put(q, priority=i) for i in range(3)]
    a, b, c = await claim(gw, q, 3, lease_ms=5_000)
    assert [a["id"], b["id"], c["id"]] == ids
    status, _ = await gw.call("DELETE", f"/v1/queues/{q}/jobs/{c['id']}")  # flagged: canceled at its extend
    assert status == 200
    held = [{"id": j["id"], "attempt": j["attempt"], "token": j["token"]} for j in (a, b, c)]
    held[1]["token"] = "forged"
    held.append({"id": "gone", "attempt": 1, "token": "t"})
    now = await engine.now()
    status, body = await gw.call("POST", f"/v1/queues/{q}/heartbeat", json={"jobs": held, "lease_ms": 60_000})
    assert status == 200, body
    answers = [(j["id"], j["held"], j.get("code")) for j in body["jobs"]]
    assert answers == [
        (a["id"], True, None),
        (b["id"], False, "lease_stale"),
        (c["id"], False, "job_canceled"),
        ("gone", False, "job_not_found"),
    ]
    assert body["held"] == 1
    deadline = body["jobs"][0]["lease_deadline_ms"]
    assert now + 59_000 <= deadline < now + 70_000  # two readings of Redis's clock: a little slack
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{a['id']}")
    assert got["lease_deadline"] == deadline
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{c['id']}")
    assert got["state"] == "canceled"

    one = held[:1]
    bad_bodies: list[Any] = [
        {"jobs": []},
        {"jobs": one * 2},
        {"jobs": [{**one[0], "id": f"j{i}"} for i in range(1001)]},
        {"jobs": [{**one[0], "id": "bad id"}]},
        {"jobs": [{**one[0], "attempt": 0}]},
        {"jobs": one, "lease_ms": 10},
        {"jobs": one, "extra": 1},
        {"jobs": "all"},
        [one],
    ]
    for bad in bad_bodies:
        status, body = await gw.call("POST", f"/v1/queues/{q}/heartbeat", json=bad)
        assert (status, body["error"]["code"]) == (400, "body_invalid"), bad


def test_the_new_worker_routes_need_the_work_scope_only() -> None:
    for action in ("release", "snooze", "cancel", "extend", "complete", "fail"):
        assert policy_for("POST", f"/v1/queues/{{queue}}/jobs/{{id}}/{action}").scope == "work"
    assert policy_for("POST", "/v1/queues/{queue}/heartbeat").scope == "work"
    assert policy_for("POST", "/v1/graphs/{graph}/cancel").scope == "admin", "a graph's cancel stays admin"
    assert policy_for("DELETE", "/v1/queues/{queue}/jobs/{id}").scope == "admin"


async def test_a_fan_out_and_join_graph_driven_by_http_workers_alone(gw: Any, engine: Engine) -> None:
    """split → (left, right) → join: each node claimed and completed over HTTP; each completion's answer
    comes after the next nodes were released (claimable at once, no report left in the queue's
    ``gdone`` for a scheduler's repair — and no scheduler runs)."""
    q = gw.queue
    gid = f"{q.replace('.', '-')}-g"
    g = Graph(gid, queue=q)
    g.add("split", "split", [10])
    g.add("left", "add", [1], parents=["split"], feed="last")
    g.add("right", "add", [2], parents=["split"], feed="last")
    g.add("join", "sum", parents=["left", "right"], feed="list")
    assert await engine.graphs.create(g.spec()) == "stored"
    gdone = QueueKeys(q).gdone

    async def complete(job: dict[str, Any], result: Any) -> None:
        status, body = await write(gw, job, "complete", result=result)
        assert status == 200, body
        assert await engine._client.hlen(gdone) == 0, "reported to the graph before the answer"

    split = await claim_one(gw, q, worker="graph-http-1")
    assert (split["id"], split["args"]) == (f"{gid}:split", [10])
    root = {"id": gid, "node": "split", "feed": "none", "parents": {}, "failures": [], "fed": []}
    assert split["graph"] == root
    await complete(split, split["args"][0] * 2)

    branches = await claim(gw, q, 10)  # at once: released by the completion itself
    assert sorted(j["graph"]["node"] for j in branches) == ["left", "right"]
    for job in branches:
        parent = {"state": "completed", "result": 20, "error": None, "attempt": 0}  # as NodeInputs has it
        assert job["graph"]["parents"] == {"split": parent}
        assert job["graph"]["fed"] == [20], "feed last: the parent's result after the node's own args"
    by_node = {j["graph"]["node"]: j for j in branches}
    await complete(by_node["right"], sum(by_node["right"]["args"] + by_node["right"]["graph"]["fed"]))
    assert await claim(gw, q) == [], "the join waits for both parents"
    await complete(by_node["left"], sum(by_node["left"]["args"] + by_node["left"]["graph"]["fed"]))

    join = await claim_one(gw, q)
    assert join["graph"]["node"] == "join"
    assert list(join["graph"]["parents"]) == ["left", "right"], "in parent order"
    assert join["graph"]["fed"] == [[21, 22]], "feed list: every parent's result, in parent order"
    await complete(join, sum(join["graph"]["fed"][0]))

    status, graph = await gw.call("GET", f"/v1/graphs/{gid}")
    assert (status, graph["state"]) == (200, "completed")
    results = {n["name"]: n["result"] for n in graph["nodes"]}
    assert results == {"split": 20, "left": 21, "right": 22, "join": 43}
    status, got = await gw.call("GET", f"/v1/queues/{q}/jobs/{gid}:split")
    assert got["worker"] == "graph-http-1"


async def test_a_graph_node_failed_or_canceled_over_http_moves_its_graph_on(gw: Any, engine: Engine) -> None:
    q = gw.queue
    gid = f"{q.replace('.', '-')}-f"
    g = Graph(gid, queue=q)
    g.add("a", "k")
    g.add("b", "k")
    g.add("after", "k", parents=[g.always("a"), g.always("b")], feed="list")
    await engine.graphs.create(g.spec())
    a, b = sorted(await claim(gw, q, 2), key=lambda j: str(j["id"]))
    status, body = await write(gw, a, "fail", error="boom", permanent=True)
    assert (status, body["outcome"]) == (200, "errored")
    assert await write(gw, b, "cancel", reason="not needed") == (200, {"id": b["id"], "state": "canceled"})
    after = await claim_one(gw, q)
    parents = after["graph"]["parents"]
    assert (parents["a"]["state"], parents["a"]["error"]) == ("failed", "boom")
    assert (parents["b"]["state"], parents["b"]["error"]) == ("canceled", "not needed")
    assert [p["node"] for p in after["graph"]["fed"][0]] == ["a", "b"], "failures fed as documents"


async def test_one_token_notes_a_bounded_number_of_worker_names(
    gw: Any, engine: Engine, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review M7: a claim names any worker it likes, and each name was a member of the shared presence set
    for an hour. Now one token notes at most WORKER_NAMES_PER_TOKEN names per process (3 here): past it the
    claim still works, the name is not noted, and one log line says so (not one per claim)."""
    monkeypatch.setattr(state, "WORKER_NAMES_PER_TOKEN", 3)
    names = [f"{prefix}-w{i}" for i in range(6)]
    with capture_logs() as logs:
        for name in names:
            assert await claim(gw, gw.queue, worker=name) == [], "the claim answers whatever the cap"
    alive = set(await count_alive(engine._client, "http-worker", 60))
    assert [n in alive for n in names] == [True, True, True, False, False, False]
    over = [e for e in logs if e["event"].startswith("http worker names of a token over the cap")]
    assert len(over) == 1, over
    assert (over[0]["cap"], over[0]["worker"]) == (3, names[3])
    assert await claim(gw, gw.queue, worker=names[0]) == [], "a name already noted stays noted"


async def test_an_http_worker_that_stops_claiming_while_its_queue_waits_is_judged_silent(
    gw: Any, engine: Engine, put: Any, prefix: str, eventually: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 57 item 4: the gateway keeps an HTTP worker's presence record (the queues it claims from, its
    last claim from each), so it is judged as a pool is (threshold cut to 0.3 s, every claim noted)."""
    monkeypatch.setattr(presence, "SILENT_AFTER_S", 0.3)
    monkeypatch.setattr(state, "WORKER_SEEN_EVERY_S", 0.0)
    q, name = gw.queue, f"{prefix}-go:pod-1"

    async def row() -> dict[str, Any]:
        rows = claimer_rows(await presence.claimers(engine._client), now_ms(), [await queue_row(engine, q)])
        (found,) = [r for r in rows if r["name"] == name]
        return found

    for _ in range(3):
        await put(q)
    await claim_one(gw, q, worker=name)
    assert (await row())["silent"] == [], "it just claimed"
    found = await eventually(row, lambda r: r["silent"], timeout_s=30)  # its queue waits; it asks no more
    assert (found["silent"], found["role"], found["slots"]) == ([q], "http-worker", None)
    await claim_one(gw, q, worker=name)
    assert (await row())["silent"] == [], "a claim is noted at once: the next job still waits, it takes them"
