"""The jobs search (live, every filter, paging by cursor), bulk actions with their confirmation, the job
page (envelope, result, attempts with tracebacks), its actions (cancel, retry, replay through Kafka), and
attacker-controlled text shown as text."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from jqcore.clock import now_ms
from jqcore.envelope import decode, new_envelope
from jqengine.keys import QueueKeys

pytestmark = pytest.mark.asyncio

HOUR = 3600 * 1000
XSS_ARG = "<script>alert(1)</script>"
XSS_ATTR = '"><img src=x onerror=alert(1)>'
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/tasks.py", line 12, in resize\n'
    "    raise ValueError(size)\n"
    "ValueError: size must be positive"
)


def _env(q: str, job_id: str, kind: str = "resize", **kw: Any) -> Any:
    return new_envelope(q, kind, kw.pop("args", {"n": 1}), id=job_id, **kw)


async def _kill(engine: Any, q: str, n: int, error: str = "boom") -> list[str]:
    """Claim ``n`` jobs of ``q`` and fail them for good: dead letters."""
    claimed = await engine.jobs.claim(q, n)
    for c in claimed:
        assert await engine.jobs.fail(q, (c.id, c.attempt, c.token), error, permanent=True) == "errored"
    return [c.id for c in claimed]


async def _finish(engine: Any, q: str, n: int, result: str = '{"ok": true}') -> list[str]:
    claimed = await engine.jobs.claim(q, n)
    for c in claimed:
        await engine.jobs.complete(q, (c.id, c.attempt, c.token), result)
    return [c.id for c in claimed]


def _ids(reply: Any) -> set[str]:
    return {r["id"] for r in reply.json()["rows"]}


async def test_search_by_each_filter(dash: Any, engine: Any, redis: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    now = now_ms()
    await engine.enqueue_batch(
        [
            _env(q, f"{prefix}-a1", "resize", meta={"region": "eu"}),
            _env(q, f"{prefix}-a2", "resize", meta={"region": "us"}),
            _env(q, f"{prefix}-d1", "dead"),
            _env(q, f"{prefix}-l1", "later", delay_ms=600_000),
        ]
    )
    await engine.enqueue_batch([_env(q, f"{prefix}-b1", "mail", at_ms=now - 2 * HOUR)], now_ms=now - 2 * HOUR)
    # stored two hours ago: Redis dates a record by its own clock, so the test backdates the record itself
    await redis.hset(QueueKeys(q).job(f"{prefix}-b1"), "enqueued_at", str(now - 2 * HOUR))
    # fail the "dead" job: claim the queue's first jobs until it is claimed
    claimed = await engine.jobs.claim(q, 10)
    for c in claimed:
        if c.id == f"{prefix}-d1":
            await engine.jobs.fail(q, (c.id, c.attempt, c.token), "boom", permanent=True)
        else:
            await engine.jobs.release(q, [(c.id, c.attempt, c.token, False)])
    every = {f"{prefix}-{x}" for x in ("a1", "a2", "b1", "d1", "l1")}
    assert _ids(await dash.get("/jobs", queue=q)) == every
    assert _ids(await dash.get("/jobs", queue=q, kind="mail")) == {f"{prefix}-b1"}
    assert _ids(await dash.get("/jobs", queue=q, state="pending")) == every - {f"{prefix}-d1", f"{prefix}-l1"}
    assert _ids(await dash.get("/jobs", queue=q, state="delayed")) == {f"{prefix}-l1"}
    for state in ("dead", "errored", "done"):
        assert _ids(await dash.get("/jobs", queue=q, state=state)) == {f"{prefix}-d1"}, state
    assert _ids(await dash.get("/jobs", queue=q, state="completed")) == set()
    assert _ids(await dash.get("/jobs", queue=q, id=f"{prefix}-a")) == {f"{prefix}-a1", f"{prefix}-a2"}
    assert _ids(await dash.get("/jobs", queue=q, meta="region=eu")) == {f"{prefix}-a1"}
    hour_ago = datetime.fromtimestamp((now - HOUR) / 1000, UTC).strftime("%Y-%m-%dT%H:%M")
    assert _ids(await dash.get("/jobs", queue=q, until=hour_ago)) == {f"{prefix}-b1"}
    assert f"{prefix}-b1" not in _ids(await dash.get("/jobs", queue=q, since=str(now - HOUR)))
    assert _ids(await dash.get("/jobs", queue=q, state="dead", on="finished", since=str(now - HOUR))) == {
        f"{prefix}-d1"
    }
    # an exact id is found at once, in every queue
    r = await dash.get("/jobs", id=f"{prefix}-b1")
    assert [(e["queue"], e["id"]) for e in r.json()["exact"]] == [(q, f"{prefix}-b1")]
    # no queue: every queue is searched, queue by queue; a cursor says where in which queue to go on
    r = await dash.get("/jobs", id=f"{prefix}-a", limit="1", cursor=f"{q}/pending/0")
    first, nxt = _ids(r), r.json()["next_cursor"]
    assert nxt.startswith(f"{q}/pending/")
    r = await dash.get("/jobs", id=f"{prefix}-a", limit="1", cursor=nxt)
    assert first | _ids(r) == {f"{prefix}-a1", f"{prefix}-a2"}


async def test_bad_search_parameters_are_named(dash: Any) -> None:
    for params, name in (
        ({"state": "bogus"}, "state"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2024-13"}, "until"),
        ({"meta": "novalue"}, "meta"),
        ({"meta": "Bad=x"}, "meta"),
        ({"source": "elsewhere"}, "source"),
        ({"on": "started"}, "on"),
        ({"queue": "x", "cursor": "x/y"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"source": "archive", "meta": "a=b"}, "meta"),
        ({"source": "archive", "state": "far"}, "state"),
    ):
        r = await dash.get("/jobs", **params)
        assert (r.status, r.code) == (400, "query_invalid"), params
        assert name in r.json()["error"]["message"], params


async def test_archive_without_tables_says_so(dash: Any) -> None:
    r = await dash.get("/jobs", source="archive", state="dead")
    assert r.status == 200
    assert r.json()["archive_missing"] is True
    html = await dash.get("/jobs", source="archive", as_json=False)
    assert 'id="archive-missing"' in html.text


async def test_the_url_carries_the_filters_and_pages_by_cursor(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    kinds = ["x", "x", "x", "y", "y"]
    await engine.enqueue_batch([_env(q, f"{prefix}-{i}", k) for i, k in enumerate(kinds)])
    html = await dash.get("/jobs", queue=q, state="pending", kind="x", limit="2", as_json=False)
    assert 'id="search-form"' in html.text
    assert 'method="get"' in html.text
    assert f'value="{q}"' in html.text
    assert 'id="next-page"' in html.text
    assert f"queue={q}&amp;state=pending&amp;kind=x&amp;limit=2&amp;cursor=2" in html.text  # one list
    r = await dash.get("/jobs", queue=q, limit="2")
    assert len(r.json()["rows"]) == 2
    assert r.json()["next_cursor"] == f"{q}/pending/2"  # several lists: where in which
    seen = _ids(r)
    r = await dash.get("/jobs", queue=q, limit="2", cursor=r.json()["next_cursor"])
    seen |= _ids(r)
    r = await dash.get("/jobs", queue=q, limit="2", cursor=r.json()["next_cursor"])
    seen |= _ids(r)
    assert len(seen) == 5
    # a sparse filter: the scan stops after its budget and says where
    r = await dash.get("/jobs", queue=q, state="pending", kind="y", scan="3")
    body = r.json()
    assert (body["rows"], body["examined"], body["next_cursor"]) == ([], 3, "3")
    assert body["stopped_at"] == {"queue": q, "state": "pending", "offset": 3}
    r = await dash.get("/jobs", queue=q, state="pending", kind="y", scan="3", cursor="3")
    assert _ids(r) == {f"{prefix}-3", f"{prefix}-4"}


async def test_bulk_retry_asks_for_the_count_first(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    await engine.enqueue_batch([_env(q, f"{prefix}-{i}") for i in range(3)])
    await _kill(engine, q, 3)
    form = {"action": "retry", "all": "1", "queue": q, "state": "dead", "next": "/jobs"}
    r = await dash.post("/jobs/bulk", form)
    assert r.status == 200
    assert r.json()["confirm"]["count"] == 3
    assert (await engine.reads.depth(q)).errored == 3  # nothing changed yet
    page = await dash.post("/jobs/bulk", form, as_json=False)
    assert 'id="confirm-form"' in page.text
    assert f"Retry 3 jobs matching queue={q} state=dead?" in page.text
    assert 'name="confirm" value="3"' in page.text
    stale = await dash.post("/jobs/bulk", {**form, "confirm": "2"})
    assert (stale.status, stale.code) == (409, "confirm_stale")
    r = await dash.post("/jobs/bulk", {**form, "confirm": "3"})
    assert r.json()["count"] == 3
    depth = await engine.reads.depth(q)
    assert (depth.errored, depth.pending) == (0, 3)
    # the browser is sent back with a flash message
    await _kill(engine, q, 1)
    r = await dash.post("/jobs/bulk", {**form, "confirm": "1"}, as_json=False)
    assert r.status == 303
    assert r.headers["Location"] == "/jobs"


async def test_bulk_cancel_and_delete_selected(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    await engine.enqueue_batch([_env(q, f"{prefix}-{i}") for i in range(4)])
    done = await _finish(engine, q, 2)
    pending = [f"{prefix}-{i}" for i in range(4) if f"{prefix}-{i}" not in done]
    ids = "\n".join(f"{q}/{i}" for i in pending)
    r = await dash.post("/jobs/bulk", {"action": "cancel", "id": ids})
    assert r.json()["confirm"]["count"] == 2
    r = await dash.post("/jobs/bulk", {"action": "cancel", "id": ids, "confirm": "2"})
    assert r.json()["count"] == 2
    assert {(await engine.reads.get_job(q, i)).state for i in pending} == {"canceled"}
    # delete: only finished jobs; everything matching state=done
    form = {"action": "delete", "all": "1", "queue": q, "state": "done"}
    r = await dash.post("/jobs/bulk", form)
    assert r.json()["confirm"]["count"] == 4
    r = await dash.post("/jobs/bulk", {**form, "confirm": "4"})
    assert r.json()["count"] == 4
    assert [await engine.reads.get_job(q, f"{prefix}-{i}") for i in range(4)] == [None] * 4


async def test_bulk_refusals(dash: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    for form, code in (
        ({"action": "explode", "id": f"{q}/x"}, "form_invalid"),
        ({"action": "retry"}, "form_invalid"),
        ({"action": "retry", "id": "no-queue"}, "form_invalid"),
        ({"action": "retry", "all": "1", "state": "bogus"}, "form_invalid"),
        ({"action": "retry", "all": "1", "source": "archive"}, "form_invalid"),
        ({"action": "retry", "id": f"{q}/x", "confirm": "many"}, "form_invalid"),
    ):
        r = await dash.post("/jobs/bulk", form)
        assert (r.status, r.code) == (400, code), form


async def test_job_page_shows_args_result_and_each_attempts_traceback(
    dash: Any, engine: Any, prefix: str
) -> None:
    q = f"{prefix}.q"
    args = {"size": -1, "names": ["a", "é"], "nested": {"z": 1, "a": [1.5, None, True]}}
    await engine.enqueue_batch([_env(q, f"{prefix}-j", args=args, meta={"region": "eu"}, max_attempts=2)])
    (c,) = await engine.jobs.claim(q, 1)
    assert await engine.jobs.fail(q, (c.id, c.attempt, c.token), TRACEBACK, retry_delay_ms=0) == "retry"
    await engine.timers.promote_due(q)
    (c,) = await engine.jobs.claim(q, 1)
    assert await engine.jobs.fail(q, (c.id, c.attempt, c.token), "plain failure") == "errored"
    r = await dash.get(f"/jobs/{q}/{prefix}-j")
    body = r.json()
    assert body["envelope"]["args"] == args
    assert body["envelope"]["meta"] == {"region": "eu"}
    assert body["job"]["state"] == "errored"
    first, second = body["attempts"]
    assert (first["message"], first["traceback"]) == ("ValueError: size must be positive", TRACEBACK)
    assert (second["message"], second["traceback"]) == ("plain failure", None)
    assert (body["retryable"], body["replayable"], body["cancelable"]) == (True, True, False)
    html = await dash.get(f"/jobs/{q}/{prefix}-j", as_json=False, token="admin")
    assert 'id="job-args"' in html.text
    assert "&#34;nested&#34;" in html.text or "&quot;nested&quot;" in html.text
    assert "raise ValueError(size)" in html.text
    assert 'id="retry-job"' in html.text
    # the page shows at once and loads the timeline (a history scan) into itself
    assert f'hx-get="/jobs/{q}/{prefix}-j/timeline"' in html.text
    part = await dash.get(f"/jobs/{q}/{prefix}-j/timeline", as_json=False)
    assert part.status == 200
    assert 'id="no-timeline"' in part.text  # no history tables in these tests
    assert (await dash.get(f"/jobs/{q}/{prefix}-j/timeline")).json()["timeline"] is None
    # a completed job's result is shown exactly
    await engine.enqueue_batch([_env(q, f"{prefix}-ok")])
    (c,) = await engine.jobs.claim(q, 1)
    await engine.jobs.complete(q, (c.id, c.attempt, c.token), '{"b": 2, "a": [1, 2.50]}')
    body = (await dash.get(f"/jobs/{q}/{prefix}-ok")).json()
    assert body["job"]["result"] == '{"b": 2, "a": [1, 2.50]}'
    r = await dash.get(f"/jobs/{q}/nope")
    assert (r.status, r.code) == (404, "job_not_found")


async def test_job_actions(dash: Any, engine: Any, prefix: str, topic_reader: Any) -> None:
    q = f"{prefix}.q"
    args = {"to": "x@example.com", "n": [1, 2]}
    await engine.enqueue_batch(
        [_env(q, f"{prefix}-p"), _env(q, f"{prefix}-d", args=args, meta={"region": "eu"}, excl=None)]
    )
    r = await dash.post(f"/jobs/{q}/{prefix}-p/cancel")
    assert (r.status, r.json()["count"]) == (200, 1)
    assert (await engine.reads.get_job(q, f"{prefix}-p")).state == "canceled"
    r = await dash.post(f"/jobs/{q}/{prefix}-p/cancel")
    assert r.json()["count"] == 0
    assert "already canceled" in r.json()["message"]
    # replay refuses a live job, retry a job that is not dead
    r = await dash.post(f"/jobs/{q}/{prefix}-d/replay")
    assert (r.status, r.code) == (409, "job_not_finished")
    r = await dash.post(f"/jobs/{q}/{prefix}-d/retry")
    assert (r.status, r.code) == (409, "job_not_dead")
    await _kill(engine, q, 1)
    r = await dash.post(f"/jobs/{q}/{prefix}-d/retry", as_json=False)
    assert r.status == 303
    assert r.headers["Location"] == f"/jobs/{q}/{prefix}-d"
    assert (await engine.reads.get_job(q, f"{prefix}-d")).state == "pending"
    await _kill(engine, q, 1)
    r = await dash.post(f"/jobs/{q}/{prefix}-d/replay")
    assert (r.status, r.json()["count"]) == (200, 1)
    message = r.json()["message"]
    new_id = message.split(" replayed as ")[1].split(" ")[0]
    assert new_id != f"{prefix}-d"
    assert "offset" in message
    (record,) = await asyncio.to_thread(topic_reader, dash.topic, 1, 30)
    assert record.key() == new_id.encode()
    assert dict(record.headers()) == {"jobq-queue": q.encode(), "jobq-kind": b"resize"}
    env = decode(record.value())
    assert (env.id, env.queue, env.args, dict(env.meta)) == (new_id, q, args, {"region": "eu"})
    for action in ("cancel", "retry", "replay"):
        r = await dash.post(f"/jobs/{q}/nope/{action}")
        assert (r.status, r.code) == (404, "job_not_found"), action


async def test_read_token_may_not_act(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    await engine.enqueue_batch([_env(q, f"{prefix}-p")])
    for path, form in (
        ("/jobs/bulk", {"action": "cancel", "id": f"{q}/{prefix}-p"}),
        ("/jobs/bulk", {"action": "cancel", "id": f"{q}/{prefix}-p", "confirm": "1"}),
        (f"/jobs/{q}/{prefix}-p/cancel", {}),
        (f"/jobs/{q}/{prefix}-p/retry", {}),
        (f"/jobs/{q}/{prefix}-p/replay", {}),
    ):
        r = await dash.post(path, form, token="read")
        assert (r.status, r.code) == (403, "admin_required"), path
    assert (await engine.reads.get_job(q, f"{prefix}-p")).state == "pending"
    html = await dash.get("/jobs", queue=q, as_json=False)
    assert 'id="bulk-retry"' not in html.text


async def test_attacker_text_is_shown_as_text(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    evil = {"a": XSS_ARG, "b": XSS_ATTR}
    await engine.enqueue_batch([_env(q, f"{prefix}-x", args=evil, meta={"note": XSS_ATTR.replace("{", "")})])
    await _kill(engine, q, 1, error=f"{XSS_ARG} {XSS_ATTR}")
    for path, params in (
        (f"/jobs/{q}/{prefix}-x", {}),
        ("/jobs", {"queue": q}),
        ("/dead", {"queue": q}),
        ("/jobs", {"queue": q, "kind": XSS_ATTR}),
    ):
        r = await dash.get(path, as_json=False, **params)
        assert r.status == 200, path
        assert "<script>alert" not in r.text, path
        assert "<img src=x" not in r.text, path
    page = await dash.get(f"/jobs/{q}/{prefix}-x", as_json=False)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text


async def test_state_tabs_run_times_args_and_the_actions_a_state_allows(
    dash: Any, engine: Any, prefix: str
) -> None:
    """A tab per state with its count; each row's run time and arguments; bulk actions only where the
    search can match a job they change: no "Cancel all" on finished jobs, no "Retry" on running ones."""
    q = f"{prefix}.q"
    await engine.enqueue_batch(
        [_env(q, f"{prefix}-{i}", args={"to": f"user{i}@example.com"}) for i in range(6)]
    )
    await _finish(engine, q, 2)
    await _kill(engine, q, 1)
    (running,) = await engine.jobs.claim(q, 1)
    body = (await dash.get("/jobs", queue=q)).json()
    tabs = {t["state"]: t["count"] for t in body["tabs"]}
    assert tabs == {"": 6, "pending": 2, "delayed": 0, "far": 0, "running": 1, "done": 3, "dead": 1}
    rows = {r["id"]: r for r in body["rows"]}
    assert rows[running.id]["state"] == "running"
    assert rows[running.id]["run_ms"] is not None
    assert rows[f"{prefix}-0"]["args"] == '{"to":"user0@example.com"}'
    assert all(r["run_ms"] is not None for r in rows.values() if r["state"] == "completed")
    assert body["actions"] == ["retry", "cancel", "delete"]
    assert (await dash.get("/jobs", queue=q, state="done")).json()["actions"] == ["retry", "delete"]
    assert (await dash.get("/jobs", queue=q, state="completed")).json()["actions"] == ["delete"]
    assert (await dash.get("/jobs", queue=q, state="running")).json()["actions"] == ["cancel"]
    done = (await dash.get("/jobs", as_json=False, token="admin", queue=q, state="completed")).text
    assert 'id="bulk-all-delete"' in done
    assert 'id="bulk-all-cancel"' not in done
    assert 'id="bulk-cancel"' not in done
    assert 'class="here" aria-current="true">finished' not in done  # "completed" is no tab of its own
    html = (await dash.get("/jobs", as_json=False, queue=q, state="running")).text
    assert 'data-state="running" class="here"' in html
    assert "so far" in html
    assert f'<option value="{q}">' in html  # the queue box offers the queues
