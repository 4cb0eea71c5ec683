"""The HTTP toolkit every jobq server shares: one rule from an exception to an answer, one JSON error
body, one error middleware, one way to serve an aiohttp application.

**The rule** (:func:`answer_for`). Every error answers ``{"error": {"code", "message", "fields"?, ...}}``
with a stable machine-readable ``code``:

* a :class:`~jqcore.errors.JobqError` with the status its class declares (``http_status``); a retriable
  one that fails on the server side is a 503 with ``Retry-After``, and a 503 is never given to an error
  that retrying cannot fix (it becomes a 500), so a client told to retry can succeed by retrying;
  :class:`HttpError` is the one a handler raises for a refusal of its own (bad JSON, unknown page...);
* aiohttp's own refusals (404, 405, 413, ...) in the same shape, their ``Allow`` kept;
* a body whose framing broke (bad chunks) is a 400 ``body_undecodable`` that closes the connection;
* anything unexpected is a 500 ``internal_error`` whose traceback is logged, never shown.

**The middleware** (:func:`error_middleware`; :func:`error_response` for a door of its own) answers that
body as JSON, or hands the answer to a ``render`` function (the dashboard shows browsers an HTML page with
the same status and code).

**Serving** (:func:`serve_http`): ``AppRunner`` + ``TCPSite``; the runner's ``cleanup()`` stops
accepting, lets running requests finish for :data:`SHUTDOWN_TIMEOUT_S`, then runs the app's cleanup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import BaseModel, ConfigDict, Field

from jqcore.errors import EnvelopeError, FieldError, JobqError
from jqcore.log import get_logger

__all__ = [
    "SHUTDOWN_TIMEOUT_S",
    "TOKEN_NAME",
    "ErrorAnswer",
    "ErrorBody",
    "HttpError",
    "answer_for",
    "error_body",
    "error_middleware",
    "error_response",
    "error_status",
    "json_response",
    "serve_http",
]

log = get_logger("jqruntime.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SHUTDOWN_TIMEOUT_S = 5.0
"""How long a stopping server lets running requests finish."""
RETRY_AFTER_S = "1"
"""The ``Retry-After`` of every 503."""

TOKEN_NAME = web.RequestKey("token_name", str)
"""The name of the token a request was authenticated with: set by the gateway's and the dashboard's
authentication, read by their logs, metrics and audit records."""


class HttpError(JobqError):
    """An HTTP-level refusal with its status (bad JSON, missing field, unknown route parameter, a page
    that does not exist...); ``details`` are merged into the error object, ``headers`` sent with it."""

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


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def error_status(exc: JobqError) -> tuple[int, dict[str, str]]:
    """Status and headers of a jobq error: a retriable server-side failure is a 503 with ``Retry-After``;
    a 503 is never given to an error that retrying cannot fix (it becomes a 500)."""
    status = int(exc.http_status)
    if exc.retriable and status >= 500:
        status = 503
    elif status == 503:
        status = 500
    headers = dict(exc.headers) if isinstance(exc, HttpError) else {}
    if status == 503:
        headers.setdefault("Retry-After", RETRY_AFTER_S)
    return status, headers


def error_body(exc: JobqError) -> dict[str, Any]:
    """The one error body: ``{"error": {"code", "message", "fields"?, **details}}``."""
    err: dict[str, Any] = {"code": exc.code, "message": exc.message}
    fields = exc.fields if isinstance(exc, EnvelopeError | HttpError) else ()
    if fields:
        err["fields"] = [f.as_dict() for f in fields]
    if isinstance(exc, HttpError):
        err.update({k: v for k, v in exc.details.items() if k not in err})
    return {"error": err}


class FieldProblem(BaseModel):
    field: str = Field(description="where: a field, jobs[i].field, or $ for the whole document")
    problem: str


class ErrorDetail(BaseModel):
    """What :func:`error_body` puts under ``error``; ``details`` of an :class:`HttpError` are merged in
    (``token``, ``scope``, ``limit_bytes``, ``retry_after_s``...)."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(description="stable, machine-readable reason")
    message: str
    fields: list[FieldProblem] | None = Field(None, description="each bad field of the request")


class ErrorBody(BaseModel):
    """The one JSON error body of every jobq HTTP server (:func:`error_body`)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error": {"code": "body_invalid", "message": "n: too large"}}]}
    )

    error: ErrorDetail


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


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    """What a server answers for an exception (:func:`answer_for`)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False
    """The connection must close after the answer (the request's body framing broke)."""

    @property
    def code(self) -> str:
        return str(self.body["error"]["code"])

    @property
    def message(self) -> str:
        return str(self.body["error"]["message"])

    @property
    def retriable(self) -> bool:
        """Whether the client may retry the same request (always with ``Retry-After``)."""
        return self.status == 503

    def response(self) -> web.Response:
        """The answer as JSON."""
        return json_response(self.body, self.status, self.headers)


def _refusal(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> ErrorAnswer:
    return ErrorAnswer(status, {"error": {"code": code, "message": message}}, dict(headers or {}))


def _http_exception(exc: web.HTTPException) -> ErrorAnswer:
    status = exc.status
    code = HTTP_CODES.get(status, "internal_error" if status == 500 else f"http_{status}")
    headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "Retry-After")}
    if status == 503:
        headers.setdefault("Retry-After", RETRY_AFTER_S)
    return _refusal(status, code, exc.text or exc.reason, headers)


def answer_for(exc: Exception, server: str = "the server") -> ErrorAnswer:
    """The answer to ``exc`` (see the module's docstring); ``server`` names who logged an unexpected one.

    A ``web.HTTPException`` below 400 (a redirect) is not an error: callers re-raise it."""
    if isinstance(exc, JobqError):
        status, headers = error_status(exc)
        return ErrorAnswer(status, error_body(exc), headers)
    if isinstance(exc, web.HTTPException):
        return _http_exception(exc)
    if isinstance(exc, web.RequestPayloadError):
        message = f"the body could not be read: {exc}"
        return ErrorAnswer(400, {"error": {"code": "body_undecodable", "message": message}}, close=True)
    return _refusal(500, "internal_error", f"unexpected error; {server} logged it")


Render = Callable[[web.Request, ErrorAnswer], web.StreamResponse]


def error_response(
    request: web.Request, exc: Exception, server: str = "the server", render: Render | None = None
) -> web.StreamResponse:
    """The answer to an exception a handler raised, by :func:`answer_for`: as JSON, or through ``render``
    (which may answer JSON itself with ``answer.response()``). ``server`` names the service in the message
    of a 500, whose traceback is logged. An ``HTTPException`` below 400 (a redirect, raised by design) is
    the caller's to raise again."""
    if not isinstance(exc, JobqError | web.RequestPayloadError | web.HTTPException):
        log.exception(
            "unexpected error answering a request", server=server, method=request.method, path=request.path
        )
    answer = answer_for(exc, server)
    response = render(request, answer) if render is not None else answer.response()
    if answer.close:
        response.force_close()
    return response


def error_middleware(server: str = "the server", render: Render | None = None) -> Middleware:
    """Answer every exception a handler raises by :func:`error_response` (a redirect is raised on)."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect, raised by design
                raise
            return error_response(request, exc, server, render)
        except Exception as exc:
            return error_response(request, exc, server, render)

    return errors


async def serve_http(
    app: web.Application,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT_S,
) -> tuple[web.AppRunner, int]:
    """Serve the aiohttp application ``app`` on ``host:port`` (0: any free port): its runner (``cleanup()``
    stops accepting, lets running requests finish, runs the app's cleanup) and the port it listens on.
    ``reuse_port``: bind with ``SO_REUSEPORT`` beside other processes serving the same port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, reuse_port=reuse_port).start()
    except BaseException:
        await runner.cleanup()
        raise
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
