"""The topics page (partitions, lag, the relay's lock, live rate limits a real relay follows) and the queues
pages (depth, throughput, configuration, pause/resume, settings) on the session stack."""

from __future__ import annotations

from typing import Any

from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.rates import parse_rate
from jqengine import QueueConfig
from jqrelay.limits import parse_rate as relay_parse_rate
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.kafka import Record
from jqruntime.stores import series
from jqruntime.stores.config import ConfigStore
from jqweb.overview import Sources


async def _produce(producer: Any, topic: str, queue: str, n: int) -> list[str]:
    envs = [new_envelope(queue, "k", {"i": i}) for i in range(n)]
    await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])
    return [e.id for e in envs]


async def _topic(dash: Any) -> dict[str, Any]:
    r = await dash.get("/topics")
    assert r.status == 200, r.text
    (row,) = [t for t in r.json()["topics"] if t["topic"] == dash.topic]
    return row


async def _audit(dash: Any, action: str, target: str) -> list[dict[str, Any]]:
    entries = (await dash.get("/audit", count=1000)).json()["entries"]
    return [e for e in entries if e["action"] == action and e["target"] == target]


def test_one_rate_rule_for_the_dashboard_and_the_relay() -> None:
    assert relay_parse_rate is parse_rate
    assert parse_rate("") is None
    assert parse_rate("0") == 0


async def test_topics_page_shows_partitions_and_lag(dash: Any, producer: Any, eventually: Any) -> None:
    await _produce(producer, dash.topic, f"{dash.prefix}.q", 6)
    # another client's view of the end offsets: Kafka's, with nothing in this process to wait on
    row = await eventually(lambda: _topic(dash), lambda t: t["lag"] == 6)
    assert [p["partition"] for p in row["partitions"]] == [0, 1]
    assert sum(p["end"] for p in row["partitions"]) == 6
    assert all(p["committed"] == 0 for p in row["partitions"])  # no relay yet: nothing committed
    assert row["lag_s"] is not None
    assert row["lock"]["holder"] is None
    assert row["rate"] == {"text": "", "rate": None, "state": "unlimited"}
    html = await dash.get("/topics", as_json=False, token="admin")
    assert f'id="rate-form-{dash.topic}"' in html.text
    assert f'id="partitions-{dash.topic}"' in html.text
    assert "nobody holds the lock" in html.text
    viewer = await dash.get("/topics", as_json=False)
    assert f'id="rate-form-{dash.topic}"' not in viewer.text  # a read token sees no form


async def test_a_rate_limit_set_on_the_dashboard_is_followed_live_by_the_relay(
    dash: Any, make_relay: Any, engine: Any, producer: Any
) -> None:
    queue = f"{dash.prefix}.q"
    await _produce(producer, dash.topic, queue, 4)
    async with make_relay(dash.topic) as relay:
        topic_relay = relay.relays[0]
        await topic_relay.signals.committed.wait_for(lambda n: n >= 4)  # Kafka has the relay's commit
        row = await _topic(dash)
        assert (row["lock"]["holder"], row["lag"]) == ("relay-a", 0)
        assert row["lock"]["fence"] >= 1
        assert row["lock"]["session"]
        assert row["lock"]["since_s"] >= 0
        assert sum(p["committed"] for p in row["partitions"]) == 4
        html = await dash.get("/topics", as_json=False)
        assert "<strong>relay-a</strong>" in html.text
        assert row["lock"]["session"] in html.text
        gauge = metrics.RELAY_RATE_LIMIT.labels(dash.topic)
        applied, queue_applied = topic_relay.limit.signals.applied, topic_relay.queue_limits.signals.applied

        # a 0 in the box pauses nothing by itself: it asks first (the page's pause button too)
        r = await dash.post(f"/topics/{dash.topic}/rate", {"rate": "0"})
        assert r.status == 200, r.text
        asked = r.json()["confirm"]
        assert asked["action"] == "pause"
        assert ["confirm", "pause"] in asked["fields"]
        assert (await _topic(dash))["rate"]["state"] == "unlimited", "not paused before the confirmation"
        html = await dash.post(f"/topics/{dash.topic}/rate", {"rate": "0"}, as_json=False)
        assert "Yes, pause relaying" in html.text
        mark = applied.mark()
        r = await dash.post(f"/topics/{dash.topic}/rate", dict(asked["fields"]))
        assert r.status == 200, r.text
        assert r.json()["action"] == "rate.topic"
        await applied.wait_for(lambda rate: rate == 0, after=mark)
        assert gauge._value.get() == 0
        assert (await _topic(dash))["rate"]["state"] == "paused"

        mark = applied.mark()
        r = await dash.post(f"/topics/{dash.topic}/rate", {"rate": "12.5"})
        await applied.wait_for(lambda rate: rate == 12.5, after=mark)
        assert (await _topic(dash))["rate"] == {"text": "12.5", "rate": 12.5, "state": "limited"}

        mark = applied.mark()
        r = await dash.post(f"/topics/{dash.topic}/rate", {"rate": ""})  # unlimited: the key goes
        await applied.wait_for(lambda rate: rate is None, after=mark)
        assert gauge._value.get() == -1
        assert (await _topic(dash))["rate"]["state"] == "unlimited"

        # a queue's limit: shown on the topics page and the queue's page, followed by the relay
        assert queue in await engine.reads.queues()  # the relay wrote its jobs (before its commit)
        mark = queue_applied.mark()
        r = await dash.post(f"/queues/{queue}/rate", {"rate": "5"})
        assert r.status == 200, r.text
        await queue_applied.wait_for(lambda rates: rates == {queue: 5}, after=mark)
        shown = (await dash.get("/topics")).json()["queue_rates"]
        assert {
            "queue": queue,
            "topic": dash.topic,
            "rate": {"text": "5", "rate": 5.0, "state": "limited"},
            "held": None,
        } in shown
        assert (await dash.get(f"/queues/{queue}")).json()["rate"]["rate"] == 5
        html = await dash.get("/topics", as_json=False, token="admin")
        assert f'id="queue-rate-form-{queue}"' in html.text
        assert f'id="queue-rate-form-{queue}-pause"' in html.text
        r = await dash.post(f"/queues/{queue}/rate", {"rate": "0"})
        assert r.json()["confirm"]["action"] == "pause"
        assert (await dash.get(f"/queues/{queue}")).json()["rate"]["rate"] == 5, "asked, not paused"
        mark = queue_applied.mark()
        r = await dash.post(f"/queues/{queue}/rate", {"rate": ""})
        await queue_applied.wait_for(lambda rates: rates == {}, after=mark)
    assert await _audit(dash, "rate.topic", f"{dash.topic}=0")
    assert await _audit(dash, "rate.topic", f"{dash.topic}=unlimited")
    assert await _audit(dash, "rate.queue", f"{queue}=5")


async def test_rate_limit_refusals(dash: Any, engine: Any) -> None:
    queue = f"{dash.prefix}.q"
    await engine.enqueue_batch([new_envelope(queue, "k", {})])
    for bad in ("fast", "-1", "inf", "nan"):
        r = await dash.post(f"/topics/{dash.topic}/rate", {"rate": bad})
        assert (r.status, r.code) == (400, "rate_invalid"), bad
        r = await dash.post(f"/queues/{queue}/rate", {"rate": bad})
        assert (r.status, r.code) == (400, "rate_invalid"), bad
    r = await dash.post("/topics/no-such-topic/rate", {"rate": "1"})
    assert (r.status, r.code) == (404, "topic_not_found")
    r = await dash.post(f"/queues/{dash.prefix}.nope/rate", {"rate": "1"})
    assert (r.status, r.code) == (404, "queue_not_found")
    r = await dash.post(f"/topics/{dash.topic}/rate", {"rate": "1"}, token="read")
    assert (r.status, r.code) == (403, "admin_required")
    r = await dash.post(f"/queues/{queue}/rate", {"rate": "1"}, token="read")
    assert (r.status, r.code) == (403, "admin_required")
    assert (await _topic(dash))["rate"]["state"] == "unlimited", "nothing was written"
    # a browser's form: redirected back with a flash message
    r = await dash.post(f"/topics/{dash.topic}/rate", {"rate": "3", "next": "/topics"}, as_json=False)
    assert (r.status, r.headers["Location"]) == (303, "/topics")
    assert (await _topic(dash))["rate"]["rate"] == 3


async def test_queues_page_shows_depth_and_throughput(dash: Any, engine: Any) -> None:
    queue = f"{dash.prefix}.q"
    await engine.enqueue_batch([new_envelope(queue, "k", {"i": i}) for i in range(3)])
    t0 = now_ms() - 10 * 60_000
    for i, completed in enumerate((0, 4, 10)):  # the scheduler's samples: lifetime counters
        await series.record(engine._client, [queue], {queue: {"completed": completed}}, t0 + i * 60_000)
    r = await dash.get("/queues", q=dash.prefix)
    assert r.status == 200
    (row,) = r.json()["queues"]
    assert (row["queue"], row["pending"], row["paused"]) == (queue, 3, False)
    assert row["oldest_pending_age_ms"] is not None
    assert row["throughput"] == [4, 6]
    html = await dash.get("/queues", as_json=False, token="admin", q=dash.prefix)
    assert f'id="pause-{queue}"' in html.text
    assert '<svg class="spark"' in html.text

    r = await dash.get(f"/queues/{queue}")
    assert r.status == 200
    body = r.json()
    assert body["queue"]["pending"] == 3
    assert body["config"]["lease_ms"] == (await engine.reads.queue_config(queue)).lease_ms
    assert body["stats"]["enqueued"] == 3
    assert body["rate"]["state"] == "unlimited"
    assert body["topic"] == dash.topic
    await engine.admin.configure_kind("k", queues=[queue], concurrency=2)
    kinds = (await dash.get(f"/queues/{queue}")).json()["kinds"]
    (k,) = [k for k in kinds if k["kind"] == "k"]
    assert (k["config"]["options"]["concurrency"], k["config"]["options"]["running"]) == (2, 0)
    assert (k["finished"], k["running"]) == (0, 0), "configured, not run yet"
    page = await dash.get(f"/queues/{queue}", as_json=False, token="admin")
    assert f"/jobs?queue={queue}&amp;state=pending" in page.text
    assert f"/dead?queue={queue}" in page.text
    assert f'id="settings-{queue}"' in page.text
    viewer = await dash.get(f"/queues/{queue}", as_json=False)
    assert f'id="settings-{queue}"' not in viewer.text
    assert f'id="pause-{queue}"' not in viewer.text
    missing = await dash.get(f"/queues/{dash.prefix}.nope")
    assert (missing.status, missing.code) == (404, "queue_not_found")


async def test_a_queue_page_shows_the_kinds_that_ran(dash: Any, engine: Any) -> None:
    """Two kinds ran, none configured: each kind seen, with its counts, failure rate and run times, from
    the finished jobs Redis keeps (no "no job type configured")."""
    queue = f"{dash.prefix}.q"
    await engine.admin.configure_queue(queue, QueueConfig(max_attempts=2))
    envs = [new_envelope(queue, "send", {"i": i}) for i in range(4)]
    envs += [new_envelope(queue, "render", {"i": i}) for i in range(2)]
    await engine.enqueue_batch(envs)
    t0 = now_ms()
    for job in await engine.jobs.claim(queue, 10, now_ms=t0):
        took = 100 if job.envelope.kind == "send" else 2000
        if job.envelope.kind == "render" and job.envelope.args["i"] == 0:  # fails once, then dies
            await engine.jobs.fail(
                queue, (job.id, job.attempt, job.token), "Boom", retry_delay_ms=0, now_ms=t0 + took
            )
        else:
            await engine.jobs.complete(queue, (job.id, job.attempt, job.token), now_ms=t0 + took)
    await engine.timers.promote_due(queue, now_ms=t0 + 3000)  # the scheduler's step
    (again,) = await engine.jobs.claim(queue, 10, now_ms=t0 + 3000)
    await engine.jobs.fail(queue, (again.id, again.attempt, again.token), "Boom", now_ms=t0 + 3500)
    body = (await dash.get(f"/queues/{queue}")).json()
    kinds = {k["kind"]: k for k in body["kinds"]}  # (and kinds configured for every queue by other tests)
    assert {kind for kind, k in kinds.items() if k.get("finished")} == {"send", "render"}
    send, render = kinds["send"], kinds["render"]
    assert (send["finished"], send["completed"], send["errored"], send["failure_rate"]) == (4, 4, 0, 0.0)
    assert send["p50_ms"] <= send["p95_ms"] <= 100  # from started_at (the claim's) to finished_at
    assert (render["finished"], render["completed"], render["errored"]) == (2, 1, 1)
    assert (render["failed_attempts"], render["attempts"]) == (2, 3)
    assert 1000 < render["p95_ms"] <= 3500
    assert body["kinds_sample"]["sampled"] == 6
    html = (await dash.get(f"/queues/{queue}", as_json=False)).text
    assert 'data-kind="render"' in html
    assert "66.7 %" in html
    assert "No job type configured" not in html


async def test_pause_resume_and_settings(dash: Any, engine: Any, web_sources: Sources) -> None:
    queue = f"{dash.prefix}.q"
    await engine.enqueue_batch([new_envelope(queue, "k", {})])
    r = await dash.post(f"/queues/{queue}/pause")
    assert r.status == 200, r.text
    assert (r.json()["action"], r.json()["count"]) == ("queue.pause", 0)
    assert (await engine.reads.queue_config(queue)).paused
    html = await dash.get(f"/queues/{queue}", as_json=False, token="admin")
    assert f'id="resume-{queue}"' in html.text
    r = await dash.post(f"/queues/{queue}/resume", {"next": f"/queues/{queue}"}, as_json=False)
    assert (r.status, r.headers["Location"]) == (303, f"/queues/{queue}")
    assert not (await engine.reads.queue_config(queue)).paused
    assert await _audit(dash, "queue.pause", queue)
    assert await _audit(dash, "queue.resume", queue)

    r = await dash.post(f"/queues/{queue}/block")
    assert (r.status, r.json()["action"]) == (200, "queue.block"), r.text
    assert (await engine.reads.queue_config(queue)).enqueue_blocked
    html = await dash.get(f"/queues/{queue}", as_json=False, token="admin")
    assert f'id="unblock-{queue}"' in html.text
    r = await dash.post(f"/queues/{queue}/unblock")
    assert (r.status, r.json()["action"]) == (200, "queue.unblock"), r.text
    assert not (await engine.reads.queue_config(queue)).enqueue_blocked

    before = await engine.reads.queue_config(queue)
    r = await dash.post(  # durations in ms (as the field always took them) or written as durations
        f"/queues/{queue}/settings",
        {"lease_ms": "5000", "max_attempts": "3", "events_cap": "", "default_delay_ms": "1h30m"},
    )
    assert r.status == 200, r.text
    after = await engine.reads.queue_config(queue)
    assert (after.lease_ms, after.max_attempts, after.default_delay_ms) == (5000, 3, 5_400_000)
    html = await dash.get(f"/queues/{queue}", as_json=False, token="admin")
    assert '<input type="text" name="lease_ms" value="5s"' in html.text
    assert "<dt>lease</dt><dd>5s</dd>" in html.text
    assert "finished jobs 1d, dead ones 7d" in html.text  # the defaults, in days
    consul = consul_client(web_sources.consul)
    kept, _ = await ConfigStore(consul, web_sources.cron.kv_prefix).queue_configs()
    await consul.kv.delete(web_sources.cron.kv_prefix + "/", recurse=True)
    await close_consul(consul)
    assert kept[queue] == after, "the change is kept in Consul too (jobq rebuild restores it)"
    assert (after.retention_ms, after.events_cap, after.mode) == (
        before.retention_ms,
        before.events_cap,
        before.mode,
    )
    assert await _audit(
        dash, "queue.settings", f"{queue}: lease_ms=5s, max_attempts=3, default_delay_ms=1h30m"
    )
    r = await dash.post(f"/queues/{queue}/settings", {"retention_ms": "2d", "dead_retention_ms": "14d"})
    after = await engine.reads.queue_config(queue)
    assert (after.retention_ms, after.dead_retention_ms) == (2 * 86_400_000, 14 * 86_400_000)
    for field, bad in (
        ("lease_ms", "50"),
        ("lease_ms", "50ms"),
        ("lease_ms", "x"),
        ("lease_ms", "5 parsecs"),
        ("max_attempts", "0"),
        ("max_attempts", "1001"),
        ("retention_ms", "-1"),
        ("dead_retention_ms", "1.5"),
        ("events_cap", "-5"),
        ("default_delay_ms", str(31 * 86_400_000)),
    ):
        r = await dash.post(f"/queues/{queue}/settings", {field: bad})
        assert (r.status, r.code) == (400, "form_invalid"), (field, bad)
        assert field in r.json()["error"]["message"]
    assert (await engine.reads.queue_config(queue)).lease_ms == 5000, "refused settings change nothing"

    nope = f"{dash.prefix}.nope"
    for action in ("pause", "resume", "block", "unblock", "settings"):
        r = await dash.post(f"/queues/{nope}/{action}", {"lease_ms": "1000"})
        assert (r.status, r.code) == (404, "queue_not_found"), action
        r = await dash.post(f"/queues/{queue}/{action}", {"lease_ms": "1000"}, token="read")
        assert (r.status, r.code) == (403, "admin_required"), action
    assert not (await engine.reads.queue_config(queue)).paused
    assert (await engine.reads.queue_config(queue)).lease_ms == 5000


async def test_a_held_queue_is_shown_with_why_and_what_waits_in_its_lane(
    dash: Any, make_relay: Any, engine: Any, producer: Any, eventually: Any
) -> None:
    """Paused from the dashboard, a queue's jobs step aside into ``<topic>.held`` (a real relay): the
    queues, queue and topics pages say it is held, why and how much waits there — the lock holder's
    snapshot ``jobq status`` reads (``jqweb.overview.held_rows``) — and its neighbour is not held."""
    slow, fast = f"{dash.prefix}.slow", f"{dash.prefix}.fast"
    await engine.enqueue_batch([new_envelope(q, "k", {}) for q in (slow, fast)])  # both known to Redis
    async with make_relay(dash.topic) as relay:
        signals = relay.signals[dash.topic]
        asked = (await dash.post(f"/queues/{slow}/rate", {"rate": "0"})).json()["confirm"]
        r = await dash.post(f"/queues/{slow}/rate", dict(asked["fields"]))
        assert r.status == 200, r.text
        await _produce(producer, dash.topic, slow, 7)
        await _produce(producer, dash.topic, fast, 3)
        await signals.held.wait_for(lambda v: v == (slow, "paused"))

        def lane(row: dict[str, Any] | None) -> tuple[Any, ...] | None:
            return row and (row["topic"], row["reason"], row["records"])

        async def shown() -> dict[str, Any]:
            rows = (await dash.get("/queues", q=dash.prefix)).json()["queues"]
            return {q["queue"]: q["held"] for q in rows}

        queues = await eventually(shown, lambda h: lane(h[slow]) == (dash.topic, "paused", 7))
        assert queues[fast] is None
        assert (await dash.get(f"/queues/{slow}")).json()["queue"]["held"]["reason"] == "paused"
        assert (await dash.get(f"/queues/{fast}")).json()["queue"]["held"] is None
        topics = (await dash.get("/topics")).json()
        (row,) = [t for t in topics["topics"] if t["topic"] == dash.topic]
        assert [lane(h) for h in row["held"]] == [(dash.topic, "paused", 7)]
        assert [h["queue"] for h in row["held"]] == [slow]
        rates = {r["queue"]: r for r in topics["queue_rates"]}
        assert lane(rates[slow]["held"]) == (dash.topic, "paused", 7)
        assert rates[fast]["held"] is None
        for path in ("/queues", f"/queues/{slow}", "/topics"):
            html = (await dash.get(path, as_json=False, q=dash.prefix)).text
            assert "held: paused</span> 7 in the holding lane" in html, path
        assert "held: paused" not in (await dash.get(f"/queues/{fast}", as_json=False)).text
