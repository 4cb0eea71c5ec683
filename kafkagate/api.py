"""The gateway's route registry: every route is declared once, beside its handler, with its contract.

Each module of routes makes an :class:`Api` and decorates its handlers with it; the app adds those tables
to its router (``kafkagate.app.TABLES``) and :mod:`kafkagate.openapi` generates ``/openapi.json`` from the
same tables, so a route cannot be served without being documented (``tests/gate/test_contract.py`` also
compares the app's router with the document). Adding a route::

    @routes.post(
        "/v1/queues/{queue}/jobs/{id}/progress",
        policy=Policy("work", (path_queue,)),  # the scope and what it touches (jqruntime.authz)
        summary="record a held job's progress",
        body=ProgressBody,           # the pydantic model the handler parses (parse_model), or None
        answer=ProgressReply,        # the pydantic model of the success body, with an example
        errors={404: "job_not_found: ...", 409: "lease_stale: ..."},  # what only this route answers
    )
    async def progress(request: web.Request) -> web.Response: ...

The statuses every route shares are added for it: 401/403/429/503 for authenticated routes
(:data:`AUTH_ERRORS`), 400/413/415 for methods that take a body (:data:`BODY_ERRORS`), 400 for a bad path
parameter. The scope a route needs and what it touches are its :class:`~jqruntime.authz.Policy`, the one the
gateway's door (:mod:`kafkagate.auth`) checks before its handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_routedef import AbstractRouteDef
from pydantic import BaseModel

from jqruntime.authz import Policy

__all__ = ["AUTH_ERRORS", "BODY_ERRORS", "Api", "Operation", "Param"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Schema = type[BaseModel] | Mapping[str, Any]
"""A body's schema: a pydantic model, or a JSON Schema for a body another library defines."""

AUTH_ERRORS: Mapping[int, str] = {
    401: "unauthenticated, token_invalid: no bearer token, or one not accepted",
    403: "scope_missing, queue_forbidden, kind_forbidden: the token (named) may not do this",
    429: "rate_limited: the token is over its rate; gateway_busy: this process is saturated, or the token"
    " holds its share of it; auth_throttled: too many tokens not accepted from this client (Retry-After)",
    503: "backend_unavailable: Redis, Kafka or Consul did not answer; retrying may succeed (Retry-After)",
}
BODY_ERRORS: Mapping[int, str] = {
    400: "body_undecodable, body_not_json, body_invalid: the body cannot be read (each bad field named)",
    413: "body_too_large: over the body limit (JOBQ_GATE_MAX_BODY_BYTES) on the wire or decompressed",
    415: "content_type_unsupported, content_encoding_unsupported: not JSON, not UTF-8, an unknown coding",
}
PATH_ERRORS: Mapping[str, str] = {
    "queue": "queue_invalid",
    "id": "id_invalid",
    "kind": "kind_invalid",
    "graph": "graph_id_invalid",
    "name": "cron_invalid, switch_invalid",
}
"""The code of a path parameter that is not a valid name."""
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True)
class Param:
    """A query or header parameter of an operation."""

    name: str
    where: str  # "query" | "header"
    schema: Mapping[str, Any]
    description: str = ""


@dataclass(frozen=True, slots=True)
class Operation:
    """One route's contract: what it takes, what it answers on success and the errors only it answers."""

    method: str
    path: str
    handler: Handler
    summary: str
    answer: type[BaseModel] | None
    """The success body's model (None: not JSON, ``media`` says what)."""
    policy: Policy
    """The scope it needs and what it touches (:meth:`Api.route` refuses a route without one)."""
    ok: int = 200
    body: Schema | None = None
    body_example: Any = None
    errors: Mapping[int, str] = field(default_factory=dict)
    params: tuple[Param, ...] = ()
    media: str = "application/json"
    also: Mapping[int, type[BaseModel]] = field(default_factory=dict)
    """Other success statuses and their bodies (e.g. a replay made before answers 200, a new one 202)."""
    tag: str = ""
    operation_id: str = ""
    """The operation's name (a generated client's function): its handler's name unless given."""
    """The group it is listed in (a generated client's module): its table's, else its handler's module."""

    @property
    def open(self) -> bool:
        """Served without a bearer token (probes, metrics, this document; signed callbacks)."""
        return not self.policy.checked


class Api:
    """A table of routes with their contracts; iterable as aiohttp route definitions (``add_routes``)."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self._table = web.RouteTableDef()
        self.operations: list[Operation] = []

    def __iter__(self) -> Iterator[AbstractRouteDef]:
        return iter(self._table)

    def route(self, method: str, path: str, **contract: Any) -> Callable[[Handler], Handler]:
        """Declare ``method path`` (``contract``: the fields of :class:`Operation`) and route it."""

        missing = [name for name in ("policy", "summary", "answer") if name not in contract]
        if missing:  # a route must be authorized and documented to be served: see this module's docstring
            raise TypeError(f"{method} {path}: declare its {', '.join(missing)} (kafkagate/api.py)")

        def register(handler: Handler) -> Handler:
            tag = self.tag or handler.__module__.rpartition(".")[2]
            contract.setdefault("operation_id", handler.__name__)
            self.operations.append(Operation(method, path, handler, **contract, tag=tag))
            self._table.route(method, path)(handler)
            return handler

        return register

    def get(self, path: str, **contract: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", path, **contract)

    def post(self, path: str, **contract: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", path, **contract)

    def put(self, path: str, **contract: Any) -> Callable[[Handler], Handler]:
        return self.route("PUT", path, **contract)

    def patch(self, path: str, **contract: Any) -> Callable[[Handler], Handler]:
        return self.route("PATCH", path, **contract)

    def delete(self, path: str, **contract: Any) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path, **contract)


def statuses(op: Operation) -> dict[int, str]:
    """Every error status ``op`` can answer, with the codes behind each (shared ones first)."""
    out: dict[int, list[str]] = {}

    def add(status: int, why: str) -> None:
        out.setdefault(status, []).append(why)

    if not op.open:
        for status, why in AUTH_ERRORS.items():
            add(status, why)
    params = [p for p in PATH_ERRORS if "{" + p + "}" in op.path]
    if params:
        add(400, ", ".join(PATH_ERRORS[p] for p in params) + ": a path parameter that is not a valid name")
    if op.method in BODY_METHODS:
        for status, why in BODY_ERRORS.items():
            add(status, why)
    for status, why in op.errors.items():
        add(status, why)
    return {status: "; ".join(dict.fromkeys(whys)) for status, whys in sorted(out.items())}
