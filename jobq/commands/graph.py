"""``jobq graph``: look at task graphs (their DAG drawn with node states, results, errors, timings), cancel
them, retry them from their failed nodes. Graphs are submitted over HTTP (``POST /v1/graphs``) or from
Python (``JobqClient.submit_graph``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from jobq.audited import audited
from jobq.engine_call import with_engine
from jqcore.errors import GraphNotFound
from jqengine import Engine, GraphInfo, NodeInfo

__all__ = ["app", "render"]

app = typer.Typer(
    help="Task graphs: show one (its DAG, node states, results, errors, timings), list open ones, cancel, "
    "retry from failure.",
    no_args_is_help=True,
)
COLORS = {
    "completed": "green",
    "failed": "red",
    "canceled": "yellow",
    "skipped": "bright_black",
    "ready": "cyan",
    "waiting": "white",
    "running": "cyan",
}


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else "-"


def _took(node: NodeInfo) -> str:
    if node.released_at and node.finished_at:
        return f" {node.finished_at - node.released_at} ms"
    return ""


def _label(node: NodeInfo) -> str:
    color = COLORS.get(node.state, "white")
    text = f"[bold]{escape(node.name)}[/] [{color}]{node.state}[/]{_took(node)}  [dim]{escape(node.kind)} @ "
    text += f"{escape(node.queue)}  {escape(node.job_id)}[/]"
    if node.result is not None:
        shown = orjson.dumps(node.result).decode()
        text += f"\n→ {escape(shown[:120])}{'…' if len(shown) > 120 else ''}"
    if node.error:
        last = str(node.error.get("error", "")).strip().splitlines()[-1:] or [""]
        text += f"\n[red]✗ {escape(last[0][:160])}[/] [dim](attempt {node.error.get('attempt', 0)})[/]"
    return text


def _head(info: GraphInfo) -> str:
    color = COLORS.get(info.state, "white")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(info.counts.items()))
    head = f"graph [bold]{escape(info.id)}[/] [{color}]{info.state}[/]  [dim]{counts}"
    head += f"; created {_when(info.created_at)}"
    if info.deadline_at:
        head += f"; deadline {_when(info.deadline_at)}"
    if info.finished_at:
        head += f"; ended {_when(info.finished_at)}"
    head += "[/]"
    if info.reason:
        head += f"\n[dim]{escape(info.reason)}[/]"
    return head


def render(info: GraphInfo) -> Tree:
    """The graph as a tree: each node under its first parent; a node with several parents is drawn once
    and named under its other parents (``⤷ also waits for``)."""
    tree = Tree(_head(info))
    by_name = {n.name: n for n in info.nodes}
    children: dict[str, list[str]] = {n.name: [] for n in info.nodes}
    for n in info.nodes:
        if n.parents:
            children[n.parents[0][0]].append(n.name)

    def add(branch: Tree, name: str) -> None:
        node = by_name[name]
        sub = branch.add(_label(node))
        for child in children[name]:
            add(sub, child)
        for c in info.nodes:
            if any(p == name for p, _ in c.parents[1:]):
                sub.add(f"[dim]⤷ {escape(c.name)} also waits for this[/]")

    for n in info.nodes:
        if not n.parents and n.name != info.on_failure:
            add(tree, n.name)
    if info.on_failure and info.on_failure in by_name:
        add(tree.add("[dim]on failure[/]"), info.on_failure)
    return tree


@app.command("show")
def show(
    graph_id: Annotated[str, typer.Argument(help="The graph's id.")],
    json: Annotated[
        bool, typer.Option("--json", help="Print the graph as JSON (GET /v1/graphs/{id}).")
    ] = False,
) -> None:
    """A graph: its DAG with each node's state, run time, result or error."""
    info = with_engine(lambda e: e.graphs.get(graph_id))
    if json:
        typer.echo(orjson.dumps(info.as_dict(), option=orjson.OPT_INDENT_2).decode())
        return
    Console().print(render(info))


@app.command("list")
def list_open() -> None:
    """Graphs not finished yet (and ended ones the scheduler has not swept from the index)."""

    async def go(engine: Engine) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for graph_id in await engine.graphs.open_graphs():
            try:
                out.append((graph_id, await engine.graphs.get(graph_id)))
            except GraphNotFound:  # indexed but gone (retention): shown as such
                out.append((graph_id, None))
        return out

    rows = with_engine(go)
    if not rows:
        typer.echo("no open graphs")
    for graph_id, info in rows:
        if info is None:
            typer.echo(f"{graph_id}\tmissing")
        else:
            counts = ",".join(f"{s}={n}" for s, n in sorted(info.counts.items()))
            typer.echo(f"{graph_id}\t{info.state}\t{counts}\t{_when(info.created_at)}")


@app.command("cancel")
def cancel(
    graph_id: Annotated[str, typer.Argument(help="The graph's id.")],
    reason: Annotated[str, typer.Option(help="Why (kept with the graph).")] = "canceled from the CLI",
) -> None:
    """Cancel a running graph: its waiting nodes end canceled, its queued and running jobs are canceled."""
    with audited("graph.cancel", graph_id) as note:
        changed = with_engine(lambda e: e.graphs.cancel(graph_id, reason))
        note.count = int(changed)
    typer.echo(f"{graph_id}: {'canceled' if changed else 'had already ended; nothing changed'}")


@app.command("retry")
def retry(graph_id: Annotated[str, typer.Argument(help="The graph's id.")]) -> None:
    """Run a failed or canceled graph again from what did not complete (completed nodes keep results)."""
    with audited("graph.retry", graph_id) as note:
        released = with_engine(lambda e: e.graphs.retry(graph_id))
        note.count = len(released)
    typer.echo(f"{graph_id}: running again; released {', '.join(released) or 'nothing yet'}")
