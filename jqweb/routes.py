"""The dashboard's route tables: every page and action is declared with its policy (``jqruntime.authz``:
the scope it needs and what it touches), which the dashboard's door (:mod:`jqweb.security`) checks before
the handler runs. A route declared without one is a ``TypeError`` at import: it cannot be served unchecked."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from aiohttp import web
from aiohttp.web_routedef import AbstractRouteDef

from jqruntime.authz import Handler, Policy

__all__ = ["Pages"]


class Pages:
    """A page module's routes, each with its policy; iterable as aiohttp route definitions."""

    def __init__(self) -> None:
        self._table = web.RouteTableDef()
        self.policies: dict[Handler, Policy] = {}

    def __iter__(self) -> Iterator[AbstractRouteDef]:
        return iter(self._table)

    def route(
        self, method: str, path: str, *, policy: Policy, name: str | None = None
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.policies[handler] = policy
            self._table.route(method, path, **({"name": name} if name else {}))(handler)
            return handler

        return register

    def get(self, path: str, *, policy: Policy, name: str | None = None) -> Callable[[Handler], Handler]:
        return self.route("GET", path, policy=policy, name=name)

    def post(self, path: str, *, policy: Policy, name: str | None = None) -> Callable[[Handler], Handler]:
        return self.route("POST", path, policy=policy, name=name)
