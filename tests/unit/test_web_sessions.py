"""The dashboard's pure rules: where ``next=`` may send a browser, when a session ends, what ``revoke``
selects (``jqweb/redirect.py``, ``jqweb/sessions.py``)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from jqweb.redirect import safe_next
from jqweb.security import COOKIE, SECURE_COOKIE, cookie_name, session_id
from jqweb.sessions import Session, expires_in_ms, ref_of, select

NASTY = [
    "/\t/evil.example/",  # browsers strip the tab: //evil.example/
    "/%09/evil.example/",
    "/\n/evil.example",
    "/%0a/evil.example",
    "/\r\n/evil.example",
    "/ /evil.example",
    "/\x00/evil",
    "/\x7f/evil",
    "/\u00a0/evil",
    "/\u2028/evil",
    "/\\evil.example",
    "/%5Cevil.example",
    "\\\\evil.example",
    "//evil.example",
    "//evil.example/audit",
    "///evil.example",
    "/%2F/evil.example",
    "/%2f/evil.example",
    "%2F%2Fevil.example",
    "/%252F/evil.example",
    "/%25252F/evil.example",
    "https:evil.example",
    "https://evil.example/",
    "javascript:alert(1)",
    "evil.example",
    "",
    "/login",
    "/login?next=/audit",
]


@pytest.mark.parametrize("value", NASTY)
def test_a_nasty_next_falls_back_to_the_default(value: str) -> None:
    assert safe_next("", value, "/") == "/"


@pytest.mark.parametrize("value", ["/", "/audit", "/queues/a.b?state=dead&page=2", "/jobs?q=x%20y#top"])
def test_a_path_of_the_dashboard_is_kept(value: str) -> None:
    assert safe_next("", value, "/") == value


def test_under_a_mount_only_its_own_paths_are_kept() -> None:
    assert safe_next("/ui", "/ui/audit", "/ui/") == "/ui/audit"
    assert safe_next("/ui", "/v1/queues", "/ui/") == "/ui/"  # the gateway's API is not the dashboard
    assert safe_next("/ui", "/uix/audit", "/ui/") == "/ui/"
    assert safe_next("/ui", "/ui/login", "/ui/") == "/ui/"
    assert safe_next("/ui", "/ui/%09/x", "/ui/") == "/ui/"
    assert safe_next("/ui", None, "/ui/") == "/ui/"


def test_a_session_lives_its_idle_time_cut_at_its_absolute_expiry() -> None:
    idle, most = 60.0, 3600.0
    assert expires_in_ms(0, 0, idle, most) == 60_000
    assert expires_in_ms(0, 3_000_000, idle, most) == 60_000  # used: another idle period
    assert expires_in_ms(0, 3_590_000, idle, most) == 10_000  # but never past its absolute expiry
    assert expires_in_ms(0, 3_600_000, idle, most) <= 0  # over
    assert expires_in_ms(0, 4_000_000, idle, most) < 0


def test_revoke_selects_by_token_name_ref_prefix_or_all() -> None:
    a, b = ref_of("one"), ref_of("two")
    c = ref_of("three")
    sessions = [Session(a, "alice", True, 0, 0), Session(b, "bob", False, 0, 0), Session(c, "bob", 0, 0, 0)]
    assert [s.ref for s in select(sessions, "alice")] == [a]
    assert len(select(sessions, "bob")) == 2
    assert [s.ref for s in select(sessions, b[:8])] == [b]
    assert select(sessions, b[:7]) == []  # too short to name one session
    assert select(sessions, "nobody-here") == []
    assert len(select(sessions, None)) == 3
    assert ref_of("one") != "one"
    assert len(a) == 64


@pytest.mark.parametrize(
    ("host", "secure_setting", "sent", "read"),
    [
        ("127.0.0.1:8080", False, COOKIE, True),  # plain http on loopback: the cookie set there
        ("localhost", False, COOKIE, True),
        ("[::1]:8080", False, COOKIE, True),
        ("dash.example.com", False, COOKIE, False),  # review L3: a sibling subdomain's planted cookie
        ("10.0.0.5:8080", False, COOKIE, False),
        ("127.0.0.1:8080", True, COOKIE, False),  # JOBQ_WEB_SECURE_COOKIE: only __Host- is ever set
        ("dash.example.com", False, SECURE_COOKIE, True),
        ("127.0.0.1:8080", False, SECURE_COOKIE, True),
        ("127.0.0.1:8080", True, SECURE_COOKIE, True),
    ],
)
def test_the_plain_cookie_is_read_only_where_it_is_the_one_set(
    host: str, secure_setting: bool, sent: str, read: bool
) -> None:
    request = make_mocked_request("GET", "/", headers={"Host": host, "Cookie": f"{sent}=sid-1"})
    assert session_id(request, secure_setting) == ("sid-1" if read else "")
    if sent == COOKIE:
        assert (cookie_name(request, secure_setting)[0] == COOKIE) == read, "the rule that sets it"
