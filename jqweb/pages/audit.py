"""The audit log: every dashboard action and sign-in, gateway admin call and CLI repair, newest first."""

from __future__ import annotations

import re

from aiohttp import web

from jqruntime.http import HttpError
from jqruntime.stores import audit
from jqweb.context import WEB
from jqweb.narrow import everything
from jqweb.render import page, query_int
from jqweb.routes import Pages
from jqweb.security import READ, principal

__all__ = ["routes"]

routes = Pages()

STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")


@routes.get("/audit", policy=READ)
async def audit_log(request: web.Request) -> web.Response:
    w = request.app[WEB]
    count = query_int(request, "count", 100, 1, 1000)
    before = request.query.get("before") or None
    if before is not None and not STREAM_ID.fullmatch(before):
        raise HttpError(
            400, "query_invalid", f"before must be an audit entry id (1700000000000-0), not {before!r}"
        )
    entries = await audit.read(w.client, count, before)
    more = entries[-1].id if len(entries) == count else None
    p = principal(request)  # a token held to some queues sees the entries of its queues only
    entries = [e for e in entries if e.visible_to(p.allows_queue, everything(p))]
    return page(request, "audit.html", {"entries": [e.as_dict() for e in entries], "more": more})
