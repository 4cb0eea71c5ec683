"""What every gateway route reads from its request, in one place: path parameters checked as names, the
body parsed once (a door's find and the handler share the parse), and engine calls mapped to answers.

A body is parsed at most once per request: :func:`body_model`, :func:`graph_spec` and :func:`schedule_of`
keep what they parsed on the request, so the authorization door (:mod:`kafkagate.auth`), which reads the
queues and kinds a body names before the handler runs, costs no second parse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.clock import now_ms
from jqcore.cron import CronSchedule, check_name, parse_schedule
from jqcore.envelope import validate_name
from jqcore.errors import BackendUnavailable, CronInvalid, EnvelopeError, FieldError
from jqcore.graphs import GraphSpec, parse
from jqcore.log import get_logger
from jqruntime.http import HttpError
from kafkagate.body import read_body
from kafkagate.limits import busy

__all__ = [
    "REDIS_UNREACHABLE",
    "body_model",
    "engine_call",
    "graph_id_of",
    "graph_spec",
    "json_body",
    "kind_of",
    "name_of",
    "parse_model",
    "queue_of",
    "schedule_of",
]

log = get_logger("kafkagate.requests")
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
PARSED = web.RequestKey("jobq.parsed", dict)
"""What was parsed from the body, by what it was parsed as (:func:`_once`)."""


def _param(request: web.Request, param: str, field: str, code: str) -> str:
    try:
        return validate_name(field, request.match_info[param])
    except EnvelopeError as exc:
        raise HttpError(400, code, exc.message, exc.fields) from None


def queue_of(request: web.Request) -> str:
    return _param(request, "queue", "queue", "queue_invalid")


def kind_of(request: web.Request) -> str:
    return _param(request, "kind", "kind", "kind_invalid")


def graph_id_of(request: web.Request) -> str:
    return _param(request, "graph", "id", "graph_id_invalid")


def name_of(request: web.Request) -> str:
    """A cron schedule's name from the path (400 ``cron_invalid``)."""
    return check_name(request.match_info["name"])


def parse_model(model: type[M], body: bytes) -> M:
    """A request body as ``model``; every bad field named in the 400."""
    try:
        return model.model_validate(orjson.loads(body or b"{}"))
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, "body_not_json", f"the body is not JSON: {exc}") from None
    except ValidationError as exc:
        fields = [FieldError(".".join(str(p) for p in e["loc"]) or "$", e["msg"]) for e in exc.errors()]
        raise HttpError(
            400, "body_invalid", "; ".join(f"{f.field}: {f.problem}" for f in fields), fields
        ) from None


async def _once(request: web.Request, what: object, parse_it: Callable[[bytes], T]) -> T:
    parsed = request.get(PARSED)
    if parsed is None:
        parsed = request[PARSED] = {}
    if what not in parsed:
        parsed[what] = parse_it(await read_body(request))
    found: T = parsed[what]
    return found


async def body_model(request: web.Request, model: type[M]) -> M:
    """The body as ``model`` (parsed once per request)."""
    return await _once(request, model, lambda raw: parse_model(model, raw))


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, "body_not_json", f"the body is not JSON: {exc}") from None


async def json_body(request: web.Request) -> Any:
    """The body as JSON (``{}`` when empty; parsed once per request)."""
    return await _once(request, "json", _json)


async def graph_spec(request: web.Request) -> GraphSpec:
    """The body of ``POST /v1/graphs`` as a validated graph (parsed once per request)."""
    return await _once(request, GraphSpec, lambda raw: parse(_json(raw), now=now_ms()))


def _schedule(raw: bytes, name: str) -> CronSchedule:
    body = _json(raw)
    if not isinstance(body, dict):
        raise CronInvalid(FieldError("$", "must be an object"))
    if "created_ms" in body:
        raise CronInvalid(FieldError("created_ms", "is set by the server"))
    if body.setdefault("name", name) != name:
        raise CronInvalid(FieldError("name", f"differs from the path's {name!r}"))
    return parse_schedule(body)


async def schedule_of(request: web.Request) -> CronSchedule:
    """The body of ``PUT /v1/cron/{name}`` as a schedule named by the path (parsed once per request)."""
    name = name_of(request)
    return await _once(request, CronSchedule, lambda raw: _schedule(raw, name))


REDIS_UNREACHABLE = "Redis did not answer; retry later (the gateway's log says why)"
"""The message of a Redis outage's 503 (``backend_unavailable``): what redis-py said — addresses, the
server's own words — goes to the log, never to the client."""


async def engine_call(awaitable: Any) -> Any:
    """Engine reads/changes: a Redis outage is a 503 ``backend_unavailable`` with a fixed message (the
    reason is logged), never a 500; this process's own Redis pool exhausted is a 429 ``gateway_busy``
    (Redis is not down)."""
    try:
        return await awaitable
    except MaxConnectionsError:  # this process's own pool is exhausted: busy here, Redis is fine
        raise busy("its Redis connections (JOBQ_GATE_REDIS_CONNECTIONS)") from None
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        log.warning("Redis unreachable", error=repr(exc))
        raise BackendUnavailable(REDIS_UNREACHABLE) from exc
