"""What ``jobq status`` prints: a pure function of the status document (:func:`jqweb.overview.collect`) and
the width it is printed at, so every header and value stays readable at 80 columns (a default terminal, or
piped) as at 200.

Each table is laid out the widest way that fits (:func:`fit`): its full headers; else abbreviated headers
with a legend under the table; else that table cut into a few narrower ones, each repeating the first
column (the queue, the topic); else one block per row, ``header value`` pairs packed into lines (a
vertical layout). Nothing is ever cut to ``…``: a table that does not fit whole is not printed as a table.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Col", "fit", "render"]

GAP = "   "
"""Between the ``header value`` pairs of a line of the vertical layout (and the entries of a legend)."""


@dataclass(frozen=True)
class Col:
    name: str
    short: str | None = None
    """The abbreviation shown (with a legend) when the full headers do not fit."""
    left: bool = False
    """Names and text are left-aligned, numbers right-aligned."""


def _table(cols: Sequence[Col], rows: Sequence[Sequence[str]], short: bool) -> Table:
    t = Table()
    for c in cols:
        t.add_column(
            c.short if short and c.short else c.name, justify="left" if c.left else "right", no_wrap=True
        )
    for row in rows:
        t.add_row(*row)
    return t


def _needs(t: Table) -> int:
    """The columns ``t`` takes with no cell wrapped or cut."""
    wide = Console(width=100_000, file=io.StringIO(), color_system=None)
    return Measurement.get(wide, wide.options, t).maximum


def _packed(items: Sequence[str], width: int, indent: str = "") -> list[Text]:
    """``items`` (markup) joined by :data:`GAP` into lines of at most ``width`` cells, never splitting an
    item (one longer than a line gets a line of its own, folded by the console)."""
    lines: list[Text] = []
    line = Text(indent)
    for item in items:
        text = Text.from_markup(item)
        if line.cell_len > len(indent) and line.cell_len + len(GAP) + text.cell_len > width:
            lines.append(line)
            line = Text(indent)
        if line.cell_len > len(indent):
            line.append(GAP)
        line.append_text(text)
    if line.cell_len > len(indent):
        lines.append(line)
    return lines


MAX_SPLIT = 3
"""At most this many tables side by side in meaning (each repeating the first column) before the vertical
layout is used instead."""


def _split(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[Table] | None:
    """The abbreviated table cut into the fewest tables (each keeping the first column, the others in
    order) that each fit ``width``; None when a column does not fit beside the first or more than
    :data:`MAX_SPLIT` are needed."""
    chunks: list[list[int]] = []
    for i in range(1, len(cols)):
        if chunks and _needs(_part(cols, rows, [*chunks[-1], i])) <= width:
            chunks[-1].append(i)
        elif _needs(_part(cols, rows, [i])) <= width:
            chunks.append([i])
        else:
            return None
    if len(chunks) > MAX_SPLIT:
        return None
    return [_part(cols, rows, chunk) for chunk in chunks]


def _part(cols: Sequence[Col], rows: Sequence[Sequence[str]], which: Sequence[int]) -> Table:
    keep = [0, *which]
    return _table([cols[i] for i in keep], [[row[i] for i in keep] for row in rows], short=True)


def fit(title: str, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> Group:
    """``rows`` under ``cols`` at ``width``: the full headers, else the abbreviations (and their legend),
    else the abbreviations in up to :data:`MAX_SPLIT` tables that each repeat the first column, else one
    block per row (its first cell, then ``header value`` for the others)."""
    heading = Text.from_markup(f"[bold]{title}[/]")
    full = _table(cols, rows, short=False)
    if _needs(full) <= width:
        return Group(heading, full)
    legend = _packed([f"[dim]{c.short} = {c.name}[/]" for c in cols if c.short], width)
    short = _table(cols, rows, short=True)
    if _needs(short) <= width:
        return Group(heading, short, *legend)
    tables = _split(cols, rows, width) if rows else None
    if tables is not None:
        return Group(heading, *tables, *legend)
    blocks: list[RenderableType] = [heading]
    for row in rows:
        blocks.append(Text.from_markup(f"{cols[0].name} [bold]{row[0]}[/]"))
        pairs = [f"{c.name} {v}" for c, v in zip(cols[1:], row[1:], strict=True) if v != ""]
        blocks += _packed(pairs, width, indent="  ")
    return Group(*blocks)


# ---- the parts of the status document ---------------------------------------------------------------


def render(s: dict[str, Any], width: int = 80) -> Group:
    """Every part of the document ``s`` laid out for ``width`` columns."""
    return Group(
        *_kafka(s.get("kafka"), width),
        *_locks(s.get("locks"), width),
        *_redis(s.get("redis"), width),
        *_cron(s.get("cron"), width),
        _history_line(s.get("history")),
    )


def _kafka(kafka: Any, width: int) -> list[RenderableType]:
    if not isinstance(kafka, list):
        return [f"[red]Kafka unreachable:[/] {escape(str(kafka))}"]
    cols = [Col("topic", left=True), Col("partition", "p"), Col("end"), Col("committed", "commit")]
    cols += [Col("lag"), Col("lag s")]
    keys = ("end", "committed", "lag", "lag_s")
    rows = [[escape(r["topic"]), _text(r.get("partition")), *(_text(r.get(k)) for k in keys)] for r in kafka]
    out: list[RenderableType] = [fit("Kafka → relay (lag per partition)", cols, rows, width)]
    return out + [f"[red]{escape(r['topic'])}: {escape(r['problem'])}[/]" for r in kafka if r.get("problem")]


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _locks(locks: Any, width: int) -> list[RenderableType]:
    if not isinstance(locks, list):
        return [f"[red]Relay locks unreadable (Consul):[/] {escape(str(locks))}"]
    cols = [Col("topic", left=True), Col("holder", left=True), Col("held for s", "held s"), Col("fence")]
    rows = []
    for r in locks:
        holder = escape(r["holder"] or "") or "[red]nobody[/]"
        rows.append([escape(r["topic"]), holder, _text(r["since_s"]), _text(r["fence"])])
    return [fit("Relay locks (Consul)", cols, rows, width)]


QUEUE_COLS = [
    Col("queue", left=True),
    Col("pending", "pend"),
    Col("delayed", "delay"),
    Col("far"),
    Col("running", "run"),
    Col("blocked", "blk"),
    Col("dead"),
    Col("finished", "fin"),
    Col("handed back", "back"),
    Col("dup dropped", "dup"),
    Col("oldest pending s", "age s"),
    Col("past due", "due"),
    Col("events unshipped", "ev"),
    Col("events dropped", "ev drop"),
]


def _events_cell(q: dict[str, Any]) -> str:
    """Unshipped events against the queue's cap (yellow past half: Kafka or the shippers are behind)."""
    cap, waiting = q.get("events_cap", 0), q.get("events_backlog", 0)
    if not cap:
        return "off"
    text = f"{waiting}/{cap}"
    return f"[yellow]{text}[/]" if waiting * 2 >= cap else text


def _warn(value: Any, colour: str) -> str:
    return f"[{colour}]{value}[/]" if value else "0"


def queue_cells(q: dict[str, Any]) -> list[str]:
    """One queue's row under :data:`QUEUE_COLS`."""
    age = q["oldest_pending_age_ms"]
    return [
        escape(q["queue"]),
        str(q["pending"]),
        str(q["delayed"]),
        str(q.get("far", 0)),
        str(q["running"]),
        str(q["blocked"]),
        _warn(q["errored"], "red"),
        str(q["finished"]),
        _warn(q.get("handed_back"), "yellow"),
        str(q.get("duplicates", 0)),
        f"{age / 1000:.1f}" if age is not None else "",
        _warn(q.get("past_due"), "red"),
        _events_cell(q),
        _warn(q.get("events_dropped"), "red"),
    ]


def _redis(redis: Any, width: int) -> list[RenderableType]:
    if not (isinstance(redis, dict) and "queues" in redis):
        return [f"[red]Redis unreachable:[/] {escape(str(redis))}"]
    seen = (
        f"gateways: {len(redis['gateways'])}   worker pools: {len(redis['workers'])}   dispatchers: "
        f"{len(redis.get('dispatchers', []))}   http workers: {len(redis.get('http_workers', []))}   "
        f"dashboards: {len(redis.get('dashboards', []))}"
    )
    parts: list[RenderableType] = [
        fit("Queues (Redis)", QUEUE_COLS, [queue_cells(q) for q in redis["queues"]], width),
        seen,
    ]
    flagged = [c for c in redis.get("claimers", []) if c["silent"] or not c["alive"]]
    if flagged:
        parts.append(_flagged(flagged, width))
    if redis.get("held"):
        parts.append(_held(redis["held"], width))
    if redis.get("switches"):
        parts.append(_switches(redis["switches"], width))
    parts.append(_schedulers(redis.get("schedulers", {}), width))
    parts.append(_canary(redis["canary"], width))
    return parts


def _held(held: list[dict[str, Any]], width: int) -> RenderableType:
    """The queues stepping aside into their topics' holding lanes (Kafka), and why."""
    cols = [Col("queue", left=True), Col("topic", left=True), Col("why", left=True), Col("in lane", "lane")]
    cols += [Col("oldest s", "age s"), Col("drained/s", "out/s")]
    rows = [
        [
            escape(h["queue"]),
            escape(h["topic"]),
            f"[yellow]{escape(str(h['reason']))}[/]",
            str(h["records"]),
            _text(h.get("oldest_s")),
            _text(h.get("drained_per_s")),
        ]
        for h in held
    ]
    return fit("Held queues (relay holding lanes, Kafka)", cols, rows, width)


def _flagged(claimers: list[dict[str, Any]], width: int) -> RenderableType:
    """The claiming processes judged silent on a queue (red) or that stopped beating without leaving."""
    cols = [Col("role", left=True), Col("worker", left=True), Col("silent on", left=True)]
    cols += [Col("idle s"), Col("heartbeat s", "beat s"), Col("busy")]
    rows = []
    for c in claimers:
        idle = max((c["idle_s"][q] for q in c["silent"]), default=None)
        beat = f"{c['beat_age_s']:.0f}" if c["alive"] else f"[red]{c['beat_age_s']:.0f}[/]"
        busy = f"{c['busy']}/{c['slots']}" if c["slots"] is not None else ""
        silent = f"[red]{escape(', '.join(c['silent']))}[/]" if c["silent"] else ""
        rows.append([c["role"], escape(c["name"]), silent, _text(idle and f"{idle:.0f}"), beat, busy])
    return fit(
        "[yellow]Workers flagged[/] (silent: claimed nothing for a while its queue waited; or no heartbeat)",
        cols,
        rows,
        width,
    )


def _switches(switches: list[dict[str, Any]], width: int) -> RenderableType:
    cols = [Col(n, left=True) for n in ("name", "action", "queue", "kind", "meta", "by")]
    rows = [
        [
            escape(str(v))
            for v in (
                sw["name"],
                sw["action"],
                sw["queue"],
                sw["kind"] or "*",
                ", ".join(f"{k}={v}" for k, v in sw["meta"].items()),
                sw.get("by", ""),
            )
        ]
        for sw in switches
    ]
    return fit("[yellow]Kill switches in force[/] (`jobq switch lift NAME`)", cols, rows, width)


def _schedulers(schedulers: dict[str, dict[str, str]], width: int) -> RenderableType:
    if not schedulers:
        return (
            "[red]No scheduler instance is alive:[/] delayed jobs, retries and expired leases wait "
            "(start `jobq scheduler`)."
        )
    cols = [Col("group", left=True), Col("instance", left=True), Col("keeps", left=True)]
    rows = [
        [escape(group), escape(name), escape(note)]
        for group, members in schedulers.items()
        for name, note in members.items()
    ]
    return fit("Schedulers (instances per group, heartbeats in Redis)", cols, rows, width)


def _canary(canary: dict[str, dict[str, Any]], width: int) -> RenderableType:
    cols = [Col("partition", left=True), Col("health", left=True), Col("total ms", "total")]
    cols += [
        Col("gate ms", "gate"),
        Col("relay ms", "relay"),
        Col("worker ms", "worker"),
        Col("age s", "age"),
    ]
    rows = []
    for part, r in canary.items():
        ms = r.get("ms") or {}
        health = "[green]ok[/]" if r.get("ok") else f"[red]{escape(str(r.get('problem')))}[/]"
        age = f"{time.time() - r['at'] / 1000:.0f}" if "at" in r else ""
        times = [str(ms.get(k, "")) for k in ("total", "gate", "relay", "worker")]
        rows.append([escape(part), health, *times, age])
    return fit("Canary (last heartbeat per partition)", cols, rows, width)


def _cron(cron: Any, width: int) -> list[RenderableType]:
    if not isinstance(cron, list):
        return [f"[red]Cron schedules unreadable (Consul):[/] {escape(str(cron))}"]
    cols = [Col(n, left=True) for n in ("name", "schedule", "queue", "state")]
    cols += [Col("last run", "last", left=True), Col("next run", "next", left=True), Col("fires")]
    cols.append(Col("dropped", "drop"))
    rows = [
        [
            escape(r["name"]),
            escape(r["schedule"]),
            escape(r["queue"]),
            "[yellow]paused[/]" if r["paused"] else "active",
            _clock(r["last_slot_ms"]),
            _clock(r["next_slot_ms"]),
            str(r["fires"]),
            _warn(r["dropped"], "yellow"),
        ]
        for r in cron
    ]
    return [fit("Cron schedules (Consul)", cols, rows, width)]


def _clock(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) if ms else ""


def _history_line(h: Any) -> str:
    if not isinstance(h, dict):
        return ""
    if "error" in h:
        return f"[red]History unreadable:[/] {escape(str(h['error']))}"
    if not h.get("present"):
        return f"History: no tables at {h['path']} (`jobq history run` builds them from the events topic)"
    latest = h.get("latest_event_at")
    age = f", newest event {time.time() - latest / 1000:.0f} s ago" if latest else ""
    return f"History ({h['path']}): {h['jobs']} jobs{age}  (`jobq history JOB_ID`)"
