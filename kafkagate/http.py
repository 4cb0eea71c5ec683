"""HTTP plumbing of the gateway: the error body, the mapping from jobq errors to statuses, auth.

Every error answers ``{"error": {"code", "message", "fields"?, ...}}`` with a stable machine-readable
``code``: jobq errors with the status their class declares (``http_status``; a 503 with ``Retry-After``
only when ``retriable``), aiohttp's own refusals (404, 405, 413, ...) in the same shape, and anything
unexpected as a 500 ``internal_error`` whose traceback is logged — never aiohttp's text page.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr

from jqcore.errors import ConfigError, EnvelopeError, FieldError, JobqError
from jqcore.log import get_logger

__all__ = ["ApiError", "auth_middleware", "error_middleware", "http_status", "json_response"]

log = get_logger("kafkagate.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})


class ApiError(JobqError):
    """An HTTP-level refusal with its status (bad JSON, missing field, unknown route parameter...)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: Sequence[FieldError] = (),
        *,
        details: Mapping[str, Any] | None = None,
        **headers: str,
    ) -> None:
        super().__init__(message, code=code, retriable=status == 503)
        self.status = self.http_status = status
        self.fields = tuple(fields)
        self.details = dict(details or {})
        """More machine-readable facts, merged into the error object (e.g. ``limit_bytes``)."""
        self.headers = headers


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def http_status(exc: JobqError) -> int:
    """The status ``exc`` declares (its class's ``http_status``, or one set on the instance)."""
    return int(exc.http_status)


def _status(exc: JobqError) -> tuple[int, dict[str, str]]:
    """Status and headers: a retriable server-side failure is a 503 with ``Retry-After``; a 503 is never
    given to an error that retrying cannot fix (it becomes a 500)."""
    status = http_status(exc)
    if exc.retriable and status >= 500:
        status = 503
    elif status == 503:
        status = 500
    headers = dict(exc.headers) if isinstance(exc, ApiError) else {}
    if status == 503:
        headers.setdefault("Retry-After", "1")
    return status, headers


def error_body(exc: JobqError) -> dict[str, Any]:
    err: dict[str, Any] = {"code": exc.code, "message": exc.message}
    fields = exc.fields if isinstance(exc, EnvelopeError | ApiError) else ()
    if fields:
        err["fields"] = [f.as_dict() for f in fields]
    if isinstance(exc, ApiError):
        err.update({k: v for k, v in exc.details.items() if k not in err})
    return {"error": err}


HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    411: "length_required",
    413: "body_too_large",
    414: "uri_too_long",
    415: "content_type_unsupported",
    429: "too_many_requests",
    431: "headers_too_large",
}
"""Codes for aiohttp's own refusals (``web.HTTPException``); any other status is ``http_<status>``."""


def _http_exception(exc: web.HTTPException) -> web.Response:
    status = exc.status
    code = HTTP_CODES.get(status, "internal_error" if status == 500 else f"http_{status}")
    headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "Retry-After")}
    if status == 503:
        headers.setdefault("Retry-After", "1")
    return json_response({"error": {"code": code, "message": exc.text or exc.reason}}, status, headers)


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
        return _http_exception(exc)
    except web.RequestPayloadError as exc:  # the body's framing broke (bad chunks): the connection did too
        response = json_response(
            {"error": {"code": "body_undecodable", "message": f"the body could not be read: {exc}"}}, 400
        )
        response.force_close()
        return response
    except Exception:
        log.exception("unexpected error answering a request", method=request.method, path=request.path)
        body = {"error": {"code": "internal_error", "message": "unexpected error; the gateway logged it"}}
        return json_response(body, 500)


SCOPES = ("enqueue", "read", "worker", "admin")
"""``enqueue``: POST jobs and graphs; ``read``: GET anything; ``worker``: claims, extend, complete, fail;
``admin``: cancel, replay, queue and job-type configuration, dead letters."""


def required_scope(method: str, path_template: str) -> str:
    """The scope a route needs (by the route's template, e.g. ``/v1/queues/{queue}/jobs``)."""
    if method == "GET":
        return "read"
    if method == "POST" and (path_template.endswith("/jobs") or path_template == "/v1/graphs"):
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


def auth_middleware(tokens: Sequence[SecretStr], mounted: Sequence[str] = ()) -> Middleware:
    """Bearer tokens compared in constant time, each with its scopes; probes and documentation stay open,
    and so do the ``mounted`` sub-applications' prefixes (the dashboard checks its own tokens)."""
    known = parse_tokens(tokens)
    prefixes = tuple(f"{m.rstrip('/')}/" for m in mounted)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or (prefixes and request.path.startswith(prefixes)):
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
