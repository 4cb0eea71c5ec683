"""The dashboard's sessions (a cookie that is no token, sign-out, revocation, expiry), the sign-in throttle,
routes open by name only, and the one audit path: dashboard and gateway actions in the Redis stream and on
the Kafka audit topic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from pydantic import SecretStr
from yarl import URL

from jqcore.envelope import new_envelope
from jqcore.keys import LOGIN_FAILURES_ALL_KEY, login_failures_key, web_session_key
from jqcore.settings.common import load
from jqcore.settings.pipeline import AuditSettings
from jqcore.settings.servers import RedisSettings
from jqengine import connect
from jqruntime.tokens import hash_line, reload_all
from jqweb.main import WebService
from jqweb.sessions import SessionStore, prefix_tag, ref_of, select
from jqweb.settings import WebSettings

from .conftest import ADMIN, READ

pytestmark = pytest.mark.asyncio


def _send_cookie(dash: Any, sid: str) -> None:
    """The browser now holds ``sid`` as its only session cookie (a replayed or forged one)."""
    dash.session.cookie_jar.clear()
    dash.session.cookie_jar.update_cookies({"jobq_session": sid}, URL(dash.url))


def _cookie(dash: Any) -> str:
    found = dash.session.cookie_jar.filter_cookies(URL(dash.url)).get("jobq_session")
    return found.value if found else ""


async def _audit(dash: Any, match: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    entries = (await dash.get("/audit", count=1000, token="admin")).json()["entries"]
    return [e for e in entries if match(e)]


def _on_kafka(
    bootstrap: str, match: Callable[[dict[str, Any]], bool], want: int, timeout_s: float = 30
) -> list[dict[str, Any]]:
    """The audit topic's records ``match`` accepts, read from the start until ``want`` were seen."""
    topic = load(AuditSettings).topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.test", "log_level": 0})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(found) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            doc = orjson.loads(msg.value())
            if match(doc):
                assert msg.key() == doc["id"].encode()  # keyed by its Redis stream id
                found.append(doc)
    finally:
        consumer.close()
    return found


async def test_sign_in_makes_a_server_side_session_ended_by_sign_out(dash: Any) -> None:
    r = await dash.post("/login", {"token": READ, "next": "/audit"}, token=None, as_json=False)
    assert (r.status, r.headers["Location"]) == (303, "/audit")
    cookie = r.headers["Set-Cookie"]
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert attribute in cookie
    assert "Secure" not in cookie  # plain http on 127.0.0.1: a Secure cookie would be dropped
    sid = _cookie(dash)
    assert sid
    assert READ not in sid
    assert READ not in cookie
    redis = connect(dash.sources.redis)
    try:
        stored = await redis.hgetall(web_session_key(ref_of(sid)))
        assert stored[b"who"] == b"viewer"
        assert not await redis.exists(web_session_key(sid))  # Redis holds the id's hash, not the id
        page = await dash.get("/audit", token=None)
        assert page.status == 200
        r = await dash.post("/logout", token=None, as_json=False)
        assert r.status == 303
        assert not await redis.exists(web_session_key(ref_of(sid)))
    finally:
        await redis.aclose()
    _send_cookie(dash, sid)  # the old id, replayed
    again = await dash.get("/audit", token=None)
    assert (again.status, again.code) == (401, "session_invalid")
    done = await _audit(dash, lambda e: e["who"] == "viewer" and e["action"].startswith("session."))
    assert [e["action"] for e in done[:2]] == ["session.logout", "session.login"]


async def test_revoked_expired_and_orphaned_sessions_are_refused(dash: Any, eventually: Any) -> None:
    redis = connect(dash.sources.redis)
    store = SessionStore(redis, idle_s=3600, max_s=43_200)
    try:
        # revoked (what `jobq web sessions revoke admin` does)
        await dash.post("/login", {"token": ADMIN}, token=None, as_json=False)
        assert (await dash.get("/", token=None)).status == 200
        mine = [s for s in select(await store.list(), "admin") if s.ref == ref_of(_cookie(dash))]
        assert len(mine) == 1
        assert mine[0].admin
        assert await store.end([mine[0].ref]) == 1
        assert (await dash.get("/", token=None)).code == "session_invalid"
        # idle: its key's TTL ran out
        await dash.post("/login", {"token": ADMIN}, token=None, as_json=False)
        key = web_session_key(ref_of(_cookie(dash)))
        await redis.pexpire(key, 1)
        await eventually(lambda: redis.exists(key), lambda n: n == 0, 10)  # (a request meanwhile renews it)
        refused = await dash.get("/", token=None)
        assert (refused.status, refused.code) == (401, "session_invalid")
        # absolute: signed in longer ago than session_max_s, however busy since
        await dash.post("/login", {"token": ADMIN}, token=None, as_json=False)
        key = web_session_key(ref_of(_cookie(dash)))
        await redis.hset(key, "created_ms", str(int(time.time() * 1000) - 43_200_001))
        assert (await dash.get("/", token=None)).code == "session_invalid"
        assert not await redis.exists(key)
        # a session of a token no longer configured
        ghost = await store.create("ghost", admin=True)
        _send_cookie(dash, ghost)
        assert (await dash.get("/", token=None)).code == "session_invalid"
        assert not await redis.exists(web_session_key(ref_of(ghost)))
        # a browser is sent to sign in again, with where it was going (encoded)
        r = await dash.get("/queues/a?state=dead&x=1", token=None, as_json=False)
        assert (r.status, r.headers["Location"]) == (303, "/login?next=/queues/a?state%3Ddead%26x%3D1")
    finally:
        await redis.aclose()


async def test_a_session_ends_when_its_tokens_secret_is_rotated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, web_sources: Any
) -> None:
    """Review M5: the operator replaces ``alice``'s ``sha256`` in the tokens file and reloads; a session
    signed in with the old secret ends at its next request (401 ``session_invalid``, deleted), while a reload
    that keeps the secret (another field changed) keeps it."""
    old, new = "alice-old-secret-0123456789", "alice-new-secret-0123456789"

    def alice(secret: str, scopes: str) -> str:
        return f'[[token]]\nname = "alice"\n{hash_line(secret)}\nscopes = [{scopes}]\n'

    path = tmp_path / "tokens.toml"
    path.write_text(alice(old, '"read", "admin"'))
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    redis = connect(web_sources.redis)
    jar = aiohttp.CookieJar(unsafe=True)
    browser = {"Sec-Fetch-Site": "same-origin", "Accept": "application/json"}
    try:
        async with (
            WebService(WebSettings(port=0), web_sources) as service,
            aiohttp.ClientSession(cookie_jar=jar) as s,
        ):

            async def page() -> tuple[int, str | None]:
                async with s.get(f"{service.url}/audit", headers=browser) as r:
                    body = orjson.loads(await r.read())
                    return r.status, body.get("error", {}).get("code") if r.status >= 400 else None

            async def sign_in(secret: str) -> str:
                async with s.post(
                    f"{service.url}/login", data={"token": secret}, headers=browser, allow_redirects=False
                ) as r:
                    assert r.status == 303, await r.text()
                found = jar.filter_cookies(URL(service.url)).get("jobq_session")
                assert found is not None
                return found.value

            sid = await sign_in(old)
            assert await page() == (200, None)
            path.write_text(alice(old, '"read"'))  # the same secret, another scope: the session stays
            reload_all()  # (every token source of this process; ours reads the file again)
            assert await page() == (200, None)

            path.write_text(alice(new, '"read", "admin"'))  # the secret rotated
            reload_all()
            assert await page() == (401, "session_invalid")
            assert not await redis.exists(web_session_key(ref_of(sid))), "the session is deleted"
            _ = await sign_in(new)
            assert await page() == (200, None)
    finally:
        await redis.aclose()


async def test_sign_in_never_redirects_off_the_dashboard(dash: Any) -> None:
    """Over HTTP, the nasty targets of ``tests/unit/test_web_sessions.py`` that matter most."""
    for nasty in (
        "/%09/evil.example/",
        "/\t/evil.example/",
        "//evil.example",
        "/\\evil.example",
        "/%2F/evil",
    ):
        r = await dash.post("/login", {"token": READ, "next": nasty}, token=None, as_json=False)
        assert (r.status, r.headers["Location"]) == (303, "/"), nasty
        form = await dash.get("/login", token=None, as_json=False, next=nasty)
        assert 'name="next" value="/"' in form.text, nasty


async def test_a_page_named_like_an_open_route_needs_a_session(dash: Any) -> None:
    for path in ("/queues/login", "/graphs/login", "/queues/healthz", "/graphs/metrics", "/queues/static"):
        r = await dash.get(path, token=None)
        assert (r.status, r.code) == (401, "unauthenticated"), path
        r = await dash.get(path, token=None, as_json=False)
        assert (r.status, r.headers["Location"]) == (303, f"/login?next={path}"), path


@pytest.fixture
async def no_failures(web_sources: Any) -> AsyncIterator[Any]:
    """The session's Redis with no failed-match counters (other tests' from this address, the global
    budget), and none left behind: a Redis client for the test."""
    redis = connect(web_sources.redis)

    async def clear() -> None:
        keys = [k async for k in redis.scan_iter(match="jobq:web:login-failures*", count=1000)]
        if keys:
            await redis.delete(*keys)

    await clear()
    try:
        yield redis
    finally:
        await clear()
        await redis.aclose()


HTML_FORM = {"Sec-Fetch-Site": "same-origin", "Accept": "text/html"}


async def _sign_in(s: aiohttp.ClientSession, url: str, secret: str, **headers: str) -> aiohttp.ClientResponse:
    async with s.post(
        f"{url}/login", data={"token": secret}, headers={**HTML_FORM, **headers}, allow_redirects=False
    ) as r:
        await r.read()
        return r


async def test_failed_sign_ins_are_throttled_per_address_and_token_prefix_and_audited(
    web_sources: Any, no_failures: Any
) -> None:
    """Review M6: past ``login_failures`` from one address with one token prefix, a sign-in with that prefix
    waits (even the right token: nothing is compared); a token of another prefix from the same address (a
    colleague behind the same proxy) still signs in; ``X-Forwarded-For`` from an untrusted peer changes
    nothing."""
    settings = WebSettings(
        port=0,
        read_tokens=[SecretStr(f"viewer:{READ}")],
        admin_tokens=[SecretStr(f"admin:{ADMIN}")],
        login_failures=3,
        login_window_s=60,
    )
    redis = no_failures
    jar = aiohttp.CookieJar(unsafe=True)
    async with WebService(settings, web_sources) as service, aiohttp.ClientSession(cookie_jar=jar) as s:
        for i in range(3):  # guesses that share the viewer token's first characters
            assert (await _sign_in(s, service.url, f"{READ[:6]}-wrong-{i}")).status == 401
        throttled = await _sign_in(s, service.url, READ)
        assert throttled.status == 429  # even the right token: no guess is compared past the limit
        assert throttled.headers["X-Jobq-Error"] == "login_throttled"
        assert 1 <= int(throttled.headers["Retry-After"]) <= 60
        spoofed = await _sign_in(s, service.url, READ, **{"X-Forwarded-For": "203.0.113.9"})
        assert spoofed.status == 429, "no trusted proxy: the header is the client's own words"
        assert (await _sign_in(s, service.url, ADMIN)).status == 303, "another prefix is not locked out"
    rows = await redis.xrevrange("jobq:audit", count=50)
    failures = [f for _, f in rows if f[b"action"] == b"session.login" and f[b"who"] == b"anonymous"]
    assert len(failures) >= 3
    assert failures[0][b"outcome"].startswith(b"token_invalid")
    assert await redis.get(login_failures_key("127.0.0.1", prefix_tag(READ))) == b"3"
    assert READ[:6].encode() not in b" ".join([k async for k in redis.scan_iter(match="jobq:web:login-*")])


async def test_behind_a_trusted_proxy_the_forwarded_client_is_throttled_not_the_proxy(
    web_sources: Any, no_failures: Any
) -> None:
    """Review M6: with ``JOBQ_WEB_TRUSTED_PROXIES`` naming the proxy (here the test's own 127.0.0.1), the
    client is the nearest ``X-Forwarded-For`` hop the proxy did not add: one client's failures throttle that
    client, not everyone behind the proxy; what a client writes left of it is not believed."""
    settings = WebSettings(
        port=0,
        read_tokens=[SecretStr(f"viewer:{READ}")],
        login_failures=2,
        trusted_proxies=["127.0.0.0/8"],
    )
    redis = no_failures
    async with WebService(settings, web_sources) as service, aiohttp.ClientSession() as s:
        guesser = {"X-Forwarded-For": "198.51.100.23"}
        for i in range(2):
            assert (await _sign_in(s, service.url, f"{READ[:6]}-guess-{i}", **guesser)).status == 401
        assert (await _sign_in(s, service.url, READ, **guesser)).status == 429
        lying = {"X-Forwarded-For": "192.0.2.1, 198.51.100.23"}  # the client wrote the first hop
        assert (await _sign_in(s, service.url, READ, **lying)).status == 429
        colleague = {"X-Forwarded-For": "198.51.100.24, 127.0.0.1"}  # through two trusted proxies
        assert (await _sign_in(s, service.url, READ, **colleague)).status == 303
    assert await redis.get(login_failures_key("198.51.100.23", prefix_tag(READ))) == b"2"
    assert not await redis.exists(login_failures_key("127.0.0.1", prefix_tag(READ)))


async def test_bearer_guesses_count_in_the_same_throttle(web_sources: Any, no_failures: Any) -> None:
    """Review M6: ``Authorization: Bearer`` on any page counted nothing; now a failed match counts, and past
    the limit the client's Bearer requests with that prefix are a 429 ``auth_throttled`` before any match
    (even the right token), and its sign-ins too; another prefix still gets in."""
    settings = WebSettings(
        port=0,
        read_tokens=[SecretStr(f"viewer:{READ}")],
        admin_tokens=[SecretStr(f"admin:{ADMIN}")],
        login_failures=3,
    )
    async with WebService(settings, web_sources) as service, aiohttp.ClientSession() as s:

        async def page(secret: str) -> tuple[int, str | None, str | None]:
            headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json"}
            async with s.get(f"{service.url}/queues", headers=headers) as r:
                body = orjson.loads(await r.read())
                code = body["error"]["code"] if r.status >= 400 else None
                return r.status, code, r.headers.get("Retry-After")

        for i in range(3):
            assert (await page(f"{READ[:6]}-guess-{i}"))[:2] == (401, "token_invalid")
        status, code, after = await page(READ)
        assert (status, code) == (429, "auth_throttled")
        assert after is not None
        assert 1 <= int(after) <= 60
        assert (await _sign_in(s, service.url, READ)).status == 429
        assert (await page(ADMIN))[0] == 200


async def test_failures_past_the_global_budget_slow_everyone_but_sessions(
    web_sources: Any, no_failures: Any
) -> None:
    """Review M6: guesses spread over prefixes (or addresses) pass no per-client limit, so every failure
    also counts in ``login_failures_all``; past it every sign-in and Bearer request waits out the window,
    while a browser already signed in keeps working."""
    settings = WebSettings(
        port=0,
        read_tokens=[SecretStr(f"viewer:{READ}")],
        admin_tokens=[SecretStr(f"admin:{ADMIN}")],
        login_failures=100,
        login_failures_all=3,
    )
    redis = no_failures
    jar = aiohttp.CookieJar(unsafe=True)
    async with WebService(settings, web_sources) as service, aiohttp.ClientSession(cookie_jar=jar) as s:
        assert (await _sign_in(s, service.url, ADMIN)).status == 303
        async with aiohttp.ClientSession() as other:
            for guess in ("aaaa-0123456789abcdef", "bbbb-0123456789abcdef", "cccc-0123456789abcdef"):
                assert (await _sign_in(other, service.url, guess)).status == 401
            assert (await _sign_in(other, service.url, READ)).status == 429
            bearer = {"Authorization": f"Bearer {READ}", "Accept": "application/json"}
            async with other.get(f"{service.url}/queues", headers=bearer) as r:
                assert r.status == 429
                assert (await r.json())["error"]["code"] == "auth_throttled"
        async with s.get(f"{service.url}/queues", headers={"Accept": "application/json"}) as r:
            assert r.status == 200, "a session compares no token: it is not slowed"
    assert await redis.get(LOGIN_FAILURES_ALL_KEY) == b"3"


async def test_a_dashboard_action_and_a_gateway_admin_call_land_in_redis_and_on_kafka(
    dash: Any, make_gate: Any, token: str, endpoints: Any, engine: Any
) -> None:
    queue = f"{dash.prefix}.audited"
    await engine.enqueue_batch([new_envelope(queue, "k", {})])
    r = await dash.post(f"/queues/{queue}/pause")
    assert r.status == 200, r.text
    gate = make_gate(dash.sources.routing)
    async with gate, aiohttp.ClientSession() as s:
        auth = {"Authorization": f"Bearer {token}"}
        async with s.patch(f"{gate.url}/v1/queues/{queue}", json={"paused": False}, headers=auth) as r:
            assert r.status == 200, await r.text()
        async with s.delete(f"{gate.url}/v1/queues/{queue}/jobs/{dash.prefix}-nope", headers=auth) as r:
            failed_status = r.status
    gate_action = "gate.PATCH /v1/queues/{queue}"
    in_redis = await _audit(dash, lambda e: queue in e["target"])
    assert {(e["action"], e["outcome"]) for e in in_redis} >= {("queue.pause", "ok"), (gate_action, "ok")}
    pause = next(e for e in in_redis if e["action"] == "queue.pause")
    assert (pause["who"], pause["token"]) == ("admin", "admin")
    patched = next(e for e in in_redis if e["action"] == gate_action)
    assert patched["who"] == patched["token"] != "anonymous"  # the gateway token's name
    missing = next(e for e in in_redis if e["action"] == "gate.DELETE /v1/queues/{queue}/jobs/{id}")
    assert missing["target"] == f"{queue}/{dash.prefix}-nope"
    assert (missing["outcome"] == "ok") == (failed_status < 400)
    on_kafka = _on_kafka(endpoints.kafka_bootstrap, lambda d: queue in d["target"], len(in_redis))
    assert sorted(d["id"] for d in on_kafka) == sorted(e["id"] for e in in_redis)


async def test_the_cli_lists_and_revokes_sessions_on_the_audit_trail(dash: Any, endpoints: Any) -> None:
    from typer.testing import CliRunner

    from jobq.cli import app

    env = {
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "JOBQ_AUDIT_WHO": f"{dash.prefix}-oncall",
        "COLUMNS": "300",
    }

    def cli(*args: str) -> Any:
        return CliRunner().invoke(app, ["web", "sessions", *args], env=env)

    await dash.post("/login", {"token": READ}, token=None, as_json=False)
    ref = ref_of(_cookie(dash))
    listed = await asyncio.to_thread(cli, "list", "--json")
    assert listed.exit_code == 0, listed.output
    row = next(r for r in orjson.loads(listed.stdout)["sessions"] if ref.startswith(r["id"]))
    assert (row["who"], row["admin"]) == ("viewer", False)
    assert (await asyncio.to_thread(cli, "revoke")).exit_code == 2  # a target or --all
    assert (await asyncio.to_thread(cli, "revoke", "nobody-at-all")).exit_code == 1
    done = await asyncio.to_thread(cli, "revoke", row["id"])
    assert done.exit_code == 0, done.output
    assert "revoked 1 session(s)" in done.output
    assert (await dash.get("/", token=None)).code == "session_invalid"
    entries = await _audit(dash, lambda e: e["who"] == f"{dash.prefix}-oncall")
    assert [(e["action"], e["target"], e["count"]) for e in entries] == [
        ("session.revoke", row["id"], 1),
        ("session.revoke", "nobody-at-all", 0),
    ]


async def test_off_loopback_the_cookie_is_a_secure_host_cookie(dash: Any) -> None:
    """Reached by a name that is not loopback (behind a proxy, on a LAN address), the session cookie is
    ``__Host-jobq_session; Secure; Path=/`` and signs the browser in under that name."""
    headers = {"Host": "dash.example", "Sec-Fetch-Site": "same-origin", "Accept": "text/html"}
    async with aiohttp.ClientSession() as s:  # (a fresh jar: the test's one is for 127.0.0.1)
        async with s.post(
            f"{dash.url}/login", data={"token": ADMIN}, headers=headers, allow_redirects=False
        ) as r:
            assert r.status == 303
            cookie = r.headers["Set-Cookie"]
            morsel = r.cookies["__Host-jobq_session"]
        for attribute in ("Secure", "HttpOnly", "SameSite=Strict", "Path=/"):
            assert attribute in cookie
        assert "Domain" not in cookie
        sid = morsel.value
        signed = {
            "Host": "dash.example",
            "Accept": "application/json",
            "Cookie": f"__Host-jobq_session={sid}",
        }
        async with s.get(f"{dash.url}/audit", headers=signed) as page:
            assert page.status == 200


async def test_off_loopback_a_plain_session_cookie_is_ignored(dash: Any) -> None:
    """Review L3: a sibling subdomain can plant ``jobq_session=<its own session>; Domain=example.com``;
    reached by a name that is not loopback, the dashboard reads only ``__Host-jobq_session``, so the
    planted cookie signs nobody in (on plain http to 127.0.0.1, where it is the cookie set, it works)."""
    await dash.post("/login", {"token": ADMIN}, token=None, as_json=False)
    sid = _cookie(dash)
    assert sid
    async with aiohttp.ClientSession() as s:
        for host, status in (("dash.example", 401), ("127.0.0.1", 200)):
            headers = {"Host": host, "Accept": "application/json", "Cookie": f"jobq_session={sid}"}
            async with s.get(f"{dash.url}/audit", headers=headers) as page:
                assert page.status == status, host
                if status == 401:
                    assert (await page.json())["error"]["code"] == "unauthenticated"


async def test_a_kafka_that_does_not_confirm_costs_no_redis_record_and_is_counted(endpoints: Any) -> None:
    """Kafka unreachable: the record is in Redis at once, the send is retried for ``ship_timeout_ms`` by
    the producer, then counted as failed; ``record`` never waited for it."""
    from prometheus_client import REGISTRY

    from jqcore.settings.kafka import KafkaSettings
    from jqruntime.stores.audit import AuditEntry, AuditTrail

    redis = connect(RedisSettings(url=endpoints.redis_url or ""))
    nowhere = KafkaSettings(bootstrap="127.0.0.1:9")  # (discard: nothing listens)
    trail = AuditTrail(redis, nowhere, AuditSettings(ship_timeout_ms=1000))

    def failed() -> float:
        return REGISTRY.get_sample_value("jobq_audit_shipped_total", {"outcome": "failed"}) or 0.0

    before = failed()
    try:
        entry = await trail.record(AuditEntry(int(time.time() * 1000), "tester", "test.kafka_down", "x", 1))
        assert entry.id
        assert await redis.xrange("jobq:audit", entry.id, entry.id)
        await trail.drain(30)
        assert failed() == before + 1
    finally:
        await trail.close(1.0)
        await redis.aclose()
