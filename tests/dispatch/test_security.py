"""The dispatcher and its callbacks as the security review (2026-12-05: C2, H2, H4, M1, L1, L6) left them,
over the real stack: what a kind's auth may send, dispatch configuration per (queue, kind), the egress
policy, callback tokens bound to the claim and to dispatch kinds, and what read tokens see."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from jqcore.clock import now_ms
from jqdispatch.service import Dispatcher
from jqengine import ClaimedJob, Released
from jqruntime.dispatch import lease_nonce, sign_callback
from jqruntime.stores import audit
from jqruntime.stores import dispatch as dispatch_store
from tests.conftest import Eventually
from tests.dispatch.conftest import READ_TOKEN, SECRET, Downstream, Pipeline, Rig, dispatcher_settings
from tests.dispatch.test_dispatch import enqueue, finished, job


async def ok(j: dict[str, Any]) -> web.StreamResponse:
    return web.json_response({"handled": j["id"]})


async def put(call: Callable[..., Any], kind: str, **body: Any) -> dict[str, Any]:
    status, answer = await call("PUT", f"/v1/kinds/{kind}", json={"max_attempts": 1, **body})
    assert status == 200, answer
    return dict(answer)


# ---- C2: the dispatcher holds no secret it can be asked to send --------------------------------------------
async def test_auth_names_only_dispatch_credentials_and_is_refused_again_when_sent(
    rig: Rig, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's attack (``auth.env: JOBQ_REDIS_PASSWORD`` to an attacker's URL) is a 400 at PUT; a
    configuration stored around that check (written before the rule, or into Redis directly) fails its
    attempt in the dispatcher with nothing sent. A ``JOBQ_DISPATCH_AUTH_*`` variable and a file of the
    secrets folder are sent."""
    leak, env_kind, file_kind = (f"{prefix}.{k}" for k in ("leak", "env", "file"))
    monkeypatch.setenv("JOBQ_CALLBACK_SECRET", SECRET)  # as in a deployed dispatcher's environment
    monkeypatch.setenv(f"JOBQ_DISPATCH_AUTH_{prefix.upper()}", "Bearer from-the-environment")
    assert rig.secrets is not None
    (rig.secrets / "hook-token").write_text("Bearer from-a-file\n")
    rig.downstream.behave.update({leak: ok, env_kind: ok, file_kind: ok})

    attack = {"url": rig.downstream.url, "auth": {"header": "X-Leak", "env": "JOBQ_CALLBACK_SECRET"}}
    status, body = await rig.call(
        "PUT", f"/v1/kinds/{leak}", json={"queues": [rig.queue], "dispatch": attack}
    )
    assert (status, body["error"]["code"]) == (400, "body_invalid")
    (field,) = body["error"]["fields"]
    assert field["field"] == "dispatch.auth.env"
    assert "JOBQ_DISPATCH_AUTH_" in field["problem"]

    await put(rig.call, leak, queues=[rig.queue], dispatch={"url": rig.downstream.url})
    stored = (
        f'{{"url": "{rig.downstream.url}", "auth": {{"header": "X-Leak", "env": "JOBQ_CALLBACK_SECRET"}}}}'
    )
    await dispatch_store.put(rig.redis, leak, [rig.queue], stored)  # around the gateway's check
    env_auth = {"header": "X-Hook-Token", "env": f"JOBQ_DISPATCH_AUTH_{prefix.upper()}"}
    await put(rig.call, env_kind, queues=[rig.queue], dispatch={"url": rig.downstream.url, "auth": env_auth})
    file_auth = {"header": "X-Hook-Token", "file": "hook-token"}
    await put(
        rig.call, file_kind, queues=[rig.queue], dispatch={"url": rig.downstream.url, "auth": file_auth}
    )
    await rig.refresh()

    leaked, by_env, by_file = [await enqueue(rig, k) for k in (leak, env_kind, file_kind)]
    await finished(rig, leaked, 1, "refused")
    await finished(rig, by_env, 1, "succeeded")
    await finished(rig, by_file, 1, "succeeded")
    assert rig.downstream.posts(leaked) == []  # nothing was sent
    dead = await job(rig, leaked)
    assert dead.state == "errored"
    assert "JOBQ_DISPATCH_AUTH_" in (dead.last_error or "")
    assert SECRET not in (dead.last_error or "")
    sent = {j["id"]: h for j, h in rig.downstream.received}
    assert sent[by_env]["X-Hook-Token"] == "Bearer from-the-environment"
    assert sent[by_file]["X-Hook-Token"] == "Bearer from-a-file"


# ---- H2: dispatch configuration per (queue, kind) ---------------------------------------------------------
async def test_dispatch_configuration_is_kept_per_queue_and_kind(rig: Rig, prefix: str) -> None:
    """Another queue's PUT neither replaces nor removes this queue's configuration; a job is pushed with its
    queue's own, else the one for every queue; a kind pushed only from another queue is handed back."""
    kind, every_only, elsewhere = f"{prefix}.k", f"{prefix}.every", f"{prefix}.elsewhere"
    other = f"{prefix}.other"
    rig.downstream.behave.update({kind: ok, every_only: ok})

    status, body = await rig.call(
        "PUT", f"/v1/kinds/{kind}", json={"queues": [], "dispatch": {"url": "https://a/"}}
    )
    assert (status, body["error"]["code"]) == (400, "kind_queues_empty"), body
    status, body = await rig.call("PUT", f"/v1/kinds/{kind}", json={"queues": []})
    assert (status, body["error"]["code"]) == (400, "kind_queues_empty"), body

    await put(rig.call, kind, queues=[rig.queue], dispatch={"url": rig.downstream.url})
    await put(rig.call, kind, queues=[other], dispatch={"url": "https://other-team.example/hook"})
    await put(rig.call, kind, dispatch={"url": "http://10.0.0.1/every"})  # every queue without its own
    await put(rig.call, every_only, dispatch={"url": rig.downstream.url})
    await put(rig.call, elsewhere, queues=[other], dispatch={"url": rig.downstream.url})
    stored = await dispatch_store.configs(rig.redis)
    assert {key for key in stored if key[1] == kind} == {(rig.queue, kind), (other, kind), ("*", kind)}

    await put(rig.call, kind, queues=[other])  # the other team turns its own push off: only theirs goes
    stored = await dispatch_store.configs(rig.redis)
    assert {key for key in stored if key[1] == kind} == {(rig.queue, kind), ("*", kind)}
    assert rig.downstream.url in stored[rig.queue, kind]

    status, shown = await rig.call("GET", f"/v1/kinds/{kind}")
    assert status == 200, shown
    assert shown["dispatch"]["url"] == "http://10.0.0.1/every"
    assert shown["queues"][rig.queue]["dispatch"]["url"] == rig.downstream.url

    await rig.refresh()
    own, every, handed_id = [await enqueue(rig, k) for k in (kind, every_only, elsewhere)]
    await finished(rig, own, 1, "succeeded")  # its queue's configuration, not the one for all
    await finished(rig, every, 1, "succeeded")
    await rig.signals.handed_back.wait_for(lambda v: v == (handed_id, elsewhere), timeout_s=15)
    assert rig.downstream.posts(handed_id) == []


# ---- M1: the egress policy ------------------------------------------------------------------------------
async def test_an_internal_address_is_refused_unless_allowed_and_gets_no_request(
    pipeline: Pipeline, downstream: Downstream, prefix: str
) -> None:
    """A dispatcher without ``JOBQ_DISPATCHER_ALLOW_NETS``: the downstream on 127.0.0.1 is up and would
    answer, but no request reaches it; the cloud metadata address is refused the same way."""
    local, metadata = f"{prefix}.local", f"{prefix}.metadata"
    downstream.behave[local] = ok
    await put(pipeline.call, local, queues=[pipeline.queue], dispatch={"url": downstream.url})
    probe = {"url": "http://169.254.169.254/latest/meta-data/iam/security-credentials/"}
    await put(pipeline.call, metadata, queues=[pipeline.queue], dispatch=probe)
    dispatcher = Dispatcher(
        pipeline.engine, dispatcher_settings(pipeline.queue, pipeline.gate_url), redis=pipeline.redis
    )
    dispatcher.signals.finished.enable()
    async with dispatcher:
        ids = [(await pipeline.client.enqueue_one(pipeline.queue, k, None))["id"] for k in (local, metadata)]
        for job_id in ids:
            await dispatcher.signals.finished.wait_for(
                lambda v, i=job_id: v == (i, 1, "refused"), timeout_s=15
            )
    assert downstream.received == []
    errors = [j.last_error or "" for j in await pipeline.engine.reads.get_jobs(pipeline.queue, ids) if j]
    assert "127.0.0.1" in errors[0]
    assert "169.254.169.254" in errors[1]
    assert all("JOBQ_DISPATCHER_ALLOW_NETS" in e for e in errors), errors


# ---- L1, H4: callback tokens bound to the claim and to dispatch kinds -------------------------------------
async def claim_one(pipeline: Pipeline, eventually: Eventually) -> ClaimedJob:
    """The next job of the pipeline's queue, claimed as a dispatcher would (waits for the relay)."""
    jobs = await eventually(
        lambda: pipeline.engine.jobs.claim(pipeline.queue, 1, lease_ms=60_000, worker="t"), bool
    )
    return jobs[0]  # type: ignore[no-any-return]


def token_of(job: ClaimedJob) -> str:
    """The callback token the dispatcher signs for this claim."""
    return sign_callback(SECRET, job.queue, job.id, job.attempt, now_ms() + 60_000, lease_nonce(job.token))


async def callback(pipeline: Pipeline, job: ClaimedJob, token: str, **body: Any) -> tuple[int, Any]:
    url = f"{pipeline.gate_url}/v1/callbacks/{job.queue}/jobs/{job.id}/complete"
    async with pipeline.http.post(
        url, json={"callback_token": token, **body}, headers={"Authorization": ""}
    ) as r:
        return r.status, await r.json()


async def test_a_released_attempt_claimed_again_kills_its_old_callback_token(
    pipeline: Pipeline, prefix: str, eventually: Eventually
) -> None:
    """A release refunds the attempt: the next claim runs under the same number, but with another lease
    token, so the first claim's callback token (held by the downstream of the time) is stale; the one
    callback that completes the job is recorded in the audit trail, the same callback sent again is not."""
    kind = f"{prefix}.pushed"
    await put(pipeline.call, kind, queues=[pipeline.queue], dispatch={"url": "https://downstream.example/h"})
    await pipeline.client.enqueue_one(pipeline.queue, kind, None)
    first = await claim_one(pipeline, eventually)
    released = await pipeline.engine.jobs.release(
        pipeline.queue, [(first.id, first.attempt, first.token, True)]
    )
    assert released == {first.id: Released.RELEASED}
    second = await claim_one(pipeline, eventually)
    assert (second.id, second.attempt) == (first.id, first.attempt)
    assert second.token != first.token

    status, body = await callback(pipeline, first, token_of(first), result={"from": "the first claim"})
    assert (status, body["error"]["code"]) == (409, "callback_stale"), body
    assert (body["error"]["attempt"], body["error"]["current_attempt"]) == (first.attempt, second.attempt)
    answer = {"id": second.id, "attempt": second.attempt, "state": "completed"}
    token = token_of(second)
    assert await callback(pipeline, second, token, result={"from": "the second"}) == (200, answer)
    assert await callback(pipeline, second, token, result={"from": "the second"}) == (200, answer)
    status, body = await callback(pipeline, first, token_of(first))
    assert (status, body["error"]["code"]) == (409, "callback_stale")
    done = await pipeline.engine.reads.get_job(pipeline.queue, first.id)
    assert done is not None
    assert (done.state, done.result) == ("completed", '{"from":"the second"}')

    target = f"{pipeline.queue}/{first.id}"
    recorded = [e for e in await audit.read(pipeline.redis, 1000) if e.target == target]
    assert [(e.action, e.who, e.outcome) for e in recorded] == [
        ("callback.complete", f"dispatch:{kind}", "ok")
    ]


async def test_a_job_whose_kind_is_not_pushed_from_its_queue_takes_no_callback(
    pipeline: Pipeline, prefix: str, eventually: Eventually
) -> None:
    """Even a token signed with the secret (leaked, or the dispatchers' key reused) cannot complete a job
    that no dispatcher pushes: a worker pool's kind, or a kind pushed from another queue only."""
    pooled, elsewhere = f"{prefix}.pooled", f"{prefix}.elsewhere"
    await put(pipeline.call, pooled, queues=[pipeline.queue])
    await put(pipeline.call, elsewhere, queues=[f"{prefix}.other"], dispatch={"url": "https://x.example/"})
    for kind in (pooled, elsewhere):
        await pipeline.client.enqueue_one(pipeline.queue, kind, None)
        held = await claim_one(pipeline, eventually)
        status, body = await callback(pipeline, held, token_of(held))
        assert (status, body["error"]["code"]) == (403, "callback_not_dispatched"), body
        still = await pipeline.engine.reads.get_job(pipeline.queue, held.id)
        assert still is not None
        assert still.state == "running"


# ---- L6: what read tokens see ----------------------------------------------------------------------------
async def test_read_tokens_see_dispatch_urls_masked_and_admins_whole(pipeline: Pipeline, prefix: str) -> None:
    kind = f"{prefix}.slack"
    url = "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX?key=SECRETQUERY"
    await put(pipeline.call, kind, queues=[pipeline.queue], dispatch={"url": url})
    await put(pipeline.call, kind, dispatch={"url": url})
    reader = {"Authorization": f"Bearer {READ_TOKEN}"}
    for path in (f"/v1/kinds/{kind}", "/v1/kinds"):
        status, masked = await pipeline.call("GET", path, headers=reader)
        assert status == 200, masked
        entry = masked if "kind" in masked else next(k for k in masked["kinds"] if k["kind"] == kind)
        assert entry["dispatch"]["url"] == "https://hooks.slack.example/…"
        assert entry["queues"][pipeline.queue]["dispatch"]["url"] == "https://hooks.slack.example/…"
        assert "SECRET" not in str(entry)
        status, whole = await pipeline.call("GET", path)
        entry = whole if "kind" in whole else next(k for k in whole["kinds"] if k["kind"] == kind)
        assert entry["dispatch"]["url"] == url
        assert entry["queues"][pipeline.queue]["dispatch"]["url"] == url
