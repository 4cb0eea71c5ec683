"""Pages and answers: templates (Jinja2, autoescaped), JSON for clients that ask for it, errors, the
flash message after an action, and the one way an action runs (admin check, audit record, redirect).

Every page handler builds a context dict and calls :func:`page`: a browser gets HTML, a client sending
``Accept: application/json`` gets the same context as JSON (so the HTTP tests and scripts read exactly what
the page shows). A ``HX-Request`` (htmx) may ask for a fragment: :func:`page` renders ``partial`` then.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

import orjson
from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from jqcore.clock import now_ms
from jqcore.durations import format_age, format_ms
from jqcore.errors import JobqError
from jqcore.log import get_logger
from jqruntime.authz import TOUCHED, queues_of
from jqruntime.http import ErrorAnswer, HttpError
from jqruntime.stores.audit import AuditEntry
from jqweb.context import WEB
from jqweb.redirect import safe_next
from jqweb.security import principal

__all__ = [
    "PAGE_SIZE",
    "REFRESH_S",
    "act",
    "env",
    "form",
    "page",
    "query_int",
    "render_error",
    "wants_json",
]

log = get_logger("jqweb")

FLASH = "jobq_flash"
REFRESH_S = 5
"""How often the live parts of a page reload (seconds)."""
PAGE_SIZE = 50
"""Rows per page of job lists (the jobs page takes ``?limit=`` up to 500)."""


def _clock(ms: int | float | None) -> Markup:
    """A time as ``<time>`` (UTC; ``app.js`` shows it in the browser's zone when the reader chose local
    time in the header), its age as the title."""
    if not ms:
        return Markup("")
    at = datetime.fromtimestamp(ms / 1000, UTC)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        at.isoformat(timespec="milliseconds"), _ago(ms), at.strftime("%Y-%m-%d %H:%M:%S")
    )


def _ago(ms: int | float | None) -> str:
    """``3m12s ago`` / ``in 5h4m`` (``""`` for no time)."""
    if not ms:
        return ""
    delta = time.time() * 1000 - ms
    return f"in {format_age(-delta)}" if delta < 0 else f"{format_age(delta)} ago"


def _duration(ms: int | float | None) -> str:
    """A configured duration, exactly (``1d``, ``1h30m``, ``250ms``); ``""`` for none."""
    return "" if ms is None else format_ms(int(ms))


def _age(ms: int | float | None) -> str:
    """A measured duration, roughly (``4.2s``, ``3m12s``); ``—`` for none."""
    return "—" if ms is None else format_age(ms)


def _priority(prio: int | None, enqueued_at: int | None) -> str:
    """A job's priority (lower runs first) as people read it: its enqueue time is the default (FIFO); a
    time is a deadline (earliest deadline first), said against the enqueue; a small number stands before
    every job with a time."""
    if prio is None:
        return ""
    if enqueued_at is not None and prio == enqueued_at:
        return "default (FIFO: its enqueue time)"
    if prio >= 10**11:  # a time in ms (past 1973): a deadline, earliest first
        at = datetime.fromtimestamp(prio / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        if enqueued_at is None:
            return f"deadline {at} UTC"
        delta = prio - enqueued_at
        side = "after" if delta >= 0 else "before"
        return f"deadline {at} UTC ({format_age(abs(delta))} {side} its enqueue)"
    return f"{prio} (a number: before every job ordered by time)"


def _pretty(value: Any) -> str:
    """JSON shown exactly: indented, keys in their order, non-ASCII kept (escaped by autoescape). Text
    that is not JSON, or nests too deep to indent (a result of ``[[[...]]]``), is shown as it is."""
    raw = value
    try:
        if isinstance(value, bytes | str):
            value = json.loads(value)
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (ValueError, RecursionError):
        if isinstance(raw, bytes):
            return raw.decode(errors="replace")
        return raw if isinstance(raw, str) else "(nested too deep to show)"


def _json_attr(value: Any) -> Markup:
    """Data for a ``<script type="application/json">`` block: ``<``, ``>`` and ``&`` escaped as unicode so
    no text inside can close the element (the block is never executed: CSP allows no inline script)."""
    text = orjson.dumps(value).decode()
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)


def _count(n: int | float | None) -> str:
    """A count with thousands separators (``—`` for none)."""
    return "—" if n is None else f"{n:,}"


def _sparkline(points: list[float] | None, width: int = 120, height: int = 24) -> Markup:
    """An inline SVG polyline of ``points`` (numbers only reach the markup: nothing to escape)."""
    values = [float(p or 0) for p in points or []]
    if len(values) < 2:
        return Markup("")
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}" for i, v in enumerate(values)
    )
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'aria-hidden="true"><polyline points="{coords}"/></svg>'
    )


def _make_env() -> Environment:
    e = Environment(
        loader=PackageLoader("jqweb", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    e.filters.update(clock=_clock, ago=_ago, pretty=_pretty, json_data=_json_attr, spark=_sparkline)
    e.filters.update(duration=_duration, age=_age, priority=_priority, count=_count)
    e.filters["q"] = lambda v: quote(str(v), safe="")
    return e


env = _make_env()


def wants_json(request: web.Request) -> bool:
    return request.headers.get("Accept", "").startswith("application/json")


def _take_flash(request: web.Request) -> str | None:
    raw = request.cookies.get(FLASH)
    return unquote(raw)[:500] if raw else None


def page(
    request: web.Request,
    template: str,
    context: Mapping[str, Any],
    *,
    partial: str | None = None,
    status: int = 200,
) -> web.Response:
    """The page (or, for htmx asking for it, the ``partial`` fragment), or its context as JSON."""
    if wants_json(request):
        return web.Response(
            body=orjson.dumps(context, default=str), status=status, content_type="application/json"
        )
    w = request.app[WEB]
    fragment = partial is not None and request.headers.get("HX-Request") == "true"
    p = principal(request)
    flash = None if fragment else _take_flash(request)
    html = env.get_template(partial if fragment and partial else template).render(
        **context,
        base=w.base,
        me=p,
        flash=flash,
        refresh_s=REFRESH_S,
        path=request.path,
        path_qs=request.path_qs,
    )
    response = web.Response(text=html, status=status, content_type="text/html")
    if flash is not None:
        response.del_cookie(FLASH, path=w.base or "/")
    return response


_SCALARS = (str, int, float, bool, type(None))


def _field_text(name: str, value: Any) -> str:
    """A JSON field as a form field's text: a scalar, or a list of scalars joined by newlines (a form's
    repeated field); anything nested is a 400 (no action takes one, and turning a deep one into text
    would recurse as deep)."""
    if isinstance(value, _SCALARS):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value):
        return "\n".join(map(str, value))
    message = f"field {name[:64]!r} must be a string, a number, a boolean, null or a list of those"
    raise HttpError(400, "body_invalid", message)


async def form(request: web.Request) -> dict[str, str]:
    """The posted form (or JSON object) as strings; repeated fields (a JSON list) joined by newlines. JSON is
    parsed with orjson (nesting bounded: too deep is a 400 ``body_invalid`` like any bad JSON, never a
    500), and only an object of scalars or lists of scalars is taken."""
    if request.content_type == "application/json":
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise HttpError(400, "body_invalid", "the body is not JSON (or nests too deep)") from None
        if not isinstance(body, dict):
            raise HttpError(400, "body_invalid", "the body must be a JSON object")
        return {k: _field_text(k, v) for k, v in body.items()}
    data = await request.post()
    out: dict[str, str] = {}
    for k in data:
        out[k] = "\n".join(str(v) for v in data.getall(k))
    return out


def query_int(request: web.Request, name: str, default: int, low: int = 0, high: int = 10**12) -> int:
    raw = request.query.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, "query_invalid", f"{name} must be an integer, not {raw!r}") from None
    if not low <= value <= high:
        raise HttpError(400, "query_invalid", f"{name} must be {low}..{high}, not {value}")
    return value


async def act(
    request: web.Request,
    action: str,
    target: str,
    run: Callable[[], Awaitable[int]],
    *,
    done: Callable[[int], str],
    back: str,
    next_url: str | None = None,
) -> web.Response:
    """Run an admin action: check the token, run it (``run`` returns how many jobs it changed), write the
    audit record (also when it failed), then redirect to ``next_url`` (or ``back``) with a flash message,
    or answer JSON ``{"ok", "action", "count", "message"}``."""
    who = principal(request)  # an admin of what the action touches: the door checked (jqweb.security)
    w = request.app[WEB]
    outcome, count = "ok", 0
    try:
        count = await run()
    except JobqError as exc:
        outcome = f"{exc.code}: {exc.message}"
        raise
    except Exception as exc:  # recorded as failed too (the error middleware answers it)
        outcome = f"error: {type(exc).__name__}: {exc}"
        raise
    finally:
        queues = queues_of(request.get(TOUCHED, []))
        entry = AuditEntry(now_ms(), who.who, action, target, count, outcome, token=who.who, queues=queues)
        await w.audit.record(entry)
        log.info("dashboard action", who=who.who, action=action, target=target, count=count, outcome=outcome)
    message = done(count)
    if wants_json(request):
        body = {"ok": True, "action": action, "target": target, "count": count, "message": message}
        return web.Response(body=orjson.dumps(body), content_type="application/json")
    response = web.HTTPSeeOther(safe_next(w.base, next_url, back))
    response.set_cookie(FLASH, quote(message), path=w.base or "/", httponly=True, samesite="Strict")
    raise response


def render_error(request: web.Request, answer: ErrorAnswer) -> web.Response:
    """An error as the dashboard shows it (:func:`jqruntime.http.error_middleware` decides status and code):
    the one JSON error body to a client asking for JSON, else the error page naming the code."""
    if wants_json(request):
        return answer.response()
    w = request.app[WEB]
    html = env.get_template("error.html").render(
        status=answer.status,
        code=answer.code,
        message=answer.message,
        base=w.base,
        me=None,
        flash=None,
        path=request.path,
    )
    response = web.Response(text=html, status=answer.status, content_type="text/html", headers=answer.headers)
    response.headers["X-Jobq-Error"] = answer.code
    return response
