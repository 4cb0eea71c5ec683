"""``jobq history``: what happened to jobs, from the history tables (``docs/history.md``).

``jobq history JOB_ID`` prints one job's timeline across every hop and attempt; ``query``, ``wait-time`` and
``errors`` answer questions over all jobs (tables, or PNG charts with ``--plot``); ``run`` keeps the
tables up to date from the events topic (PySpark Structured Streaming). Readers use DuckDB, never Spark.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from jobq.history_chart import chart
from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.durations import parse_ms
from jqcore.errors import ConfigError
from jqcore.log import configure, get_logger
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import LogSettings
from jqcore.settings.pipeline import EventSettings, HistorySettings
from jqcore.topics import events_topic
from jqruntime.preflight import preflight
from jqruntime.stores.history import HistoryStore, QueryLimits, Rows, TimelineEntry

__all__ = ["app"]


class _JobOrCommand(TyperGroup):
    """``jobq history JOB_ID`` is ``jobq history show JOB_ID``: a first word that names no command is a
    job id."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:  # typer's vendored click types
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_JobOrCommand,
    help="What happened to jobs: `jobq history JOB_ID` (a job's timeline), reports and SQL over the history "
    "tables (JOBQ_HISTORY_PATH), and `jobq history run` that builds them from the events topic.",
    no_args_is_help=True,
)


def _console() -> Console:
    """Made per command, so the width follows the terminal (and ``COLUMNS``) of that call."""
    return Console()


def since_ms(span: str, now: int | None = None) -> int:
    """``2h`` / ``30m`` / ``7d`` / ``1h30m`` ago (:func:`jqcore.durations.parse_ms`), in epoch ms."""
    try:
        back = parse_ms(span)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return (now if now is not None else now_ms()) - back


def _store() -> HistoryStore:
    """The tables, each query within ``JOBQ_HISTORY_QUERY_*``'s memory and threads (no time limit: the
    operator's own query, in their own process)."""
    settings = load(HistorySettings)
    root = settings.root
    if not root.is_dir():
        raise ConfigError(
            f"no history tables at {root} (JOBQ_HISTORY_PATH): start `jobq history run` first",
            code="history_missing",
        )
    return HistoryStore(root, QueryLimits.of(settings, timeout=False))


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _ms(ms: int | None) -> str:
    if ms is None:
        return ""
    if ms < 10_000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s" if ms < 600_000 else f"{ms / 60_000:.1f} min"


def describe(e: TimelineEntry) -> str:
    """One event in words: what happened at that hop."""
    if e.to_state == "far":
        return f"scheduled far ahead (due {_when(e.run_at)}), kept in the schedule topic"
    if e.from_state == "":
        where = f"Kafka {e.origin}" if e.origin else "a direct write"
        return f"written to Redis from {where} → {e.to_state}"
    if e.to_state == "running":
        return (
            f"claimed by {e.worker or '?'} (attempt {e.attempt})"
            if e.from_state != "running"
            else (e.message or "cancel requested")
        )
    if e.error:
        return f"failed with {e.error}: {e.message} → {e.to_state}"
    text = f"{e.from_state} → {e.to_state}"
    if e.to_state == "delayed" and e.run_at:
        text += f" until {_when(e.run_at)}"
    return f"{text} ({e.message})" if e.message else text


def timeline_table(entries: Sequence[TimelineEntry]) -> Table:
    first = entries[0]
    t = Table(title=f"job {first.id} in {first.queue} ({first.kind or 'kind unknown'})")
    for col in ("v", "at (UTC)", "+", "what happened", "then in state for"):
        t.add_column(col, justify="right" if col in ("v", "+", "then in state for") else "left")
    start = first.accepted_at or first.at_ms
    if first.accepted_at:
        t.add_row("", _when(first.accepted_at), "0 ms", "accepted by the gateway", _ms(first.at_ms - start))
    for e in entries:
        t.add_row(str(e.v), _when(e.at_ms), _ms(e.at_ms - start), describe(e), _ms(e.duration_ms))
    return t


def timeline_lines(entries: Sequence[TimelineEntry]) -> list[str]:
    """The timeline as plain lines (``jobq history JOB_ID | grep ...``)."""
    first = entries[0]
    start = first.accepted_at or first.at_ms
    out = [f"job {first.id} in {first.queue} ({first.kind or 'kind unknown'})"]
    if first.accepted_at:
        out.append(f"  -  {_when(first.accepted_at)}  +0 ms  accepted by the gateway")
    for e in entries:
        stay = f"  [{_ms(e.duration_ms)} in {e.to_state}]" if e.duration_ms is not None else ""
        out.append(f"  v{e.v}  {_when(e.at_ms)}  +{_ms(e.at_ms - start)}  {describe(e)}{stay}")
    return out


@app.command("show")
def show(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    queue: Annotated[str | None, typer.Option(help="Only this queue (an id may exist in several).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as JSON lines.")] = False,
) -> None:
    """A job's timeline across every hop and attempt (also: `jobq history JOB_ID`)."""
    entries = _store().timeline(job_id, queue)
    if not entries:
        _console().print(f"[red]no events of job {job_id!r} in the history[/] (not shipped or indexed yet?)")
        raise typer.Exit(1)
    if as_json:
        for e in entries:
            typer.echo(
                orjson.dumps(e, option=orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_SERIALIZE_DATACLASS)
            )
        return
    by_queue: dict[str, list[TimelineEntry]] = {}
    for e in entries:
        by_queue.setdefault(e.queue, []).append(e)
    console = _console()
    for part in by_queue.values():
        if console.is_terminal:
            console.print(timeline_table(part))
        else:  # piped: one plain line per hop, for grep and logs
            for line in timeline_lines(part):
                typer.echo(line)


def _print_rows(rows: Rows, title: str) -> None:
    """A table on a terminal; piped, tab-separated lines with a header (for scripts)."""
    if not _console().is_terminal:
        typer.echo("\t".join(rows.columns))
        for row in rows.rows:
            typer.echo("\t".join("" if v is None else str(v) for v in row))
        return
    t = Table(title=title)
    for col in rows.columns:
        t.add_column(col)
    for row in rows.rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    console = _console()
    console.print(t)
    console.print(f"{len(rows.rows)} rows")


def _plot(rows: Rows, path: Path, title: str, *, x: str, y: str, group: str | None = None) -> None:
    chart(rows, path, title, x=x, y=y, group=group)
    _console().print(f"chart written to {path}")


PlotOption = Annotated[Path | None, typer.Option("--plot", help="Also write a PNG chart to this path.")]


@app.command("query")
def query(
    sql: Annotated[str, typer.Argument(help="One SELECT over the views events, current, job_states, jobs.")],
    plot: PlotOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON lines.")] = False,
) -> None:
    """Run one read-only SELECT over the history (DuckDB SQL); --plot draws the 2nd column over the 1st."""
    rows = _store().query(sql)
    if as_json:
        for row in rows.rows:
            typer.echo(orjson.dumps(dict(zip(rows.columns, row, strict=True)), default=str))
    else:
        _print_rows(rows, "query")
    if plot is not None:
        if len(rows.columns) < 2:
            raise typer.BadParameter("--plot needs at least two columns (x, y)")
        _plot(rows, plot, sql[:80], x=rows.columns[0], y=rows.columns[1])


@app.command("wait-time")
def wait_time(
    by: Annotated[str, typer.Option(help="Group by kind or queue.")] = "kind",
    per: Annotated[str, typer.Option(help="Bucket: minute, hour or day.")] = "hour",
    since: Annotated[str, typer.Option(help="How far back: 90s, 30m, 2h, 7d.")] = "24h",
    plot: PlotOption = None,
) -> None:
    """How long jobs waited from acceptance to their first run: p50/p95/max per bucket and group."""
    rows = _store().wait_time(by=by, per=per, since_ms=since_ms(since))
    _print_rows(rows, f"wait before the first run, by {by} per {per}, last {since}")
    if plot is not None:
        _plot(
            rows, plot, f"p95 wait before the first run, by {by} per {per}", x="bucket", y="p95_ms", group=by
        )


@app.command("errors")
def errors(
    since: Annotated[str, typer.Option(help="How far back: 90s, 30m, 2h, 7d.")] = "2h",
    plot: PlotOption = None,
) -> None:
    """Failed attempts grouped by queue, kind, error class and message digest, most frequent first."""
    rows = _store().errors(since_ms=since_ms(since))
    _print_rows(rows, f"errors in the last {since}")
    if plot is not None:
        _plot(rows, plot, f"failed attempts in the last {since}", x="error", y="count", group="kind")


@app.command("run")
def run(
    once: Annotated[bool, typer.Option(help="Index what the topic holds now, then stop.")] = False,
) -> None:
    """Build the history tables from the events topic (PySpark Structured Streaming, checkpointed in the
    tables' folder: stop and start again at will; the same events twice change nothing)."""
    from jqspark import spark_session
    from jqspark.history import run_history
    from jqspark.session import SPARK_JSON_LOGS
    from jqstack.provision import ensure_spark_jars

    logging = load(LogSettings)
    configure(logging)  # JOBQ_LOG_FORMAT=json: py4j's and pyspark's records as JSON lines, the JVM's too
    json_logs = logging.format == "json"
    history, events, kafka = load(HistorySettings), load(EventSettings), load(KafkaSettings)
    if history.metrics_port is not None:
        metrics.serve(history.metrics_port)
    # the schedulers may not have created it yet; plaintext settings against a TLS listener stop here
    asyncio.run(preflight(kafka=kafka, owns=[events_topic(events)]))
    if json_logs:
        get_logger("jqspark").info("history run", topic=events.topic, root=str(history.root), once=once)
    else:
        _console().print(f"history of {events.topic} → {history.root}" + (" (once)" if once else ""))
    conf = SPARK_JSON_LOGS if json_logs else {}
    spark = spark_session("jobq-history", kafka=kafka, jars=ensure_spark_jars(), conf=conf)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # a supervisor's stop or Ctrl-C: end between batches
        signal.signal(sig, lambda _s, _f: stop.set())
    try:
        run_history(
            spark,
            kafka=kafka,
            topic=events.topic,
            root=history.root,
            trigger_s=history.trigger_s,
            retention_days=history.retention_days,
            once=once,
            stop=stop,
        )
    finally:
        spark.stop()
