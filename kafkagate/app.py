"""The gateway's aiohttp application: routes, its door (:mod:`kafkagate.door`), health/readiness, metrics,
OpenAPI.

``/readyz`` answers 503 while Kafka is unreachable or a routed topic is missing (a load balancer then
sends enqueues to another gateway); ``/healthz`` only says the process serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from typing import Any

from aiohttp import web

from jqcore import metrics
from jqcore.buckets import Buckets, Rate
from jqcore.settings.common import load
from jqruntime.authz import OPEN, POLICIES, Policy
from jqruntime.http import HttpError, json_response
from jqruntime.stores.audit import AuditTrail
from jqruntime.tokens import TokenSettings, TokenSource
from kafkagate import callbacks, claims, cron, graphs, history, jobs, queues, running, switches
from kafkagate import models as m
from kafkagate.api import Api
from kafkagate.audit import AUDIT
from kafkagate.auth import TOKENS
from kafkagate.door import Door
from kafkagate.limits import BODY_BUDGET, CALLBACK_LIMITS, BodyBudget, CallbackLimits, share_of
from kafkagate.openapi import build
from kafkagate.state import GATE, Gate

__all__ = ["TABLES", "document", "make_app", "policy_for"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


probes = Api("probes")


@probes.get("/healthz", summary="the process serves", answer=m.Health, policy=OPEN)
async def healthz(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    return json_response({"status": "ok", "az": gate.settings.az})


@probes.get(
    "/readyz",
    summary="Kafka reachable and every routed topic present",
    answer=m.Ready,
    policy=OPEN,
    errors={503: "kafka_not_ready: Kafka is unreachable or a routed topic is missing (Retry-After)"},
)
async def readyz(request: web.Request) -> web.Response:
    """Ready when Kafka shows every routed topic; the answer is reused for a second (``Gate.readiness``).
    A topic that is not ready is named with an error code (``topic_missing``, ``kafka_unavailable``); what
    Kafka's client said is in the gateway's log, not in the answer of this open route."""
    gate = request.app[GATE]
    problems = await gate.readiness()
    if problems:
        message = "Kafka is not ready for every routed topic (codes per topic; the gateway's log says why)"
        raise HttpError(503, "kafka_not_ready", message, details={"topics": problems})
    return json_response({"status": "ready", "az": gate.settings.az, "topics": gate.routing.topics()})


@probes.get("/metrics", summary="Prometheus metrics", answer=None, policy=OPEN, media="text/plain")
async def metrics_route(_: web.Request) -> web.Response:
    return web.Response(body=metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})


@probes.get("/openapi.json", summary="this document (OpenAPI 3.1)", answer=None, policy=OPEN)
async def openapi(request: web.Request) -> web.Response:
    return json_response(document())


TABLES: tuple[Api, ...] = (
    probes,
    jobs.routes,
    queues.routes,
    claims.routes,
    running.routes,
    callbacks.routes,
    cron.routes,
    history.routes,
    graphs.routes,
    switches.routes,
)
"""Every route of the gateway with its contract: the app routes them, ``/openapi.json`` documents them."""


def policy_for(method: str, path: str) -> Policy:
    """The policy a route declares (``KeyError``: the gateway has no such route)."""
    for table in TABLES:
        for op in table.operations:
            if (op.method, op.path) == (method, path):
                return op.policy
    raise KeyError(f"{method} {path}")


@cache
def document() -> dict[str, Any]:
    """The OpenAPI document of every declared route (:func:`kafkagate.openapi.build`), in the app's order."""
    return build([op for table in TABLES for op in table.operations])


def make_app(
    gate: Gate,
    mounts: Mapping[str, web.Application] | None = None,
    tokens: TokenSource | None = None,
    audit: AuditTrail | None = None,
) -> web.Application:
    """The gateway; ``mounts`` (prefix → application) are served beside it, e.g. the dashboard at ``/ui``
    (``jobq gate --web``): they answer their own errors and check their own tokens. ``tokens``: the
    accepted tokens (default: ``JOBQ_TOKENS_FILE`` and ``JOBQ_GATE_TOKENS``); ``audit``: where admin calls
    are recorded (``kafkagate.audit``), and successful dispatch callbacks."""
    mounts = dict(mounts or {})
    if tokens is None:
        tokens = TokenSource(load(TokenSettings), gate=gate.settings.tokens, host=gate.settings.host)
    policies = {op.handler: op.policy for table in TABLES for op in table.operations}
    app = web.Application(
        client_max_size=gate.settings.max_body_bytes,
        middlewares=[
            Door(
                tokens,
                policies,
                list(mounts),
                failures=Buckets(Rate.parse(gate.settings.auth_failures)),
                proxies=gate.settings.proxy_networks(),
                trail=audit,
            ).middleware
        ],
        # bodies are decoded by kafkagate.body, which answers every coding with a JSON status; aiohttp's
        # parser would refuse br/zstd with a text page before any middleware and pass unknown ones through
        handler_args={"auto_decompress": False},
    )
    app[GATE] = gate
    budget = gate.settings.inflight_body_bytes
    app[BODY_BUDGET] = BodyBudget(budget, per_holder=share_of(budget, gate.settings.token_share))
    app[CALLBACK_LIMITS] = CallbackLimits(
        BodyBudget(gate.settings.callback_inflight_body_bytes, "JOBQ_GATE_CALLBACK_INFLIGHT_BODY_BYTES"),
        gate.settings.callback_read_timeout_s,
        gate.settings.callback_rate_limit(),
    )
    if audit is not None:
        app[AUDIT] = audit
    app[TOKENS] = tokens
    app[POLICIES] = policies
    for table in TABLES:
        app.router.add_routes(table)
    for prefix, sub in mounts.items():
        app.add_subapp(prefix, sub)

    async def stop_polls(_: web.Application) -> None:  # runs before the requests in flight are awaited
        gate.long_polls.stop()

    async def close(_: web.Application) -> None:
        await gate.close()

    app.on_shutdown.append(stop_polls)
    app.on_cleanup.append(close)
    return app
