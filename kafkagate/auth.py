"""The gateway's door: who is asking (authentication) and whether they may (one policy, ``jqruntime.authz``).

Two steps of the gateway's door (:mod:`kafkagate.door`) on every route of its own tables (the mounted
dashboard has its own door):

* :func:`bearer` and :func:`entitle` run **before the body is read**: the bearer token is matched (a client
  address that presented too many tokens not accepted is refused first, 429 ``auth_throttled``) and named
  on the request (:data:`~jqruntime.http.TOKEN_NAME`, and ``token=`` on every log line of the request),
  one request of its rate is spent (429 ``rate_limited``) and the route's scope checked (403
  ``scope_missing``) — an unauthenticated or unentitled sender never makes the gateway buffer a body;
* :func:`~jqruntime.authz.authorize` runs **after** the body is read, last before the handler: every touch
  the route's policy finds — the path's queue, the queues and kinds its body names (each job, each graph
  node), the owner of the stored object it names (a switch, a cron schedule, a graph) — must be the
  token's (403 ``queue_forbidden`` / ``kind_forbidden``). Handlers check nothing of this themselves; lists
  are narrowed with :func:`visible`.

The finds below are the gateway's: what each kind of request touches. A route declares its policy beside
its handler (``kafkagate.api``); errors, their statuses and their JSON body are :mod:`jqruntime.http`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import structlog
from aiohttp import web

from jqcore.buckets import Buckets
from jqcore.log import get_logger
from jqruntime.authz import (
    EVERY_QUEUE,
    Policy,
    Touch,
    auth_throttled,
    glob,
    kind,
    owner,
    queue,
    require_scope,
)
from jqruntime.clientaddr import Networks, request_address
from jqruntime.http import TOKEN_NAME, HttpError
from jqruntime.tokens import Token, TokenSource, retry_after
from kafkagate.archive import archived_snapshot
from kafkagate.body import read_body
from kafkagate.enqueue import documents
from kafkagate.queue_bodies import KindBody, SwitchBody
from kafkagate.requests import (
    body_model,
    engine_call,
    graph_id_of,
    graph_spec,
    kind_of,
    name_of,
    queue_of,
    schedule_of,
)
from kafkagate.state import GATE

__all__ = [
    "TOKEN",
    "TOKENS",
    "bearer",
    "cron_owner",
    "cron_put",
    "entitle",
    "graph_body",
    "graph_owner",
    "job_kinds",
    "kind_put",
    "replayed_kind",
    "search_queue",
    "switch_owner",
    "switch_put",
    "token_of",
    "visible",
]

log = get_logger("kafkagate.auth")

TOKEN = web.RequestKey("token", Token)
"""The token a request was authenticated with."""
TOKENS = web.AppKey("tokens", TokenSource)
"""The gateway's tokens (reloaded on SIGHUP: ``kafkagate.main``)."""


def token_of(request: web.Request) -> Token:
    return request[TOKEN]


def visible(request: web.Request, queues: Iterable[str]) -> list[str]:
    """The queues of ``queues`` the request's token may see (lists are narrowed, never refused)."""
    token = token_of(request)
    return [q for q in queues if token.allows_queue(q)]


def _match(
    request: web.Request, secret: str, source: TokenSource, failures: Buckets | None, proxies: Networks
) -> Token:
    """The token of ``secret`` (401 ``token_invalid``: none); with ``failures``, the client's address is
    refused first when it has no failure left (429 ``auth_throttled``), and a failed match spends one."""
    if failures:  # some address failed lately (none did: no address is refused, none looked up)
        wait = failures.wait_s(request_address(request, proxies), time.monotonic())
        if wait > 0:
            raise auth_throttled(int(retry_after(wait)))
    token = source.current.match(secret)
    if token is None and failures is not None:
        address, now = request_address(request, proxies), time.monotonic()
        if failures.take(address, now) == 0.0 and failures.wait_s(address, now) > 0:
            log.warning(
                "bearer tokens not accepted: client throttled", address=address, rate=str(failures.rate)
            )
    if token is None:
        raise HttpError(401, "token_invalid", "the bearer token is not accepted")
    return token


def bearer(
    request: web.Request, source: TokenSource, failures: Buckets | None = None, proxies: Networks = ()
) -> Token:
    """The request's bearer token of ``source.current`` (read per request: a reload takes effect at the next
    one), named on the request (:data:`TOKEN`, :data:`~jqruntime.http.TOKEN_NAME`) and on its log lines
    (``token=``); 401 ``unauthenticated`` without one, ``token_invalid`` for one not accepted.

    ``failures``: a bucket per client address (``proxies``: the trusted ones whose ``X-Forwarded-For`` is
    read, ``jqruntime.clientaddr``) spent by each bearer token not accepted; an address with none left is
    refused before its token is compared (429 ``auth_throttled``)."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise HttpError(401, "unauthenticated", "send Authorization: Bearer <token>")
    token = _match(request, secret, source, failures, proxies)
    request[TOKEN] = token
    request[TOKEN_NAME] = token.name
    structlog.contextvars.bind_contextvars(token=token.name)  # reset by the door (kafkagate.door)
    return token


def entitle(request: web.Request, source: TokenSource, token: Token, policy: Policy | None) -> None:
    """The token's rate (429 ``rate_limited``, one request spent) and the route's scope (403
    ``scope_missing``)."""
    wait = source.throttle(token)
    if wait > 0 and token.rate is not None:
        after = retry_after(wait)
        limited = HttpError(
            429,
            "rate_limited",
            f"token {token.name!r} is over its rate of {token.rate}; retry in {after} s",
            details={"token": token.name, "rate": str(token.rate), "retry_after_s": int(after)},
        )
        limited.headers["Retry-After"] = after
        raise limited
    if policy is not None and policy.checked and not token.has(policy.scope):
        resource = request.match_info.route.resource
        require_scope(token, policy, f"{request.method} {resource.canonical if resource else request.path}")


# ---- what requests touch ------------------------------------------------------------------------------
async def job_kinds(request: web.Request, token: Token) -> Iterable[Touch]:
    """The kind of each job of an enqueue (a token of every kind skips the read). A job the parse cannot
    read is the handler's 400, not a refusal."""
    if token.every_kind:
        return []
    gate = request.app[GATE]
    try:
        docs = documents(await read_body(request), request.content_type, gate.settings.max_batch)
    except HttpError:
        return []
    single = len(docs) == 1 and request.content_type != "application/x-ndjson"
    return [
        kind(doc["kind"], "$" if single else f"jobs[{i}]")
        for i, doc in enumerate(docs)
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str)
    ]


async def graph_body(request: web.Request, _: Token) -> Iterable[Touch]:
    """A submitted graph: its home queue, and every node's queue and kind (the on_failure node's too)."""
    spec = await graph_spec(request)
    touches = [queue(spec.queue, "queue")]
    for node in spec.all_nodes():
        touches += [queue(node.queue, f"nodes.{node.name}"), kind(node.kind, f"nodes.{node.name}")]
    return touches


async def graph_owner(request: web.Request, _: Token) -> Iterable[Touch]:
    """A stored graph's home queue and every node's queue (404 ``graph_not_found`` for no such graph)."""
    graph_id = graph_id_of(request)
    info = await engine_call(request.app[GATE].engine.graphs.get(graph_id))
    what = f"graph {graph_id!r}"
    return [owner(q, what) for q in {info.queue, *(n.queue for n in info.nodes)}]


async def _switch_owner(request: web.Request) -> list[Touch]:
    """The queue of switch ``name`` in force — or kept in Consul, while Redis lost its switches and they
    are not back yet: lifting or replacing such a switch changes its kept copy, its owner's as much. Consul
    is not asked for a token of every queue (it owns every switch: a switch set in an incident while Consul
    does not answer is in force, reported not kept), nor once the switches are back (Consul then keeps no
    switch Redis lacks)."""
    name = request.match_info["name"]
    engine, configs = request.app[GATE].engine, request.app[GATE].configs
    switches = [s for s in await engine_call(engine.admin.switches()) if s.name == name]
    if (
        not switches
        and not token_of(request).every_queue
        and not await engine_call(engine.admin.switches_restored())
    ):
        switches = [kept] if (kept := await configs().kept_switch(name)) is not None else []
    return [owner(s.queue, f"switch {name!r}") for s in switches]


async def switch_put(request: web.Request, _: Token) -> Iterable[Touch]:
    """The queue (or glob) of the new switch, and the owner of the switch it would replace."""
    body = await body_model(request, SwitchBody)
    return [glob(body.queue, "queue"), *await _switch_owner(request)]


async def switch_owner(request: web.Request, _: Token) -> Iterable[Touch]:
    """A stored switch's queue or glob (none: no such switch, the handler's 404)."""
    return await _switch_owner(request)


async def _cron_owner(request: web.Request) -> list[Touch]:
    name = name_of(request)
    current = await request.app[GATE].cron().get(name)
    return [] if current is None else [owner(current.queue, f"cron schedule {name!r}")]


async def cron_put(request: web.Request, _: Token) -> Iterable[Touch]:
    """The new schedule's queue and kind, and the owner of the schedule it would replace."""
    schedule = await schedule_of(request)
    return [queue(schedule.queue, "queue"), kind(schedule.kind, "kind"), *await _cron_owner(request)]


async def cron_owner(request: web.Request, _: Token) -> Iterable[Touch]:
    """A stored schedule's queue (none: no such schedule, the handler's 404)."""
    return await _cron_owner(request)


async def kind_put(request: web.Request, _: Token) -> Iterable[Touch]:
    """A job type's kind and each queue it is configured for (every queue when none are named)."""
    body = await body_model(request, KindBody)
    touches = [kind(kind_of(request), "path")]
    if body.queues is None:
        return [*touches, EVERY_QUEUE]
    return touches + [queue(q, f"queues[{i}]") for i, q in enumerate(body.queues)]


async def search_queue(request: web.Request, _: Token) -> Iterable[Touch]:
    """A search's ``?queue=``, else every queue (a token held to some queues must name one)."""
    named = request.query.get("queue")
    return [queue(named, "?queue=")] if named else [EVERY_QUEUE]


async def replayed_kind(request: web.Request, _: Token) -> Iterable[Touch]:
    """The kind of the job a replay would enqueue again, live or archived (none: no such job, the
    handler's 404)."""
    gate = request.app[GATE]
    name, job_id = queue_of(request), request.match_info["id"]
    info = await engine_call(gate.engine.reads.get_job(name, job_id))
    found = info.kind if info is not None else None
    if info is None:
        old = await archived_snapshot(request, name, job_id)
        found = old.kind if old is not None else None
    return [kind(found, "the job's kind")] if found else []
