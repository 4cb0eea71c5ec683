"""Request bodies: which media types and content codings the API takes, and reading them safely.

The gateway decodes request bodies itself (aiohttp's automatic decompression is off, see
:func:`kafkagate.app.make_app`): aiohttp refuses a coding it cannot decode (``br`` without Brotli,
``zstd``) in its HTTP parser, before any middleware, with a text page, and passes an unknown one through
as if it were identity. Here every body of a matched route passes :func:`take_body` (in the gateway's
door, :mod:`kafkagate.door`) before its handler runs, and a request the API cannot read is a 4xx with a code:

* ``Content-Type`` other than the route's media types (a missing one means JSON), or a charset other
  than UTF-8 (JSON is UTF-8, RFC 8259) ⇒ 415 ``content_type_unsupported``;
* ``Content-Encoding`` other than ``identity``, ``gzip``, ``deflate`` ⇒ 415 ``content_encoding_unsupported``;
* a body that does not decompress (or a broken chunked framing) ⇒ 400 ``body_undecodable``;
* more than the body limit on the wire or once decompressed ⇒ 413 ``body_too_large``;
* more bytes than the process's budget of bodies in flight leaves free (``JOBQ_GATE_INFLIGHT_BODY_BYTES``,
  :class:`kafkagate.limits.BodyBudget`), or than the token's share of it (``JOBQ_GATE_TOKEN_SHARE``) ⇒ 429
  ``gateway_busy`` with ``Retry-After`` (413 when the body alone exceeds the budget or that share).

The open dispatch callback routes (``/v1/callbacks/``) have limits of their own
(:class:`kafkagate.limits.CallbackLimits`), checked before a byte of the body is read: a rate per source
address (429 ``rate_limited``), a body of at most 128 KiB (413), a budget apart from the shared one (429
``gateway_busy``) and a read timeout (408 ``body_timeout``: the headers came, the body did not).

Handlers read the decoded bytes with :func:`read_body`.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from aiohttp import hdrs, web

from jqruntime.http import TOKEN_NAME, HttpError
from kafkagate.limits import BODY_BUDGET, CALLBACK_LIMITS, CALLBACK_PREFIX, BodyBudget

__all__ = ["ENCODINGS", "JSON", "NDJSON", "Held", "inflate", "read_body", "take_body"]

JSON = "application/json"
NDJSON = "application/x-ndjson"
MERGE_PATCH = "application/merge-patch+json"
ENCODINGS = ("identity", "gzip", "deflate")
CHARSETS = frozenset({"utf-8", "utf8"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BODY = web.RequestKey("jobq.body", bytes)
ANONYMOUS = "anonymous"
"""The holder of the bodies of routes without a token (the signed callbacks, held against their own budget
of :class:`~kafkagate.limits.CallbackLimits`, which has no share per holder)."""


def accepted_types(method: str, path_template: str) -> tuple[str, ...]:
    """Media types a route's body may have: JSON everywhere, NDJSON too for enqueues, JSON merge patch
    (RFC 7396) too for PATCH."""
    if method == "POST" and path_template.endswith("/jobs"):
        return (JSON, NDJSON)
    if method == "PATCH":
        return (JSON, MERGE_PATCH)
    return (JSON,)


_ACCEPTED: set[tuple[str, tuple[str, ...]]] = set()
"""(``Content-Type`` as sent, the route's media types) found acceptable: a client sends the same header on
every request, parsed and checked once (bounded: :data:`_ACCEPTED_MAX`)."""
_ACCEPTED_MAX = 256


def check_content_type(request: web.Request, accepted: tuple[str, ...]) -> None:
    raw = request.headers.get(hdrs.CONTENT_TYPE, "")
    if (raw, accepted) in _ACCEPTED or not raw.strip():
        return  # no Content-Type: the body is read as JSON
    if request.content_type not in accepted:
        raise HttpError(
            415,
            "content_type_unsupported",
            f"Content-Type {request.content_type!r} is not accepted here; send {' or '.join(accepted)} "
            "(or no Content-Type: JSON)",
        )
    charset = request.charset
    if charset is not None and charset.lower() not in CHARSETS:
        raise HttpError(415, "content_type_unsupported", f"charset {charset!r}: JSON bodies must be UTF-8")
    if len(_ACCEPTED) < _ACCEPTED_MAX:
        _ACCEPTED.add((raw, accepted))


def content_encoding(request: web.Request) -> str:
    """The body's one content coding (``identity`` when none is named); 415 for any other."""
    if hdrs.CONTENT_ENCODING not in request.headers:
        return "identity"
    given = ",".join(request.headers.getall(hdrs.CONTENT_ENCODING, []))
    coding = given.strip().lower() or "identity"
    if coding not in ENCODINGS:
        raise HttpError(
            415,
            "content_encoding_unsupported",
            f"Content-Encoding {given[:64]!r} is not accepted; use one of {', '.join(ENCODINGS)}",
        )
    return coding


def inflate(raw: bytes, coding: str, limit: int) -> bytes:
    """Decompress a ``gzip`` (one or more members) or ``deflate`` (zlib, or the raw deflate some clients
    send) body; never more than ``limit`` bytes are produced (413 beyond), so a small bomb stays small."""
    if coding == "identity":
        return raw
    if coding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    else:  # RFC 9110's deflate is zlib (RFC 1950); a first byte without the deflate method is raw deflate
        wbits = zlib.MAX_WBITS if raw[:1] and raw[0] & 0x0F == 8 else -zlib.MAX_WBITS
    out, data = bytearray(), raw
    try:
        while data:
            d = zlib.decompressobj(wbits)
            out += d.decompress(data, limit + 1 - len(out))
            if len(out) > limit:
                raise HttpError(413, "body_too_large", f"the body exceeds {limit} bytes once decompressed")
            if not d.eof:
                raise HttpError(400, "body_undecodable", f"the {coding} body is truncated")
            data = d.unused_data
            if data and coding != "gzip":
                raise HttpError(400, "body_undecodable", f"bytes follow the end of the {coding} stream")
    except zlib.error as exc:
        raise HttpError(400, "body_undecodable", f"the body is not valid {coding}: {exc}") from None
    return bytes(out)


@dataclass(frozen=True, slots=True)
class _Limits:
    """What one request's body is held to."""

    max_bytes: int
    budget: BodyBudget | None
    read_timeout_s: float | None = None


_SHARED: dict[int, _Limits] = {}
"""The shared limits by body limit (made once, not on every request; checked to be this app's budget)."""


def _limits_of(request: web.Request) -> _Limits:
    """The shared limits, or a callback's own (its source address's rate spent here: 429 past it)."""
    app = request.app  # the gateway's (a mounted application's requests are not read here)
    if request.path.startswith(CALLBACK_PREFIX) and (callbacks := app.get(CALLBACK_LIMITS)) is not None:
        callbacks.admit(request.remote)
        return _Limits(callbacks.max_body_bytes, callbacks.budget, callbacks.read_timeout_s)
    max_bytes, budget = request.client_max_size, app.get(BODY_BUDGET)
    limits = _SHARED.get(max_bytes)
    if limits is None or limits.budget is not budget:
        limits = _SHARED[max_bytes] = _Limits(max_bytes, budget)
    return limits


async def _read(request: web.Request, limits: _Limits) -> bytes:
    """The raw body, at most ``max_bytes`` (413 beyond, also for a body of no declared length), within the
    read timeout (408 ``body_timeout``)."""
    if limits.max_bytes >= request.client_max_size and limits.read_timeout_s is None:
        return await request.read()  # aiohttp's own limit (client_max_size) is the one
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            if limits.max_bytes >= request.client_max_size:
                return await request.read()
            chunks, size = [], 0
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > limits.max_bytes:
                    raise HttpError(413, "body_too_large", f"the body exceeds {limits.max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except TimeoutError:
        raise HttpError(
            408, "body_timeout", f"the body did not arrive within {limits.read_timeout_s} s"
        ) from None


@dataclass(frozen=True, slots=True)
class Held:
    """The bytes of the body budget one request's body holds until it is answered."""

    budget: BodyBudget
    bytes: int
    holder: str

    def give(self) -> None:
        self.budget.give(self.bytes, self.holder)


async def take_body(request: web.Request) -> Held | None:
    """Check a matched route's body headers, then read and decode the body once for its handler
    (:func:`read_body`); the budget it holds, to :meth:`~Held.give` back once the request is answered (None:
    nothing held — no body, no budget, a route without a body, or a mounted sub-app's route)."""
    if request.match_info.http_exception is not None or request.method not in BODY_METHODS:
        return None
    if len(request.match_info.apps) > 1:  # a mounted sub-app (the dashboard at /ui: its sign-in form)
        return None
    limits = _limits_of(request)
    limit, length = limits.max_bytes, request.content_length
    if length is not None and length > limit:
        message = f"Content-Length {length} exceeds the limit of {limit} bytes"
        raise HttpError(413, "body_too_large", message)
    if not request.body_exists:
        request[BODY] = b""
        return None
    resource = request.match_info.route.resource
    template = resource.canonical if resource is not None else request.path
    check_content_type(request, accepted_types(request.method, template))
    coding = content_encoding(request)
    budget = limits.budget
    if budget is None:
        request[BODY] = inflate(await _read(request, limits), coding, limit)
        return None
    held, holder = 0, request.get(TOKEN_NAME, ANONYMOUS)
    try:  # the bytes of this body count against the process's budget (and its token's share) until answered
        if length is not None:
            held += budget.take(length, holder)
        raw = await _read(request, limits)
        if length is None:
            held += budget.take(len(raw), holder)
        request[BODY] = decoded = inflate(raw, coding, limit)
        if coding != "identity":
            held += budget.take(len(decoded), holder)
    except BaseException:
        budget.give(held, holder)
        raise
    return Held(budget, held, holder)


async def read_body(request: web.Request) -> bytes:
    """The request body, decoded by :func:`take_body`."""
    body = request.get(BODY)
    return body if body is not None else await request.read()
