"""``jobq queue ls|show|pause|resume|purge`` against the real stack, and the purge route it stands on
(``POST /v1/queues/{queue}/purge``: admin, the path's queue), each run with a token that may and one that
may not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import consul
import orjson
import pytest

from jobq.commands import remote
from jqcore.clock import now_ms
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.pipeline import FarSettings
from jqrelay.main import RelayService
from jqruntime.client import JobqClient
from jqruntime.stores import audit
from kafkagate.main import GateService
from tests.cli.conftest import TEAMA, VIEWER, Ops, refused


def doc(result: Any) -> Any:
    """The command's one JSON line (the in-process relay's log lines share the captured stdout)."""
    assert result.exit_code == 0, (result.exit_code, result.output)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return orjson.loads(line)


async def fill(ops: Ops, queue: str, pending: int, delayed: int) -> None:
    for n in range(pending + delayed):
        later = ["--delay", "2h"] if n >= pending else []
        made = await ops.jobq("enqueue", queue, "k", str(n), *later)
        assert made.exit_code == 0, made.output
    await ops.relayed(pending + delayed)


async def test_ls_show_pause_and_resume(ops: Ops) -> None:
    q = ops.queue
    await fill(ops, q, pending=2, delayed=1)
    listed = await ops.jobq("queue", "ls", f"{ops.prefix}*")
    assert listed.exit_code == 0, listed.output
    (row,) = [line for line in listed.stdout.splitlines() if q in line]
    assert row.split("│")[2:5] == [" active ", "       2 ", "       1 "]
    (info,) = doc(await ops.jobq("queue", "ls", f"{ops.prefix}*", "--json"))["queues"]
    assert (info["queue"], info["depth"]["pending"], info["depth"]["delayed"]) == (q, 2, 1)
    assert "no queue matches" in (await ops.jobq("queue", "ls", f"{ops.prefix}-none*")).stdout

    refused(await ops.jobq("queue", "pause", q, token=VIEWER), "scope_missing")
    refused(await ops.jobq("queue", "pause", q, token=TEAMA), "queue_forbidden")
    paused = await ops.jobq("queue", "pause", q)
    assert paused.exit_code == 0, paused.output
    assert f"queue {q} paused" in paused.stdout
    shown = await ops.jobq("queue", "show", q, token=VIEWER)
    assert shown.exit_code == 0, shown.output
    assert f"queue {q} (paused)" in shown.stdout
    assert "paused" in shown.stdout
    assert "true *" in shown.stdout, "a setting off its default is marked"
    assert "lease_ms" in shown.stdout
    assert "30000 (30s)" in shown.stdout
    assert "pending 2, delayed 1" in shown.stdout
    assert doc(await ops.jobq("queue", "show", q, "--json"))["config"]["paused"] is True
    resumed = await ops.jobq("queue", "resume", q, "--json")
    assert doc(resumed)["config"]["paused"] is False


async def test_rate_sets_shows_and_lifts_a_queues_live_limit_and_the_relay_applies_it(
    ops: Ops, consul_client: consul.Consul
) -> None:
    """``jobq queue rate`` over ``PATCH /v1/queues/{queue} {"rate": ...}``: kept in Consul where the
    relays watch, applied by the running relay, audited, refused to tokens without admin on the queue and
    for a text that is no rate."""
    q = ops.queue
    key = f"jobq-test/{ops.prefix}/queue-rates/{q}"
    refused(await ops.jobq("queue", "rate", q, "50/s", token=VIEWER), "scope_missing")
    refused(await ops.jobq("queue", "rate", q, "50/s", token=TEAMA), "queue_forbidden")
    refused(await ops.jobq("queue", "rate", q, "fast"), "rate_invalid")
    assert consul_client.kv.get(key)[1] is None, "nothing kept for a refused call"

    applied = ops.relay.signals[ops.topic].queue_limits.applied
    mark = applied.mark()
    set_ = await ops.jobq("queue", "rate", q, "3000/m burst 20")
    assert set_.exit_code == 0, set_.output
    assert f"queue {q}: rate 50/s burst 20" in set_.stdout
    assert consul_client.kv.get(key)[1]["Value"] == b"50/s burst 20"
    await applied.wait_for(lambda r: r.get(q) == 50.0, after=mark)
    shown = await ops.jobq("queue", "show", q, token=VIEWER)
    assert "rate: 50/s burst 20" in shown.stdout
    assert doc(await ops.jobq("queue", "rate", q, "--json", token=VIEWER))["rate"] == {
        "limit": "50/s burst 20",
        "per_s": 50.0,
        "burst": 20,
        "paused": False,
    }
    entry = next(e for e in await audit.read(ops.redis, 200) if e.target == q and "PATCH" in e.action)
    assert "rate=50/s burst 20" in entry.details

    paused = doc(await ops.jobq("queue", "rate", q, "paused", "--json"))
    assert paused["rate"]["paused"] is True
    await applied.wait_for(lambda r: r.get(q) == 0, after=mark)
    lifted = await ops.jobq("queue", "rate", q, "unlimited")
    assert f"queue {q}: rate unlimited" in lifted.stdout
    assert consul_client.kv.get(key)[1] is None, "unlimited: the key deleted"
    await applied.wait_for(lambda r: q not in r, after=mark)


async def test_purge_names_the_count_asks_and_cancels_what_waits(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = ops.queue
    await fill(ops, q, pending=3, delayed=2)
    asked = await ops.jobq("queue", "purge", q)
    line = refused(asked, "confirmation_required")
    assert f"cancel the 5 job(s) waiting in {q} (3 pending, 2 delayed, 0 far)?" in line
    refused(await ops.jobq("queue", "purge", q, "--yes", token=VIEWER), "scope_missing")
    refused(await ops.jobq("queue", "purge", q, "--yes", token=TEAMA), "queue_forbidden")

    monkeypatch.setattr(remote, "_interactive", lambda: True)
    no = await ops.jobq("queue", "purge", q, stdin="n\n")
    assert no.exit_code == 1, no.output
    assert "nothing done" in no.stderr
    assert (await ops.engine.reads.depth(q)).pending == 3
    yes = await ops.jobq("queue", "purge", q, stdin="y\n")
    assert yes.exit_code == 0, yes.output
    assert f"queue {q}: canceled 5 job(s) (3 pending, 2 delayed, 0 far); 0 waiting now" in yes.stdout
    depth = await ops.engine.reads.depth(q)
    assert (depth.pending, depth.delayed) == (0, 0)
    entry = next(e for e in await audit.read(ops.redis, 200) if e.target == q and "purge" in e.action)
    assert (entry.action, entry.who, entry.count) == ("gate.POST /v1/queues/{queue}/purge", "ops", 5)

    empty = await ops.jobq("queue", "purge", q, "--json")  # nothing waits: nothing to ask
    assert doc(empty)["canceled"] == 0


async def test_the_purge_route_cancels_at_most_its_limit_and_says_what_remains(ops: Ops) -> None:
    q = ops.queue
    await fill(ops, q, pending=3, delayed=1)
    async with ops.gate_client() as http:
        status, body = await http("POST", f"/v1/queues/{q}/purge", {"limit": 2, "states": ["pending"]})
        assert status == 200, body
        assert body == {"queue": q, "canceled": 2, "by_state": {"pending": 2}, "remaining": 1}
        status, body = await http("POST", f"/v1/queues/{q}/purge", {"states": ["running"]})
        assert (status, body["error"]["code"]) == (400, "body_invalid")
    job = await ops.engine.reads.get_job(q, (await ops.engine.reads.list_ids(q, "done", 0, 1))[0][0])
    assert job is not None
    assert (job.state, job.reason) == ("canceled", "purged over HTTP")


async def test_a_purge_tombstones_far_future_jobs_in_the_schedule_topic(
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    topic_reader: Callable[..., list[Any]],
    token: str,
) -> None:
    far = FarSettings.model_validate({"horizon_s": 60, "topic": f"{prefix}.schedule", "partitions": 1})
    topic, q = make_topic("jobs", partitions=1), f"{prefix}.far"
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    async with (
        make_gate(routing, far=far) as gate,
        make_relay(topic, far=far) as relay,
        JobqClient([gate.url], token) as client,
    ):
        later = now_ms() + 3_600_000
        ids = [(await client.enqueue_one(q, "k", n, run_at=later))["id"] for n in range(2)]
        await relay.signals[topic].batch.wait_for(lambda c: c.get("scheduled", 0) >= 2)
        assert (await client.queue(q))["depth"]["far"] == 2
        body = await client.request("POST", f"/v1/queues/{q}/purge", json={"states": ["far"]})
        assert body == {"queue": q, "canceled": 2, "by_state": {"far": 2}, "remaining": 0}
        records = await asyncio.to_thread(topic_reader, far.topic, 4)
        tombstones = sorted(r.key().decode() for r in records if r.value() is None)
        assert tombstones == sorted(f"{q}/{i}" for i in ids), "no rebuild of the tier brings them back"
