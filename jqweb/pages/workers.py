"""The workers page (being built)."""

from __future__ import annotations

from aiohttp import web

__all__ = ["routes"]

routes = web.RouteTableDef()
