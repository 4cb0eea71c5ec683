"""HTTP plumbing of the gateway: the error body, the mapping from jobq errors to statuses, auth.

Every error answers ``{"error": {"code", "message", "fields"?}}`` with a stable machine-readable ``code``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr

from jqcore.errors import BackendUnavailable, ConfigError, EnvelopeError, FieldError, JobqError
from jqcore.kafka import TopicMissing
from jqcore.routing import QueueUnrouted
from jqcore.state.codes import FenceRejected, JobNotFound, QueueConfigInvalid, StaleLease

__all__ = ["ApiError", "auth_middleware", "error_middleware", "json_response"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})


class ApiError(JobqError):
    """An HTTP-level refusal with its status (bad JSON, missing field, unknown route parameter...)."""

    def __init__(
        self, status: int, code: str, message: str, fields: Sequence[FieldError] = (), **headers: str
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.fields = tuple(fields)
        self.headers = headers


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def _status(exc: JobqError) -> tuple[int, dict[str, str]]:
    if isinstance(exc, ApiError):
        return exc.status, exc.headers
    if isinstance(exc, EnvelopeError | QueueConfigInvalid | ConfigError):
        return 400, {}
    if isinstance(exc, QueueUnrouted | JobNotFound):
        return 404, {}
    if isinstance(exc, StaleLease | FenceRejected):
        return 409, {}
    if isinstance(exc, TopicMissing | BackendUnavailable):
        return 503, {"Retry-After": "1"}
    return 500, {}


def error_body(exc: JobqError) -> dict[str, Any]:
    err: dict[str, Any] = {"code": exc.code, "message": exc.message}
    fields = exc.fields if isinstance(exc, EnvelopeError | ApiError) else ()
    if fields:
        err["fields"] = [f.as_dict() for f in fields]
    return {"error": err}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except JobqError as exc:
        status, headers = _status(exc)
        return json_response(error_body(exc), status, headers)
    except web.HTTPException as exc:  # aiohttp's own 404/405/413: same body shape
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(
            exc.status, "http_error"
        )
        return json_response({"error": {"code": code, "message": exc.reason}}, exc.status)


SCOPES = ("enqueue", "read", "worker", "admin")
"""``enqueue``: POST jobs; ``read``: GET anything; ``worker``: claims, extend, complete, fail;
``admin``: cancel, replay, queue and job-type configuration, dead letters."""


def required_scope(method: str, path_template: str) -> str:
    """The scope a route needs (by the route's template, e.g. ``/v1/queues/{queue}/jobs``)."""
    if method == "GET":
        return "read"
    if method == "POST" and path_template.endswith("/jobs"):
        return "enqueue"
    if path_template.endswith(("/claims", "/extend", "/complete", "/fail")):
        return "worker"
    return "admin"


def parse_tokens(tokens: Sequence[SecretStr]) -> list[tuple[bytes, frozenset[str]]]:
    """``secret`` (every scope) or ``secret:scope+scope`` per configured token."""
    out = []
    for t in tokens:
        secret, _, scopes = t.get_secret_value().partition(":")
        granted = frozenset(scopes.split("+")) if scopes else frozenset(SCOPES)
        unknown = granted - set(SCOPES)
        if unknown:
            raise ConfigError(
                f"JOBQ_GATE_TOKENS: unknown scope(s) {sorted(unknown)}; known: {', '.join(SCOPES)}"
            )
        out.append((secret.encode(), granted))
    return out


def auth_middleware(tokens: Sequence[SecretStr]) -> Middleware:
    """Bearer tokens compared in constant time, each with its scopes; probes and documentation stay open."""
    known = parse_tokens(tokens)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "unauthenticated", "send Authorization: Bearer <token>")
        given = token.strip().encode()
        granted: frozenset[str] | None = None
        for secret, scopes in known:  # compare against every token: timing does not reveal which matched
            if hmac.compare_digest(given, secret):
                granted = scopes
        if granted is None:
            raise ApiError(401, "token_invalid", "the bearer token is not accepted")
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else request.path
        needed = required_scope(request.method, template)
        if needed not in granted:
            raise ApiError(
                403, "scope_missing", f"this token lacks the {needed!r} scope for {request.method} {template}"
            )
        return await handler(request)

    return auth
