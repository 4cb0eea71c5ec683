"""Dead letters: counts per queue, one queue's dead jobs with their last error (paged), retry and purge
(all or selected; purge confirmed with the count first)."""

from __future__ import annotations

from typing import Any

import pytest

from jqcore.envelope import new_envelope

pytestmark = pytest.mark.asyncio


async def _dead(engine: Any, q: str, n: int, error: str = "boom") -> list[str]:
    await engine.enqueue_batch([new_envelope(q, "resize", {"i": i}) for i in range(n)])
    claimed = await engine.jobs.claim(q, n)
    for c in claimed:
        assert await engine.jobs.fail(q, (c.id, c.attempt, c.token), error, permanent=True) == "errored"
    return [c.id for c in claimed]


async def test_dead_page_counts_and_lists(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    ids = await _dead(engine, q, 3, error="Traceback (most recent call last):\n  x\nKeyError: 'user'")
    r = await dash.get("/dead")
    assert {"queue": q, "dead": 3} in r.json()["counts"]
    r = await dash.get("/dead", queue=q)
    body = r.json()
    assert [row["id"] for row in body["rows"]] == ids
    assert {row["error"] for row in body["rows"]} == {"KeyError: 'user'"}
    html = await dash.get("/dead", queue=q, as_json=False, token="admin")
    for marker in ('id="dead-table"', f'id="retry-all-{q}"', f'id="purge-all-{q}"', 'id="dead-jobs"'):
        assert marker in html.text, marker
    read = await dash.get("/dead", queue=q, as_json=False)
    assert f'id="retry-all-{q}"' not in read.text
    missing = await dash.get("/dead", queue=f"{prefix}.nope")
    assert (missing.status, missing.code) == (404, "queue_not_found")
    bad = await dash.get("/dead", queue=q, offset="x")
    assert (bad.status, bad.code) == (400, "query_invalid")
    past = await dash.get("/dead", queue=q, offset="3")
    assert past.json()["rows"] == []


async def test_retry_selected_then_all(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    ids = await _dead(engine, q, 3)
    r = await dash.post(f"/dead/{q}/retry", {"id": ids[0]})
    assert r.json() | {"message": ""} == {
        "ok": True,
        "action": "dead.retry",
        "target": f"{q}: 1 selected",
        "count": 1,
        "message": "",
    }
    assert (await engine.reads.get_job(q, ids[0])).state == "pending"
    r = await dash.post(f"/dead/{q}/retry", {"all": "1", "next": f"/dead?queue={q}"}, as_json=False)
    assert r.status == 303
    assert r.headers["Location"] == f"/dead?queue={q}"
    depth = await engine.reads.depth(q)
    assert (depth.errored, depth.pending) == (0, 3)
    r = await dash.post(f"/dead/{q}/retry", {})
    assert (r.status, r.code) == (400, "form_invalid")
    r = await dash.post(f"/dead/{q}/retry", {"id": f"other.q/{ids[0]}"})
    assert (r.status, r.code) == (400, "form_invalid")
    r = await dash.post(f"/dead/{prefix}.nope/retry", {"all": "1"})
    assert (r.status, r.code) == (404, "queue_not_found")


async def test_purge_is_confirmed_with_the_count(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    ids = await _dead(engine, q, 4)
    r = await dash.post(f"/dead/{q}/purge", {"all": "1"})
    assert r.status == 200
    assert r.json()["confirm"]["count"] == 4
    assert (await engine.reads.depth(q)).errored == 4  # nothing changed yet
    page = await dash.post(f"/dead/{q}/purge", {"all": "1", "next": f"/dead?queue={q}"}, as_json=False)
    assert 'id="confirm-form"' in page.text
    assert f"Purge 4 dead jobs of {q}?" in page.text
    # selected: only those
    r = await dash.post(f"/dead/{q}/purge", {"id": ids[0], "confirm": "1"})
    assert r.json()["count"] == 1
    assert await engine.reads.get_job(q, ids[0]) is None
    # all: at most the confirmed count (the oldest), even if more died since
    r = await dash.post(f"/dead/{q}/purge", {"all": "1", "confirm": "2"})
    assert r.json()["count"] == 2
    assert (await engine.reads.depth(q)).errored == 1
    r = await dash.post(f"/dead/{q}/purge", {"all": "1", "confirm": "x"})
    assert (r.status, r.code) == (400, "form_invalid")
    r = await dash.post(f"/dead/{prefix}.nope/purge", {"all": "1"})
    assert (r.status, r.code) == (404, "queue_not_found")


async def test_read_token_may_not_act(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.q"
    ids = await _dead(engine, q, 1)
    for path, form in (
        (f"/dead/{q}/retry", {"all": "1"}),
        (f"/dead/{q}/retry", {"id": ids[0]}),
        (f"/dead/{q}/purge", {"all": "1"}),
        (f"/dead/{q}/purge", {"all": "1", "confirm": "1"}),
    ):
        r = await dash.post(path, form, token="read")
        assert (r.status, r.code) == (403, "admin_required"), path
    assert (await engine.reads.depth(q)).errored == 1


async def test_dead_letters_grouped_by_error_and_retried_by_group(
    dash: Any, engine: Any, prefix: str
) -> None:
    """Grouped by the error's digest (the one ``jobq history errors`` shows), the most frequent first;
    "retry these" retries exactly one error's dead jobs, "purge these" confirms that count first."""
    from jqcore.events import failure

    q = f"{prefix}.q"
    key_error = "Traceback (most recent call last):\n  File x\nKeyError: 'user'"
    timeout = "TimeoutError: upstream took 30s"
    keyed = await _dead(engine, q, 3, error=key_error)
    slow = await _dead(engine, q, 2, error=timeout)
    body = (await dash.get("/dead", queue=q)).json()
    groups = [(g["error"], g["message"], g["count"], g["digest"]) for g in body["groups"]]
    assert groups == [
        ("KeyError", "'user'", 3, failure(key_error).digest),
        ("TimeoutError", "upstream took 30s", 2, failure(timeout).digest),
    ]
    assert body["groups"][0]["kinds"] == ["resize"]
    digest = failure(timeout).digest
    one = (await dash.get("/dead", queue=q, digest=digest)).json()
    assert {r["id"] for r in one["rows"]} == set(slow)
    html = (await dash.get("/dead", queue=q, as_json=False, token="admin")).text
    assert f'id="retry-digest-{digest}"' in html
    r = await dash.post(f"/dead/{q}/retry", {"digest": digest})
    assert (r.status, r.json()["count"], r.json()["target"]) == (200, 2, f"{q}: error {digest}"), r.text
    assert {(await engine.reads.get_job(q, i)).state for i in slow} == {"pending"}
    assert {(await engine.reads.get_job(q, i)).state for i in keyed} == {"errored"}, "the other error's stay"
    keyed_digest = failure(key_error).digest
    asked = (await dash.post(f"/dead/{q}/purge", {"digest": keyed_digest})).json()["confirm"]
    assert asked["count"] == 3
    done = await dash.post(f"/dead/{q}/purge", dict(asked["fields"]))
    assert done.json()["count"] == 3
    assert (await engine.reads.depth(q)).errored == 0
    bad = await dash.post(f"/dead/{q}/retry", {"digest": "not-a-digest"})
    assert (bad.status, bad.code) == (400, "form_invalid")
    bad = await dash.get("/dead", queue=q, digest="xyz")
    assert (bad.status, bad.code) == (400, "query_invalid")
