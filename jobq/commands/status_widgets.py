"""The cells and tables of ``jobq status --watch`` (:mod:`jobq.commands.status_tui`): one row of each
table from the overview's data, the alerts and services lines, the rates' labels, and the updates of a
table in place (only the cells that changed, the cursor kept on its row).

Everything read from Redis, Kafka or Consul is shown as plain :class:`rich.text.Text`: a queue called
``[red]x`` shows literally, it is never parsed as markup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

from jqweb.overview import Alert

__all__ = [
    "CANARY_COLUMNS",
    "LAG_COLUMNS",
    "QUEUE_COLUMNS",
    "RATES",
    "Cell",
    "alerts_text",
    "canary_cells",
    "fill",
    "lag_cells",
    "lag_rows",
    "merge",
    "points",
    "queue_cells",
    "rate_label",
    "services_text",
]

QUEUE_COLUMNS = ("queue", "pending", "running", "delayed", "far", "dead", "oldest pending", "paused")
LAG_COLUMNS = ("topic", "part", "end", "done", "lag", "lag s", "relay", "fence")
CANARY_COLUMNS = ("partition", "health", "ms", "gate", "relay", "worker", "beat")
RATES = (
    ("enqueued", "enqueued/s"),
    ("completed", "completed/s"),
    ("failed", "failed/s"),
    ("wait_ms", "start latency ms"),
)

Cell = Text | str


def _num(value: Any) -> Text:
    return Text("" if value is None else str(value), justify="right")


def _bad(value: int, style: str = "red") -> Text:
    return Text(str(value), style=style if value else "", justify="right")


def _ago(at_ms: Any) -> str:
    return f"{time.time() - at_ms / 1000:.0f} s" if isinstance(at_ms, int | float) else ""


def queue_cells(q: dict[str, Any]) -> list[Cell]:
    """One row of the Queues table (the dashboard's columns plus far and paused)."""
    age = q.get("oldest_pending_age_ms")
    return [
        Text(str(q["queue"])),
        _num(q.get("pending", 0)),
        _num(q.get("running", 0)),
        _num(q.get("delayed", 0)),
        _num(q.get("far", 0)),
        _bad(int(q.get("errored", 0))),
        Text(f"{age / 1000:.1f} s" if age is not None else "", justify="right"),
        Text("paused", style="yellow") if q.get("paused") else Text(""),
    ]


def lag_cells(row: dict[str, Any], lock: dict[str, Any]) -> list[Cell]:
    """One partition of a topic, with the relay holding the topic's lock and its fence."""
    holder = lock.get("holder")
    relay = Text(str(holder)) if holder else Text("nobody", style="bold red")
    if row.get("problem"):
        problem = Text(str(row["problem"]), style="red")
        return [Text(str(row["topic"])), problem, "", "", "", "", relay, _num(lock.get("fence"))]
    lag_s = row.get("lag_s")
    return [
        Text(str(row["topic"])),
        _num(row.get("partition")),
        _num(row.get("end")),
        _num(row.get("committed")),
        _bad(int(row.get("lag") or 0), "yellow"),
        _num(lag_s),
        relay,
        _num(lock.get("fence")),
    ]


def canary_cells(part: str, c: dict[str, Any]) -> list[Cell]:
    ms = c.get("ms") or {}
    if c.get("ok"):
        health = Text("ok", style="green")
    else:
        health = Text(str(c.get("problem") or "failing")[:48], style="red")
    timings = [_num(ms.get(k)) for k in ("total", "gate", "relay", "worker")]
    return [Text(str(part)), health, *timings, Text(_ago(c.get("at")))]


def alerts_text(found: Sequence[Alert], error: str | None = None) -> Text:
    """The alerts panel: critical lines red, warnings yellow; data appended as plain text."""
    out = Text()
    if error:
        out.append("refresh failed: ", style="bold red")
        out.append(error)
        out.append("\n")
    for a in found:
        style = "red" if a.level == "critical" else "yellow"
        out.append("● " if a.level == "critical" else "▲ ", style=style)
        out.append(a.what, style=f"bold {style}")
        out.append(" — ")
        out.append(a.detail)
        out.append("\n")
    if not found and not error:
        out.append("All clear: canaries on time, relays holding their topics, no dead letters growing.")
    out.rstrip()
    return out


def services_text(redis: Any) -> Text:
    """Gateways, worker pools, dispatchers, scheduler groups alive and Redis memory (as the dashboard's
    hint line)."""
    if not isinstance(redis, dict) or "queues" not in redis:
        error = redis.get("error") if isinstance(redis, dict) else redis
        return Text.assemble(("Redis unreadable: ", "bold red"), str(error))
    schedulers: dict[str, dict[str, str]] = redis.get("schedulers") or {}
    instances = sum(len(m) for m in schedulers.values())
    memory = redis.get("memory") or {}
    used = f"{memory.get('used', 0) / 1048576:.1f} MiB"
    cap = memory.get("max")
    mem = f"{used} of {cap / 1048576:.0f} MiB ({memory.get('ratio', 0):.0%})" if cap else f"{used} (no max)"
    return Text.assemble(
        ("gateways ", "dim"),
        str(len(redis.get("gateways") or [])),
        ("  ·  worker pools ", "dim"),
        str(len(redis.get("workers") or [])),
        ("  ·  dispatchers ", "dim"),
        str(len(redis.get("dispatchers") or [])),
        ("  ·  scheduler groups ", "dim"),
        (str(len(schedulers)), "" if schedulers else "bold red"),
        f" ({instances} instances)",
        ("  ·  Redis memory ", "dim"),
        mem,
    )


def points(values: Sequence[float | None]) -> list[float]:
    return [v or 0.0 for v in values]


def rate_label(title: str, values: Sequence[float | None]) -> Text:
    """``enqueued/s 1.5 ↑4`` (the newest rate, the highest over the window) or ``no samples``."""
    known = [v for v in values if v is not None]
    if not known:
        return Text.assemble((title, "bold"), (" no samples", "dim"))
    return Text.assemble((title, "bold"), f" {known[-1]:g}", (f" ↑{max(known):g}", "dim"))


def lag_rows(kafka: Any, locks: Any) -> dict[str, list[Cell]]:
    if not isinstance(kafka, list):
        error = kafka.get("error") if isinstance(kafka, dict) else kafka
        return {"error": [Text("Kafka unreadable", style="bold red"), Text(str(error)), *[""] * 6]}
    by_topic = {r["topic"]: r for r in locks} if isinstance(locks, list) else {}
    return {f"{r['topic']}/{r.get('partition')}": lag_cells(r, by_topic.get(r["topic"], {})) for r in kafka}


def _sig(cell: object) -> tuple[str, str, str]:
    if isinstance(cell, Text):
        return cell.plain, str(cell.style), str(cell.justify)
    return str(cell), "", ""


def _update(table: DataTable[Cell], key: str, cells: Sequence[Cell]) -> None:
    """Change only the cells that differ. A column only widens (``update_width`` on a narrower cell makes
    textual measure the whole column again: with thousands of queues, seconds per refresh)."""
    for column in table.ordered_columns:
        cell = cells[table.get_column_index(column.key)]
        if _sig(table.get_cell(key, column.key)) != _sig(cell):
            wider = cell_len(_sig(cell)[0]) > column.content_width
            table.update_cell(key, column.key, cell, update_width=wider)


def fill(table: DataTable[Cell], rows: dict[str, list[Cell]]) -> None:
    """Show ``rows`` (row key → cells) in a small table: updated in place while the rows stay the same,
    else rebuilt with the cursor kept on the row it was on."""
    keys = [k.value for k in table.rows]
    if keys == list(rows):
        for key, cells in rows.items():
            _update(table, key, cells)
        return
    current = keys[table.cursor_row] if 0 <= table.cursor_row < len(keys) else None
    table.clear()
    for key, cells in rows.items():
        table.add_row(*cells, key=key)
    if current in rows:
        table.move_cursor(row=table.get_row_index(current))


def merge(table: DataTable[Cell], rows: dict[str, list[Cell]]) -> None:
    """Show ``rows`` in the Queues table (key: the queue, also the first cell; ``rows`` in display order):
    rows gone removed, new ones added and put in order, the others changed cell by cell."""
    have = {str(k.value) for k in table.rows}
    for gone in have - rows.keys():
        table.remove_row(gone)
    added = False
    for key, cells in rows.items():
        if key in have:
            _update(table, key, cells)
        else:
            table.add_row(*cells, key=key)
            added = True
    if added:
        order = {key: i for i, key in enumerate(rows)}
        table.sort(table.ordered_columns[0].key, key=lambda cell: order.get(_sig(cell)[0], -1))
