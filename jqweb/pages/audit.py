"""The audit log: every dashboard action and sign-in, gateway admin call and CLI repair, newest first;
filtered by who, action (a prefix: ``queue.``, ``worker.stop``) and age (``since=24h``)."""

from __future__ import annotations

import re
from collections.abc import Callable

from aiohttp import web

from jqcore.clock import now_ms
from jqcore.durations import parse_ms
from jqruntime.http import HttpError
from jqruntime.stores import audit
from jqruntime.stores.audit import AuditEntry
from jqweb.context import WEB
from jqweb.narrow import everything
from jqweb.render import page, query_int
from jqweb.routes import Pages
from jqweb.security import READ, principal

__all__ = ["routes"]

routes = Pages()

STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")
CHUNK = 500
"""Entries read at once while looking for those the filters and the token want."""
SCAN_MAX = 20_000
"""Entries one page reads at most looking for them (then it offers the older ones)."""


async def _matching(
    request: web.Request,
    count: int,
    before: str | None,
    since_ms: int | None,
    wanted: Callable[[AuditEntry], bool],
) -> tuple[list[AuditEntry], str | None]:
    """Up to ``count`` entries ``wanted``, newest first, and where older ones start (None: no more)."""
    client, out, cursor, read = request.app[WEB].client, [], before, 0
    while read < SCAN_MAX:
        chunk = await audit.read(client, CHUNK, cursor, since_ms)
        for e in chunk:
            read, cursor = read + 1, e.id
            if wanted(e):
                out.append(e)
                if len(out) == count:
                    return out, cursor
        if len(chunk) < CHUNK:
            return out, None
    return out, cursor


@routes.get("/audit", policy=READ)
async def audit_log(request: web.Request) -> web.Response:
    count = query_int(request, "count", 100, 1, 1000)
    before = request.query.get("before") or None
    if before is not None and not STREAM_ID.fullmatch(before):
        raise HttpError(
            400, "query_invalid", f"before must be an audit entry id (1700000000000-0), not {before!r}"
        )
    who, action = request.query.get("who", "").strip(), request.query.get("action", "").strip()
    since = request.query.get("since", "").strip()
    try:
        since_ms = now_ms() - parse_ms(since) if since else None
    except ValueError as exc:
        raise HttpError(400, "query_invalid", f"since: {exc}") from None
    p = principal(request)  # a token held to some queues sees the entries of its queues only
    every = everything(p)

    def wanted(e: AuditEntry) -> bool:
        return (
            (not who or e.who == who)
            and e.action.startswith(action)
            and (since_ms is None or e.at_ms >= since_ms)  # the stream ids bound the read; at_ms decides
            and e.visible_to(p.allows_queue, every)
        )

    entries, more = await _matching(request, count, before, since_ms, wanted)
    filters = {k: v for k, v in (("who", who), ("action", action), ("since", since)) if v}
    context = {"entries": [e.as_dict() for e in entries], "more": more, "filters": filters}
    return page(request, "audit.html", context)
