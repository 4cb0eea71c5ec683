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


def auth_middleware(tokens: Sequence[SecretStr]) -> Middleware:
    """Bearer tokens compared in constant time; the probe and documentation endpoints stay open."""
    secrets = [t.get_secret_value().encode() for t in tokens]

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "unauthenticated", "send Authorization: Bearer <token>")
        given = token.strip().encode()
        if not any(hmac.compare_digest(given, s) for s in secrets):
            raise ApiError(401, "token_invalid", "the bearer token is not accepted")
        return await handler(request)

    return auth
