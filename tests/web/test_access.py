"""Who may see and act, CSRF, the security headers, the login cookie, the audit log, the overview."""

from __future__ import annotations

from typing import Any

import pytest
from yarl import URL

from jqcore.clock import now_ms
from jqengine import connect
from jqruntime.stores import audit
from jqruntime.stores.audit import AuditEntry, AuditTrail
from jqweb.security import CSP

pytestmark = pytest.mark.asyncio


async def test_pages_need_a_token(dash: Any) -> None:
    r = await dash.get("/", token=None)
    assert (r.status, r.code) == (401, "unauthenticated")
    r = await dash.get("/", token=None, as_json=False)  # a browser is sent to the login page
    assert r.status == 303
    assert r.headers["Location"] == "/login?next=/"
    async with dash.session.get(dash.url + "/", headers={"Authorization": "Bearer nope"}) as raw:
        assert raw.status == 401
        assert raw.headers["X-Jobq-Error"] == "token_invalid"


async def test_health_routes_need_no_token(dash: Any) -> None:
    assert (await dash.get("/healthz", token=None)).status == 200
    r = await dash.get("/readyz", token=None)
    assert r.status == 200, r.text
    assert "dashboard" in r.text
    r = await dash.get("/metrics", token=None)
    assert r.status == 200
    assert "jobq_" in r.text


async def test_every_answer_is_hardened(dash: Any) -> None:
    for path in ("/", "/login", "/audit", "/no-such-page", "/static/app.css"):
        r = await dash.get(path, as_json=False)
        assert r.headers["Content-Security-Policy"] == CSP, path
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["X-Frame-Options"] == "DENY"
    r = await dash.get("/no-such-page")
    assert (r.status, r.code) == (404, "not_found")


async def test_login_sets_a_strict_cookie_and_logout_clears_it(dash: Any, web_tokens: dict[str, str]) -> None:
    read, admin = web_tokens["read"], web_tokens["admin"]
    r = await dash.post("/login", {"token": "wrong"}, token=None, as_json=False)
    assert r.status == 401
    assert "not accepted" in r.text
    r = await dash.post("/login", {"token": read, "next": "/audit"}, token=None, as_json=False)
    assert r.status == 303
    assert r.headers["Location"] == "/audit"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    # the cookie now signs the browser in (no Authorization header)
    async with dash.session.get(dash.url + "/audit", headers={"Accept": "text/html"}) as page:
        assert page.status == 200
        assert "signed in as <strong>viewer</strong> (read only)" in await page.text()
    r = await dash.post("/login", {"token": admin, "next": "//evil.example/"}, token=None, as_json=False)
    assert r.headers["Location"] == "/"  # never redirected off the dashboard
    r = await dash.post("/logout", token=None, as_json=False)
    assert r.status == 303
    assert not dash.session.cookie_jar.filter_cookies(URL(dash.url)).get("jobq_session")


async def test_cross_site_posts_are_refused(dash: Any, web_tokens: dict[str, str]) -> None:
    admin = web_tokens["admin"]
    # a cookie-signed browser request from another site: refused before any handler runs
    await dash.post("/login", {"token": admin}, token=None, as_json=False)
    r = await dash.post("/logout", token=None, site="cross-site")
    assert (r.status, r.code) == (403, "cross_site_refused")
    r = await dash.post("/logout", token=None, site=None, headers={"Origin": "http://evil.example"})
    assert (r.status, r.code) == (403, "cross_site_refused")
    r = await dash.post("/logout", token=None, site=None)  # a cookie and no origin at all: refused too
    assert (r.status, r.code) == (403, "cross_site_refused")
    r = await dash.post("/login", {"token": admin}, token=None, site="cross-site")  # login CSRF
    assert (r.status, r.code) == (403, "cross_site_refused")


async def test_audit_page_lists_entries_newest_first_and_pages(dash: Any) -> None:
    client = connect(dash.sources.redis)
    marker = f"{dash.prefix}-audit"
    trail = AuditTrail(client, None)  # Redis only: the Kafka side is tests/web/test_sessions.py's
    for i in range(3):
        await trail.record(AuditEntry(now_ms(), "tester", "test.action", f"{marker}-{i}", i))
    await client.aclose()
    r = await dash.get("/audit", count=2)
    assert r.status == 200
    entries = r.json()["entries"]
    assert [e["target"] for e in entries] == [f"{marker}-2", f"{marker}-1"]
    older = await dash.get("/audit", count=2, before=r.json()["more"])
    assert older.json()["entries"][0]["target"] == f"{marker}-0"
    bad = await dash.get("/audit", before="not-an-id")
    assert (bad.status, bad.code) == (400, "query_invalid")
    bad = await dash.get("/audit", count="x")
    assert (bad.status, bad.code) == (400, "query_invalid")


async def test_audit_page_filters_by_who_action_and_age(dash: Any) -> None:
    """Filters narrow what a page lists (read past the entries they skip), the older link keeps them, a
    sign-in counts no jobs, and a bad age is a 400."""
    client = connect(dash.sources.redis)
    p, trail, now = dash.prefix, AuditTrail(client, None), now_ms()
    await trail.record(AuditEntry(now - 3 * 86_400_000, f"{p}-ann", "queue.pause", f"{p}-old", 0))
    await trail.record(AuditEntry(now, f"{p}-ann", "queue.pause", f"{p}-q1", 0))
    await trail.record(AuditEntry(now, f"{p}-bob", "queue.resume", f"{p}-q1", 0))
    await trail.record(AuditEntry(now, f"{p}-ann", "dead.retry", f"{p}-q2", 4))
    await trail.record(AuditEntry(now, f"{p}-ann", "session.login", "127.0.0.1", 1))
    for i in range(3):  # others' entries a filtered page reads past
        await trail.record(AuditEntry(now, "someone", "queue.pause", f"{p}-noise-{i}", 0))
    await client.aclose()

    async def targets(**params: Any) -> list[str]:
        r = await dash.get("/audit", **params)
        assert r.status == 200, r.text
        return [e["target"] for e in r.json()["entries"]]

    assert await targets(who=f"{p}-ann", action="queue.") == [f"{p}-q1", f"{p}-old"]
    assert await targets(who=f"{p}-ann", action="queue.", since="1d") == [f"{p}-q1"]
    assert await targets(who=f"{p}-bob") == [f"{p}-q1"]
    assert await targets(who=f"{p}-ann", action="dead.retry") == [f"{p}-q2"]
    first = await dash.get("/audit", who=f"{p}-ann", count=1)
    assert [e["target"] for e in first.json()["entries"]] == ["127.0.0.1"]
    older = await targets(who=f"{p}-ann", count=3, before=first.json()["more"])
    assert older == [f"{p}-q2", f"{p}-q1", f"{p}-old"]
    html = (await dash.get("/audit", who=f"{p}-ann", count=1, as_json=False)).text
    assert f"who={p}-ann" in html, "the older link keeps the filters"
    assert 'id="audit-filters"' in html
    assert '<td class="num">—</td>' in html, "a sign-in changed no jobs"
    bad = await dash.get("/audit", since="yesterday")
    assert (bad.status, bad.code) == (400, "query_invalid")


async def test_overview_renders_and_its_live_panel_reads_every_backend(dash: Any) -> None:
    r = await dash.get("/")
    assert r.status == 200
    body = r.json()
    assert set(body["rates"]) == {
        "at_ms",
        "enqueued",
        "completed",
        "failed",
        "wait_ms",
        "totals",
        "since_ms",
        "until_ms",
    }
    html = await dash.get("/", as_json=False)
    assert 'id="live"' in html.text
    assert "/static/vendor/uPlot.iife.min.js" in html.text
    live = await dash.get("/overview/live")
    snap = live.json()["snapshot"]
    assert [r["topic"] for r in snap["kafka"]] == [dash.topic, dash.topic]  # 2 partitions, both read
    # nobody relays this test's topic: the overview says so
    assert any(a["what"] == f"no relay for {dash.topic}" for a in live.json()["alerts"])
    bad = await dash.get("/", hours="48")
    assert (bad.status, bad.code) == (400, "query_invalid")


async def test_the_gateway_serves_the_dashboard_under_ui(
    dash: Any, web_tokens: dict[str, str], make_gate: Any, token: str
) -> None:
    """``jobq gate --web``: the dashboard at /ui with its own tokens; the API keeps the gateway's."""
    import aiohttp
    from pydantic import SecretStr

    from jqweb.app import make_app
    from jqweb.context import Web
    from jqweb.settings import WebSettings

    settings = WebSettings(admin_tokens=[SecretStr(f"admin:{web_tokens['admin']}")])
    ui = make_app(Web(settings, dash.sources, base="/ui"))
    gate = make_gate(dash.sources.routing)
    gate.mounts = {"/ui": ui}
    async with gate, aiohttp.ClientSession() as s:
        admin = {"Authorization": f"Bearer {web_tokens['admin']}", "Accept": "text/html"}
        async with s.get(f"{gate.url}/ui/", headers=admin) as r:
            assert r.status == 200
            page = await r.text()
        assert 'href="/ui/topics"' in page  # links stay under the mount
        assert 'src="/ui/static/vendor/htmx.min.js"' in page
        async with s.get(f"{gate.url}/ui/", headers={"Accept": "text/html"}, allow_redirects=False) as r:
            assert r.status == 303
            assert r.headers["Location"] == "/ui/login?next=/ui/"
        async with s.get(f"{gate.url}/ui/static/app.css") as r:
            assert r.status == 200
        # the dashboard's token is no API token, and the API's is no dashboard token
        async with s.get(f"{gate.url}/v1/queues", headers=admin) as r:
            assert r.status == 401
        api = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        async with s.get(f"{gate.url}/ui/", headers=api) as r:
            assert r.status == 401
        async with s.get(f"{gate.url}/v1/queues", headers=api) as r:
            assert r.status == 200
        # a POST under the mount is the dashboard's business, not a gateway admin call (its own audit);
        # its sign-in form is read by the dashboard, not refused by the API's body rules
        same = {"Sec-Fetch-Site": "same-origin"}
        form = {"token": web_tokens["admin"], "next": "/ui/audit"}
        async with s.post(f"{gate.url}/ui/login", data=form, headers=same, allow_redirects=False) as r:
            assert (r.status, r.headers.get("Location")) == (303, "/ui/audit"), await r.text()
        async with s.post(f"{gate.url}/ui/logout", headers=same, allow_redirects=False) as r:
            assert (r.status, r.headers.get("Location")) == (303, "/ui/login"), await r.text()
    client = connect(dash.sources.redis)
    recent = await audit.read(client, 20)
    await client.aclose()
    assert any(e.action == "session.login" and e.who == "admin" for e in recent)
    assert not [e for e in recent if e.action.startswith("gate.") and "/ui" in e.action]
