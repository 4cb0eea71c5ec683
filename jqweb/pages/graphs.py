"""Task graphs: the recent ones — open (the engine's open-graph index) and ended (the newest the scheduler
swept from it) — with their state and node counts, a lookup by id, and one graph drawn as its DAG (a
server-side SVG: layers by longest path from a root, nodes coloured by state) with a table of its nodes'
results and errors; an admin cancels or retries it."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from jqcore.envelope import validate_name
from jqcore.errors import EnvelopeError, GraphNotFound
from jqengine import ENDED_GRAPHS_KEPT, GraphInfo, NodeInfo
from jqruntime.authz import Policy, Touch, owner
from jqruntime.http import HttpError
from jqruntime.tokens import Token
from jqweb.context import WEB
from jqweb.narrow import everything
from jqweb.render import act, form, page, query_int
from jqweb.routes import Pages
from jqweb.security import READ, principal

__all__ = ["layout", "routes"]

routes = Pages()

READS_AT_ONCE = 16
SVG_MAX_NODES = 200
"""Larger graphs get the node table only (a drawing of thousands of boxes reads no better than it)."""
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 168, 34, 56, 12, 12
LABEL_CHARS = 22
FINAL_NODE = frozenset({"completed", "failed", "canceled", "skipped"})
SHOW = {"all": "recent", "open": "open", "ended": "ended"}
"""The list's filters (``?show=``): every indexed graph, the open ones, the ended ones."""


def _graph_id(raw: str) -> str:
    try:
        return validate_name("id", raw)
    except EnvelopeError as exc:
        raise HttpError(400, "graph_id_invalid", exc.message) from None


def _natural(name: str) -> list[Any]:
    """``sq-2`` before ``sq-10``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _layers(nodes: Sequence[NodeInfo], on_failure: str | None) -> dict[str, int]:
    """Each node's layer: the longest path from a root (Kahn's order; ``on_failure`` after every other)."""
    names = {n.name for n in nodes}
    children: dict[str, list[str]] = defaultdict(list)
    missing = {n.name: 0 for n in nodes}
    for n in nodes:
        for parent, _ in n.parents:
            if parent in names:
                children[parent].append(n.name)
                missing[n.name] += 1
    layer = {name: 0 for name in names}
    todo = [name for name, m in missing.items() if m == 0]
    while todo:
        name = todo.pop()
        for child in children[name]:
            layer[child] = max(layer[child], layer[name] + 1)
            missing[child] -= 1
            if missing[child] == 0:
                todo.append(child)
    if on_failure in layer:
        layer[on_failure] = max((v for k, v in layer.items() if k != on_failure), default=-1) + 1
    return layer


def _columns(nodes: Sequence[NodeInfo], layer: dict[str, int]) -> list[list[NodeInfo]]:
    """Nodes per layer, each layer ordered by its nodes' parents' mean position (fewer crossings)."""
    columns: list[list[NodeInfo]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for n in nodes:
        columns[layer[n.name]].append(n)
    position: dict[str, float] = {}
    for column in columns:

        def key(n: NodeInfo) -> tuple[float, list[Any]]:
            seen = [position[p] for p, _ in n.parents if p in position]
            return (sum(seen) / len(seen) if seen else -1.0, _natural(n.name))

        column.sort(key=key)
        for i, n in enumerate(column):
            position[n.name] = float(i)
    return columns


def _label(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def layout(info: GraphInfo) -> dict[str, Any]:
    """The DAG as boxes and edges in SVG coordinates (numbers; names stay text for the template)."""
    columns = _columns(info.nodes, _layers(info.nodes, info.on_failure))
    tallest = max((len(c) for c in columns), default=0)
    boxes: dict[str, dict[str, Any]] = {}
    for col, column in enumerate(columns):
        top = PAD + (tallest - len(column)) * (BOX_H + GAP_Y) / 2
        for row, n in enumerate(column):
            boxes[n.name] = {
                "name": n.name,
                "label": _label(n.name),
                "state": n.state,
                "queue": n.queue,
                "job_id": n.job_id,
                "on_failure": n.name == info.on_failure,
                "x": PAD + col * (BOX_W + GAP_X),
                "y": round(top + row * (BOX_H + GAP_Y), 1),
            }
    edges = []
    for n in info.nodes:
        for parent, policy in n.parents:
            if parent not in boxes:
                continue
            a, b = boxes[parent], boxes[n.name]
            x1, y1 = a["x"] + BOX_W, a["y"] + BOX_H / 2
            x2, y2 = b["x"], b["y"] + BOX_H / 2
            mid = (x1 + x2) / 2
            path = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
            edges.append({"parent": parent, "child": n.name, "policy": policy, "d": path})
    width = PAD * 2 + len(columns) * BOX_W + max(len(columns) - 1, 0) * GAP_X
    height = PAD * 2 + tallest * BOX_H + max(tallest - 1, 0) * GAP_Y
    return {
        "width": width,
        "height": height,
        "box_w": BOX_W,
        "box_h": BOX_H,
        "nodes": [boxes[n.name] for column in columns for n in column],
        "edges": edges,
    }


def _ordered(info: GraphInfo) -> list[NodeInfo]:
    layer = _layers(info.nodes, info.on_failure)
    return sorted(info.nodes, key=lambda n: (layer[n.name], _natural(n.name)))


def _summary(graph_id: str, entered: int, info: GraphInfo | None, ended_at: int | None) -> dict[str, Any]:
    if info is None:
        return {
            "id": graph_id,
            "entered_at": entered,
            "ended_at": ended_at,
            "state": "gone",
            "nodes": 0,
            "counts": {},
        }
    return {
        "id": graph_id,
        "entered_at": entered,
        "ended_at": ended_at,
        "state": info.state,
        "queue": info.queue,
        "created_at": info.created_at,
        "deadline_at": info.deadline_at,
        "nodes": len(info.nodes),
        "counts": dict(info.counts),
    }


async def graph_owner(request: web.Request, _: Token) -> Iterable[Touch]:
    """The graph's home queue and every node's queue (404 ``graph_not_found`` for no such graph)."""
    graph_id = _graph_id(request.match_info["graph"])
    info = await request.app[WEB].engine.graphs.get(graph_id)
    return [owner(q, f"graph {graph_id!r}") for q in {info.queue, *(n.queue for n in info.nodes)}]


@routes.get("/graphs", policy=READ)
async def graphs(request: web.Request) -> web.Response:
    w = request.app[WEB]
    wanted = request.query.get("id", "").strip()
    if wanted:  # the lookup form
        raise web.HTTPSeeOther(f"{w.base}/graphs/{quote(_graph_id(wanted), safe='')}")
    offset = query_int(request, "offset", 0, 0, 10**6)
    count = query_int(request, "count", 50, 1, 500)
    show = request.query.get("show", "all")
    if show not in SHOW:
        raise HttpError(400, "query_invalid", f"show must be one of {', '.join(SHOW)}, not {show[:20]!r}")
    opened = await w.engine.graphs.open_graphs(limit=100_000)
    ended = await w.engine.graphs.ended_graphs()
    counts = {"all": len(opened.keys() | ended.keys()), "open": len(opened), "ended": len(ended)}
    index = {**(ended if show != "open" else {}), **(opened if show != "ended" else {})}
    p = principal(request)
    if not everything(p):  # a token held to some queues lists the graphs of its queues
        homes = await w.engine.graphs.homes(list(index))
        index = {
            g: t for (g, t), home in zip(index.items(), homes, strict=True) if home and p.allows_queue(home)
        }
    newest = sorted(index.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = newest[offset : offset + count]
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(graph_id: str, entered: int) -> dict[str, Any]:
        async with gate:
            try:
                info: GraphInfo | None = await w.engine.graphs.get(graph_id)
            except GraphNotFound:  # indexed but gone (past its retention): shown as such
                info = None
            return _summary(graph_id, entered, info, None if graph_id in opened else entered)

    rows = await asyncio.gather(*(one(g, t) for g, t in shown))
    more = offset + count if offset + count < len(newest) else None
    context = {
        "graphs": rows,
        "total": len(newest),
        "offset": offset,
        "count": count,
        "more": more,
        "show": show,
        "kept": ENDED_GRAPHS_KEPT,
        "counts": counts if everything(p) else None,
    }
    return page(request, "graphs.html", context)


def _node_row(n: NodeInfo) -> dict[str, Any]:
    took = n.finished_at - n.released_at if n.finished_at and n.released_at else None
    return {
        "name": n.name,
        "state": n.state,
        "queue": n.queue,
        "kind": n.kind,
        "job_id": n.job_id,
        "run": n.gen + 1,
        "parents": [{"node": p, "policy": pol} for p, pol in n.parents],
        "released_at": n.released_at,
        "finished_at": n.finished_at,
        "took_ms": took,
        "result": n.result,
        "error": dict(n.error) if n.error else None,
    }


@routes.get("/graphs/{graph}", policy=Policy("read", (graph_owner,)))
async def graph(request: web.Request) -> web.Response:
    w = request.app[WEB]
    info = await w.engine.graphs.get(_graph_id(request.match_info["graph"]))
    ordered = _ordered(info)
    svg = layout(info) if len(info.nodes) <= SVG_MAX_NODES else None
    if svg is not None:  # each box links to its row of the node table
        row = {n.name: i for i, n in enumerate(ordered)}
        for box in svg["nodes"]:
            box["row"] = row[box["name"]]
    context = {
        "graph": {k: v for k, v in info.as_dict().items() if k != "nodes"},
        "nodes": [_node_row(n) for n in ordered],
        "svg": svg,
        "svg_max_nodes": SVG_MAX_NODES,
        "can_cancel": info.state == "running",
        "can_retry": info.state in ("failed", "canceled"),
    }
    return page(request, "graph.html", context)


def _open_nodes(info: GraphInfo) -> set[str]:
    return {n.name for n in info.nodes if n.state not in FINAL_NODE}


@routes.post("/graphs/{graph}/cancel", policy=Policy("admin", (graph_owner,)))
async def cancel(request: web.Request) -> web.Response:
    w = request.app[WEB]
    graph_id = _graph_id(request.match_info["graph"])
    data = await form(request)
    reason = (data.get("reason") or "canceled from the dashboard")[:200]
    ended: list[bool] = []

    async def run() -> int:
        graphs = w.engine.graphs
        before = _open_nodes(await graphs.get(graph_id))
        ended.append(await graphs.cancel(graph_id, reason))
        return len(before - _open_nodes(await graphs.get(graph_id)))

    return await act(
        request,
        "graph.cancel",
        graph_id,
        run,
        done=lambda n: (
            f"graph {graph_id} canceled ({n} nodes ended)"
            if ended[0]
            else f"graph {graph_id} had ended already: nothing canceled"
        ),
        back=f"{w.base}/graphs/{graph_id}",
        next_url=data.get("next"),
    )


@routes.post("/graphs/{graph}/retry", policy=Policy("admin", (graph_owner,)))
async def retry(request: web.Request) -> web.Response:
    """Run a failed or canceled graph again from what did not complete (409 ``graph_conflict`` while it
    runs or once it completed)."""
    w = request.app[WEB]
    graph_id = _graph_id(request.match_info["graph"])
    data = await form(request)

    async def run() -> int:
        return len(await w.engine.graphs.retry(graph_id))

    return await act(
        request,
        "graph.retry",
        graph_id,
        run,
        done=lambda n: f"graph {graph_id} retried: {n} node{'' if n == 1 else 's'} released again",
        back=f"{w.base}/graphs/{graph_id}",
        next_url=data.get("next"),
    )
