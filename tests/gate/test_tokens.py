"""Named, scoped tokens over HTTP against a real gateway (``JOBQ_TOKENS_FILE``): a token held to
``<prefix>.billing.*`` is refused every other queue on every route that names one (403 ``queue_forbidden``),
a rate-limited token gets 429 with ``Retry-After``, and SIGHUP reloads the file."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from jqcore.routing import Route, RoutingSettings
from jqruntime.tokens import hash_line
from kafkagate.main import GateService

BILLING = "billing-secret-0123456789"
SLOW = "slow-secret-0123456789"
VIEWER = "viewer-secret-0123456789"


def tokens_file(prefix: str, extra: str = "") -> str:
    return f"""
[[token]]
name = "billing"
{hash_line(BILLING)}
scopes = ["enqueue", "read", "work", "admin"]
queues = ["{prefix}.billing.*"]

[[token]]
name = "slow"
{hash_line(SLOW)}
scopes = ["read"]
rate = "2/min"
{extra}
"""


@pytest.fixture
async def gate(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
) -> AsyncIterator[tuple[GateService, Path]]:
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_file(prefix))
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=make_topic("jobs"))], default_topic="")
    async with make_gate(routing, tokens=[]) as service:
        yield service, path


async def call(url: str, secret: str, method: str, path: str, **kw: Any) -> tuple[int, Any, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, url + path, headers={"Authorization": f"Bearer {secret}", **kw.pop("headers", {})}, **kw
        ) as r,
    ):
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body, r.headers


async def test_a_token_held_to_billing_queues_is_refused_payments_on_every_route(
    gate: tuple[GateService, Path], prefix: str, put: Any
) -> None:
    service, _ = gate
    billing, payments = f"{prefix}.billing.x", f"{prefix}.payments"
    paid = await put(payments)
    mine = await put(billing)
    owner = {"attempt": 1, "token": "t"}
    graph = {"id": f"{prefix}-g", "queue": billing, "nodes": [{"name": "a", "kind": "k"}]}
    sneaky = {
        **graph,
        "nodes": [*graph["nodes"], {"name": "b", "kind": "k", "queue": payments, "parents": ["a"]}],
    }
    refused: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", f"/v1/queues/{payments}/jobs", {"json": {"kind": "k"}}),
        ("POST", f"/v1/queues/{payments}/jobs", {"json": {"jobs": [{"kind": "k"}, {"kind": "k"}]}}),
        ("POST", f"/v1/queues/{payments}/claims", {"json": {"n": 1}}),
        ("GET", f"/v1/queues/{payments}/jobs/{paid}", {}),
        ("GET", f"/v1/queues/{payments}", {}),
        ("POST", f"/v1/queues/{payments}/jobs/{paid}/complete", {"json": owner}),
        ("DELETE", f"/v1/queues/{payments}/jobs/{paid}", {}),
        ("PATCH", f"/v1/queues/{payments}", {"json": {"paused": True}}),
        ("POST", "/v1/graphs", {"json": sneaky}),
        ("PUT", f"/v1/switches/{prefix}-sw", {"json": {"queue": payments, "kind": "k"}}),
    ]
    for method, path, kw in refused:
        status, body, _ = await call(service.url, BILLING, method, path, **kw)
        assert status == 403, (method, path, body)
        assert body["error"]["code"] == "queue_forbidden", (method, path, body)
        assert body["error"]["token"] == "billing"
        assert body["error"]["queue"] == payments
        assert BILLING not in str(body)

    status, body, _ = await call(
        service.url, BILLING, "POST", f"/v1/queues/{billing}/jobs", json={"kind": "k"}
    )
    assert status == 202, body
    batch = {"jobs": [{"kind": "k"}, {"kind": "k"}]}
    status, body, _ = await call(service.url, BILLING, "POST", f"/v1/queues/{billing}/jobs", json=batch)
    assert status == 202, body
    status, body, _ = await call(service.url, BILLING, "GET", f"/v1/queues/{billing}")
    assert status == 200, body
    status, body, _ = await call(service.url, BILLING, "POST", f"/v1/queues/{billing}/claims", json={"n": 1})
    assert status == 200, body
    (job,) = body["jobs"]
    assert job["id"] == mine
    done = {"attempt": job["attempt"], "token": job["token"]}
    status, body, _ = await call(
        service.url, BILLING, "POST", f"/v1/queues/{billing}/jobs/{mine}/complete", json=done
    )
    assert status == 200, body
    status, body, _ = await call(service.url, BILLING, "POST", "/v1/graphs", json=graph)
    assert status == 202, body

    glob = {"json": {"queue": f"{prefix}.*", "kind": "k"}}  # a glob could reach another team's queues
    status, body, _ = await call(service.url, BILLING, "PUT", f"/v1/switches/{prefix}-sw", **glob)
    assert (status, body["error"]["code"]) == (403, "queue_forbidden"), body
    own = {"json": {"queue": billing, "kind": "k"}}
    status, body, _ = await call(service.url, BILLING, "PUT", f"/v1/switches/{prefix}-sw", **own)
    assert status == 200, body
    status, body, _ = await call(service.url, BILLING, "DELETE", f"/v1/switches/{prefix}-sw")
    assert status == 200, body

    status, body, _ = await call(service.url, BILLING, "GET", "/v1/queues")
    assert status == 200, body
    assert billing in body["queues"]
    assert payments not in body["queues"], "lists show only the token's queues"

    status, body, _ = await call(service.url, SLOW, "POST", f"/v1/queues/{billing}/claims", json={})
    assert (status, body["error"]["code"], body["error"]["scope"]) == (403, "scope_missing", "work")
    status, body, _ = await call(service.url, "not-a-token", "GET", "/v1/queues")
    assert (status, body["error"]["code"]) == (401, "token_invalid")

    _, metrics, _ = await call(service.url, BILLING, "GET", "/metrics")
    assert 'token="billing"' in metrics


async def test_a_token_over_its_rate_gets_429_with_retry_after(gate: tuple[GateService, Path]) -> None:
    service, _ = gate
    answers = [await call(service.url, SLOW, "GET", "/v1/queues") for _ in range(3)]
    assert [a[0] for a in answers] == [200, 200, 429]
    _, body, headers = answers[2]
    assert body["error"]["code"] == "rate_limited"
    assert body["error"]["rate"] == "2/min"
    assert body["error"]["token"] == "slow"
    assert headers["Retry-After"] == str(body["error"]["retry_after_s"])
    assert 1 <= int(headers["Retry-After"]) <= 30, "2/min: one more request within 30 s"
    status, _, _ = await call(service.url, BILLING, "GET", "/v1/queues")
    assert status == 200, "another token's budget is its own"


async def test_sighup_reloads_the_tokens_file_and_a_bad_file_keeps_the_old_ones(
    gate: tuple[GateService, Path], prefix: str, eventually: Callable[..., Any]
) -> None:
    service, path = gate
    assert (await call(service.url, VIEWER, "GET", "/v1/queues"))[0] == 401
    handler = signal.getsignal(signal.SIGHUP)
    assert handler not in (signal.SIG_DFL, signal.SIG_IGN, None), "the gateway installed its SIGHUP handler"
    viewer = f'[[token]]\nname = "viewer"\n{hash_line(VIEWER)}\nscopes = ["read"]\n'
    path.write_text(tokens_file(prefix, viewer))
    os.kill(os.getpid(), signal.SIGHUP)
    await eventually(lambda: call(service.url, VIEWER, "GET", "/v1/queues"), lambda a: a[0] == 200, 10)

    path.write_text(tokens_file(prefix, viewer).replace('scopes = ["read"]', 'scopes = ["root"]'))
    assert not service.reload_tokens(), "a bad file is not taken"
    assert (await call(service.url, VIEWER, "GET", "/v1/queues"))[0] == 200, "the old tokens stay in force"


async def test_bearer_guesses_are_throttled_per_client_address_before_any_match(
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    token: str,
) -> None:
    """Review M6: a wrong ``Authorization: Bearer`` could be tried at the gateway's speed. Now each one spends
    a failure of the client's address (``JOBQ_GATE_AUTH_FAILURES``, in-process); with none left, that
    address gets 429 ``auth_throttled`` with Retry-After before any token is compared (even a valid one),
    while other clients — told apart behind a trusted proxy by ``X-Forwarded-For`` — are served."""
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=make_topic("jobs"))], default_topic="")
    async with make_gate(routing, auth_failures="3/min", trusted_proxies=["127.0.0.1"]) as service:
        guesser, other = {"X-Forwarded-For": "198.51.100.7"}, {"X-Forwarded-For": "198.51.100.8"}
        for i in range(3):
            status, body, _ = await call(service.url, f"guess-{i}", "GET", "/v1/queues", headers=guesser)
            assert (status, body["error"]["code"]) == (401, "token_invalid")
        status, body, headers = await call(service.url, token, "GET", "/v1/queues", headers=guesser)
        assert (status, body["error"]["code"]) == (429, "auth_throttled"), body
        assert 1 <= int(headers["Retry-After"]) <= 20, "3/min: one more guess within 20 s"
        assert headers["Retry-After"] == str(body["error"]["retry_after_s"])
        status, body, _ = await call(service.url, token, "GET", "/v1/queues", headers=other)
        assert status == 200, body
        status, body, _ = await call(service.url, "no-such-token", "GET", "/v1/queues", headers=other)
        assert status == 401, "another client's guesses are its own"
        spoofed = {"X-Forwarded-For": "192.0.2.1, 198.51.100.7"}  # the guesser wrote a first hop of its own
        status, body, _ = await call(service.url, token, "GET", "/v1/queues", headers=spoofed)
        assert (status, body["error"]["code"]) == (429, "auth_throttled"), "the hop the proxy added counts"
