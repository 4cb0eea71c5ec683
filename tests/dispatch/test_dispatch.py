"""The push dispatcher over the real stack (gateway, Kafka, relay, Redis, scheduler) against a real aiohttp
downstream: it succeeds, fails, times out, answers 202 and calls back — late (stale) and in time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from jqcore.clock import now_ms
from jqruntime.stores import dispatch as dispatch_store
from jqruntime.stores import presence
from jqruntime.stores.presence import alive
from tests.dispatch.conftest import Rig

FAST = {"base_s": 0.05, "factor": 1, "cap_s": 0.05}


async def put_kind(rig: Rig, kind: str, **dispatch: Any) -> dict[str, Any]:
    status, body = await rig.call(
        "PUT",
        f"/v1/kinds/{kind}",
        json={"queues": [rig.queue], "max_attempts": 3, "dispatch": {"url": rig.downstream.url, **dispatch}},
    )
    assert status == 200, body
    return dict(body)


async def enqueue(rig: Rig, kind: str, args: Any = None) -> str:
    return str((await rig.client.enqueue_one(rig.queue, kind, args))["id"])


async def finished(rig: Rig, job_id: str, attempt: int, outcome: str) -> None:
    await rig.signals.finished.wait_for(lambda v: v == (job_id, attempt, outcome), timeout_s=15)


async def job(rig: Rig, job_id: str) -> Any:
    got = await rig.engine.reads.get_job(rig.queue, job_id)
    assert got is not None
    return got


async def test_answers_at_once_succeed_fail_and_time_out(
    rig: Rig, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ok, flaky, slow, broken = (f"{prefix}.{k}" for k in ("ok", "flaky", "slow", "broken"))

    async def echo(j: dict[str, Any]) -> web.StreamResponse:
        return web.json_response({"echo": j["args"], "attempt": j["attempt"]})

    async def flaky_first(j: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=500, text="db down") if j["attempt"] == 1 else await echo(j)

    retried = asyncio.Event()

    async def slow_first(j: dict[str, Any]) -> web.StreamResponse:
        if j["attempt"] == 1:  # answers only once the dispatcher gave up on it and sent attempt 2
            await asyncio.wait_for(retried.wait(), 30)
        else:
            retried.set()
        return await echo(j)

    async def refuse(_: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=503, text="overloaded")

    rig.downstream.behave.update({ok: echo, flaky: flaky_first, slow: slow_first, broken: refuse})
    shown = await put_kind(rig, ok, auth="Bearer s3cret-value", backoff=FAST)
    assert shown["dispatch"]["auth"] == {"header": "Authorization", "value": "********"}
    for kind in (flaky, slow, broken):
        await put_kind(rig, kind, timeout_s=0.3, backoff=FAST)
    status, listed = await rig.call("GET", f"/v1/kinds/{ok}")
    assert (status, listed["queues"][rig.queue]["dispatch"]["auth"]["value"]) == (200, "********")
    assert listed["dispatch"] is None  # none for every queue: this one is the queue's own
    await rig.refresh()

    before = now_ms()
    ids = {k: await enqueue(rig, k, {"n": i}) for i, k in enumerate((ok, flaky, slow, broken))}
    await finished(rig, ids[ok], 1, "succeeded")
    await finished(rig, ids[flaky], 2, "succeeded")
    await finished(rig, ids[slow], 2, "succeeded")
    await finished(rig, ids[broken], 3, "failed")

    done = await job(rig, ids[ok])
    assert (done.state, done.attempt) == ("completed", 1)
    assert json.loads(done.result or "null") == {"echo": {"n": 0}, "attempt": 1}
    sent, headers = next((j, h) for j, h in rig.downstream.received if j["id"] == ids[ok])
    assert headers["Authorization"] == "Bearer s3cret-value"
    assert headers["Idempotency-Key"] == f"{ids[ok]}:1"
    assert (sent["queue"], sent["kind"], sent["attempt"], sent["args"]) == (rig.queue, ok, 1, {"n": 0})
    assert sent["callback"]["complete_url"].endswith(f"/v1/callbacks/{rig.queue}/jobs/{ids[ok]}/complete")

    retried = await job(rig, ids[flaky])
    assert (retried.state, [h["outcome"] for h in retried.history]) == ("completed", ["failed", "completed"])
    assert "HTTP 500: db down" in retried.history[0]["error"]
    timed_out = await job(rig, ids[slow])
    assert timed_out.state == "completed"
    assert "timeout" in timed_out.history[0]["error"]
    dead = await job(rig, ids[broken])
    assert (dead.state, dead.attempt) == ("errored", 3)
    assert "HTTP 503: overloaded" in (dead.last_error or "")
    logged = capsys.readouterr().err  # the session logs to stderr (tests/conftest.py)
    assert "dispatched" in logged
    assert "s3cret-value" not in logged  # the auth value is never logged

    d = rig.dispatcher  # its presence record (the silent-worker judgment): its last claim, its slots
    assert d is not None
    await d._presence.beat()
    (me,) = [
        c for c in await presence.claimers(rig.engine._client, ["dispatcher"]) if c.name == d._presence.name
    ]
    assert me.last_claim[rig.queue] >= before
    assert (me.busy, me.slots) == (0, d.settings.concurrency)

    # what the dashboard's Workers page reads of it: its presence record, beside its heartbeat
    assert rig.dispatcher is not None
    announced = rig.dispatcher._presence
    await announced.beat()
    (mine,) = [a for a in await alive(rig.redis, "dispatcher") if a.name == announced.name]
    slots = rig.dispatcher.settings.concurrency
    assert (mine.record["kind"], mine.record["queues"], mine.record["slots"]) == (
        "dispatcher",
        [rig.queue],
        slots,
    )
    assert mine.record["processed"] >= len(ids), "each job's last attempt at least"
    assert mine.record["version"]
    assert mine.record["started_ms"] <= now_ms()


async def test_202_then_callbacks_late_ones_refused(rig: Rig, prefix: str) -> None:
    later, gives_up, waits = f"{prefix}.later", f"{prefix}.gives-up", f"{prefix}.waits"

    async def accepted(_: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=202)

    rig.downstream.behave.update({later: accepted, gives_up: accepted, waits: accepted})
    await put_kind(rig, later, callback_timeout_s=0.5, backoff=FAST)
    await put_kind(rig, gives_up, backoff=FAST)
    await put_kind(rig, waits, callback_timeout_s=0.3, backoff={"base_s": 600, "factor": 1, "cap_s": 600})
    await rig.refresh()
    job_id = await enqueue(rig, later)
    other = await enqueue(rig, gives_up)
    waiting = await enqueue(rig, waits)

    # attempt 1 is accepted but never called back: failed after callback_timeout_s, retried
    await finished(rig, job_id, 1, "callback_timeout")
    while len(rig.downstream.posts(job_id)) < 2:
        rig.downstream.arrived.clear()
        await asyncio.wait_for(rig.downstream.arrived.wait(), 10)
    first, second = (p["callback"] for p in rig.downstream.posts(job_id))

    async def callback(cb: dict[str, Any], outcome: str, **body: Any) -> tuple[int, Any]:
        async with rig.http.post(cb[f"{outcome}_url"], json=body, headers={"Authorization": ""}) as resp:
            return resp.status, await resp.json()

    status, body = await callback(first, "complete", callback_token=first["token"], result={"late": True})
    assert (status, body["error"]["code"]) == (409, "callback_stale"), body
    assert (body["error"]["attempt"], body["error"]["current_attempt"]) == (1, 2)

    tampered = second["token"][:-2] + ("AA" if not second["token"].endswith("AA") else "BB")
    status, body = await callback(second, "complete", callback_token=tampered)
    assert (status, body["error"]["code"]) == (403, "callback_signature_invalid")
    status, body = await callback(second, "complete", callback_token="not-a-token")
    assert (status, body["error"]["code"]) == (401, "callback_token_invalid")

    status, body = await callback(second, "complete", callback_token=second["token"], result={"n": 2})
    assert (status, body) == (200, {"id": job_id, "attempt": 2, "state": "completed"})
    await finished(rig, job_id, 2, "called_back")
    done = await job(rig, job_id)
    assert (done.state, done.result) == ("completed", '{"n":2}')
    again = await callback(second, "complete", callback_token=second["token"], result={"n": 2})
    assert again == (200, {"id": job_id, "attempt": 2, "state": "completed"})  # answered as the first time

    while not rig.downstream.posts(other):
        rig.downstream.arrived.clear()
        await asyncio.wait_for(rig.downstream.arrived.wait(), 10)
    cb = rig.downstream.posts(other)[0]["callback"]
    status, body = await callback(
        cb, "fail", callback_token=cb["token"], error="no such user", permanent=True
    )
    assert (status, body["outcome"]) == (200, "errored")
    await finished(rig, other, 1, "called_back")
    assert (await job(rig, other)).last_error == "no such user"

    # a callback after its attempt was failed, while the job waits for its retry: stale as well
    await finished(rig, waiting, 1, "callback_timeout")
    cb = rig.downstream.posts(waiting)[0]["callback"]
    status, body = await callback(cb, "complete", callback_token=cb["token"])
    assert (status, body["error"]["code"], body["error"]["state"]) == (409, "callback_stale", "delayed")
    assert (await job(rig, waiting)).state == "delayed"


async def test_dispatch_configuration_is_validated(rig: Rig, prefix: str) -> None:
    kind, q = f"{prefix}.bad", rig.queue
    for dispatch, field in (
        ({"url": "ftp://example.com/x"}, "dispatch.url"),
        ({"url": "not a url"}, "dispatch.url"),
        ({"url": "http://user:pw@example.com/"}, "dispatch"),
        ({"url": "http://example.com/", "timeout_s": 0}, "dispatch.timeout_s"),
        ({"url": "http://example.com/", "timeout_s": 301}, "dispatch.timeout_s"),
        (
            {"url": "http://example.com/", "auth": {"value": "x", "env": "JOBQ_DISPATCH_AUTH_X"}},
            "dispatch.auth",
        ),
        (
            {"url": "http://example.com/", "auth": {"header": "Bad Header", "value": "x"}},
            "dispatch.auth.header",
        ),
        ({"url": "http://example.com/", "auth": {"header": "Host", "value": "x"}}, "dispatch.auth.header"),
        (
            {"url": "http://example.com/", "auth": {"header": "Content-Length", "value": "1"}},
            "dispatch.auth.header",
        ),
        ({"url": "http://example.com/", "auth": "Bearer a\r\nInjected: 1"}, "dispatch.auth"),
        ({"url": "http://example.com/", "auth": "env:JOBQ_REDIS_PASSWORD"}, "dispatch.auth.env"),
        ({"url": "http://example.com/", "auth": "env:HOOK_TOKEN"}, "dispatch.auth.env"),
        ({"url": "http://example.com/", "auth": "file:../tokens.toml"}, "dispatch.auth.file"),
        ({"url": "http://example.com/", "extra": 1}, "dispatch.extra"),
    ):
        status, body = await rig.call("PUT", f"/v1/kinds/{kind}", json={"queues": [q], "dispatch": dispatch})
        assert (status, body["error"]["code"]) == (400, "body_invalid"), dispatch
        assert field in {f["field"] for f in body["error"]["fields"]}, (dispatch, body)
    status, body = await rig.call(
        "PUT",
        f"/v1/kinds/{kind}",
        json={
            "queues": [q],
            "dispatch": {"url": "https://example.com/h", "auth": "env:JOBQ_DISPATCH_AUTH_HOOK"},
        },
    )
    assert status == 200
    assert body["dispatch"]["auth"] == {"header": "Authorization", "env": "JOBQ_DISPATCH_AUTH_HOOK"}
    status, body = await rig.call("PUT", f"/v1/kinds/{kind}", json={"queues": [q]})
    assert (status, body["dispatch"]) == (200, None)  # a PUT without dispatch: back to worker pools
    assert (q, kind) not in await dispatch_store.configs(rig.redis)
