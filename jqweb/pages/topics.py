"""Topics: per topic its partitions (end and committed offsets, lag in records and seconds), the relay
that holds its lock (holder, for how long, fence = Consul's lock index, session), the queues held in its
holding lane (why, how many records, the oldest's age), and the live rate limits per topic and per queue,
each editable. A limit is a Consul KV key the relays watch: a change applies
within one Consul answer, without a restart (``jqrelay.limits``). Pausing (a limit of ``0``) holds the
jobs in Kafka: it is asked for by a button of its own, and confirmed first whichever way it comes
(``confirm=pause``), so a 0 typed into the limit's box pauses nothing by itself."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from jqcore.rates import parse_rate
from jqcore.routing import QueueUnrouted, RoutingSettings
from jqruntime.authz import Policy, Touch, path_queue
from jqruntime.http import HttpError
from jqruntime.tokens import Token
from jqweb.context import WEB, Web
from jqweb.narrow import everything, narrow, own_topics
from jqweb.overview import collect, held_rows
from jqweb.pages.jobs import confirm_page
from jqweb.render import act, form, page
from jqweb.routes import Pages
from jqweb.security import READ, Principal, principal

__all__ = ["describe_rate", "routes", "topic_of"]

routes = Pages()


def describe_rate(text: str) -> dict[str, Any]:
    """A limit's KV text as the page shows it: ``{"text", "rate", "state"}`` (state ``unlimited``,
    ``paused``, ``limited`` or ``invalid``: the relays ignore an invalid value and keep the last one)."""
    try:
        rate = parse_rate(text.strip())
    except ValueError:
        return {"text": text, "rate": None, "state": "invalid"}
    state = "unlimited" if rate is None else "paused" if rate == 0 else "limited"
    return {"text": text, "rate": rate, "state": state}


def topic_of(routing: RoutingSettings, queue: str) -> str | None:
    """The topic ``queue`` is produced to, None when no route takes it."""
    try:
        return routing.route(queue)[0]
    except QueueUnrouted:
        return None


def _problem(part: Any) -> str | None:
    return str(part["error"]) if isinstance(part, dict) and "error" in part else None


def _topic_rows(snap: dict[str, Any], topics: list[str], held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kafka = snap.get("kafka") if isinstance(snap.get("kafka"), list) else []
    locks = snap.get("locks") if isinstance(snap.get("locks"), list) else []
    rates = snap.get("rates") if _problem(snap.get("rates")) is None else {}
    by_lock = {r["topic"]: r for r in locks or []}
    rows = []
    for topic in topics:
        parts = [r for r in kafka or [] if r["topic"] == topic]
        lags = [r.get("lag_s") or 0.0 for r in parts]
        rows.append(
            {
                "topic": topic,
                "partitions": parts,
                "lag": sum(r.get("lag", 0) for r in parts),
                "lag_s": max(lags) if lags else 0.0,
                "lock": by_lock.get(topic),
                "rate": describe_rate((rates or {}).get("topics", {}).get(topic, "")),
                "held": [h for h in held if h["topic"] == topic],
            }
        )
    return rows


async def _queue_rates(
    w: Web, p: Principal, topics: list[str], set_rates: dict[str, str], held: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every queue the token may see routed to one of ``topics``, with a limit set or held, its topic, limit
    and holding lane row (:func:`jqweb.overview.held_rows`, None when not held)."""
    wanted, lanes = set(topics), {h["queue"]: h for h in held}
    out = []
    every = set(await w.engine.reads.queues()) | set(set_rates) | set(lanes)
    for queue in sorted(q for q in every if p.allows_queue(q)):
        topic = topic_of(w.sources.routing, queue)
        if topic in wanted or queue in set_rates or queue in lanes:
            rate = describe_rate(set_rates.get(queue, ""))
            out.append({"queue": queue, "topic": topic, "rate": rate, "held": lanes.get(queue)})
    return out


@routes.get("/topics", policy=READ)
async def topics_page(request: web.Request) -> web.Response:
    w, p = request.app[WEB], principal(request)
    topics = own_topics(p, w.sources.routing, await w.engine.reads.queues(), w.sources.topics())
    snap = narrow(await collect(w.sources, w.client, parts=("kafka", "locks", "rates")), p, topics)
    rates = snap.get("rates")
    set_rates = dict(rates.get("queues", {})) if _problem(rates) is None and isinstance(rates, dict) else {}
    shown = set(topics)
    held = [h for h in await held_rows(w.client) if h["topic"] in shown and p.allows_queue(h["queue"])]
    context = {
        "topics": _topic_rows(snap, topics, held),
        "queue_rates": await _queue_rates(w, p, topics, set_rates, held),
        "problems": {p: _problem(snap.get(p)) for p in ("kafka", "locks", "rates") if _problem(snap.get(p))},
        "at": snap.get("at"),
        "topic_admin": everything(p),  # a topic's limit holds every queue on it: not a scoped admin's
    }
    return page(request, "topics.html", context)


def _rate_field(fields: dict[str, str]) -> tuple[str, float | None]:
    """The posted ``rate`` (stripped) and its value; 400 ``rate_invalid`` when it is no rate."""
    text = fields.get("rate", "").strip()
    try:
        return text, parse_rate(text)
    except ValueError:
        raise HttpError(
            400,
            "rate_invalid",
            f"rate must be empty (unlimited), 0 (paused) or jobs per second, not {text[:40]!r}",
        ) from None


def _pause_unconfirmed(
    request: web.Request, rate: float | None, fields: dict[str, str], what: str, url: str, back: str
) -> web.Response | None:
    """A pause (rate 0) not confirmed yet: the confirmation page (JSON: its context) instead of the
    change; None when the request changes no pause or confirms it."""
    if rate != 0 or fields.get("confirm") == "pause":
        return None
    return confirm_page(
        request,
        action="pause",
        question=f"Pause relaying {what}? Its jobs stay in Kafka until it is resumed.",
        count=1,
        matched=None,
        url=url,
        fields=[("rate", "0")],
        next_url=fields.get("next") or back,
        button="Yes, pause relaying",
        confirm="pause",
    )


def _said(rate: float | None) -> str:
    return "unlimited" if rate is None else "paused" if rate == 0 else f"{rate:g} jobs/s"


async def _write_rate(w: Web, key: str, text: str) -> int:
    if text:
        await w.consul.kv.put(key, text)
    else:
        await w.consul.kv.delete(key)
    return 0


async def topic_rate(_: web.Request, __: Token) -> Iterable[Touch]:
    """A topic's rate limit holds every queue routed to it: only an admin of every queue sets it."""
    return [Touch("every_queue", where="a topic's rate limit holds every queue routed to it")]


@routes.post("/topics/{topic}/rate", policy=Policy("admin", (topic_rate,)))
async def set_topic_rate(request: web.Request) -> web.Response:
    w = request.app[WEB]
    topic = request.match_info["topic"]
    if topic not in w.sources.topics():
        raise HttpError(404, "topic_not_found", f"no topic {topic!r} among the relays' topics")
    fields = await form(request)
    text, rate = _rate_field(fields)
    back = f"{w.base}/topics"
    asked = _pause_unconfirmed(
        request, rate, fields, f"topic {topic}", f"/topics/{quote(topic, safe='')}/rate", back
    )
    if asked is not None:
        return asked
    return await act(
        request,
        "rate.topic",
        f"{topic}={text or 'unlimited'}",
        lambda: _write_rate(w, w.sources.relay.rate_key(topic), text),
        done=lambda _: f"topic {topic}: {_said(rate)} (the relay applies it live)",
        back=f"{w.base}/topics",
        next_url=fields.get("next"),
    )


async def _queue_known(w: Web, queue: str) -> bool:
    """A queue the engine knows, or one with a limit set (so a limit can be lifted after the queue went)."""
    if queue in await w.engine.reads.queues():
        return True
    _, entry = await w.consul.kv.get(w.sources.relay.queue_rate_key(queue))
    return entry is not None


@routes.post("/queues/{queue}/rate", policy=Policy("admin", (path_queue,)))
async def set_queue_rate(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue = request.match_info["queue"]
    if "/" in queue or not await _queue_known(w, queue):
        raise HttpError(404, "queue_not_found", f"no queue {queue!r}")
    fields = await form(request)
    text, rate = _rate_field(fields)
    back = f"{w.base}/topics"
    url = f"/queues/{quote(queue, safe='')}/rate"
    asked = _pause_unconfirmed(request, rate, fields, f"queue {queue}", url, back)
    if asked is not None:
        return asked
    return await act(
        request,
        "rate.queue",
        f"{queue}={text or 'unlimited'}",
        lambda: _write_rate(w, w.sources.relay.queue_rate_key(queue), text),
        done=lambda _: f"queue {queue}: {_said(rate)} at the relays (applied live)",
        back=f"{w.base}/topics",
        next_url=fields.get("next"),
    )
