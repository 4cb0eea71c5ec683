"""``jobq rebuild``: the pending state rebuilt from Kafka after Redis lost everything
(:mod:`jqrecover.rebuild`: what is read, how each record is decided, the window); here the options, the
scheduler's cadences and the report's tables."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Annotated

import orjson
import typer
from redis.exceptions import ResponseError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobq.audited import Note, audited
from jqcore.errors import JobqError
from jqcore.settings.common import load
from jqcore.settings.pipeline import EventSettings
from jqrecover.rebuild import DEFAULT_MARGIN_S, Cadences, RebuildReport, rebuild_from_kafka
from jqrecover.replay import Point, ReplayError, parse_point
from jqsched.service import EVENTS_GATHER_S, EVENTS_IDLE_S, GRAPH_EVERY_S
from jqsched.settings import SchedulerSettings

__all__ = ["cadences", "rebuild"]


def cadences(s: SchedulerSettings) -> Cadences:
    """The scheduler's cadences (``JOBQ_SCHEDULER_*``, its graph round, the event shipper's idle wait and
    gathering) for the window."""
    return Cadences(
        beat_s=s.beat_s,
        stale_s=s.stale_s,
        graph_every_s=GRAPH_EVERY_S,
        events_idle_s=EVENTS_IDLE_S,
        events_gather_s=EVENTS_GATHER_S,
    )


def _since(text: str) -> int:
    """``--from``: a time only (an offset means nothing across topics)."""
    try:
        point = parse_point(text, "--from")
    except ReplayError:
        point = Point()
    if point.time_ms is None:
        raise typer.BadParameter(
            f"expected an ISO-8601 time or a relative time like -2h (a time, not an offset); got {text!r}",
            param_hint="--from",
        )
    return point.time_ms


def rebuild(
    from_: Annotated[
        str,
        typer.Option(
            "--from",
            help="Start: an ISO-8601 time (naive = UTC) or relative (--from=-2h); older than any job that "
            "could still be unfinished.",
        ),
    ],
    topic: Annotated[
        list[str] | None,
        typer.Option(help="A job topic (repeatable; default: JOBQ_RELAY_TOPICS, else every routed topic)."),
    ] = None,
    margin: Annotated[
        int, typer.Option(min=0, help="Seconds of events read before --from (clock skew).")
    ] = DEFAULT_MARGIN_S,
    events_topic: Annotated[
        str | None, typer.Option(help="The lifecycle events topic (default: JOBQ_EVENTS_TOPIC).")
    ] = None,
    cron: Annotated[
        bool, typer.Option(help="Fire again the cron fires that were pending (schedules from Consul).")
    ] = True,
    configs: Annotated[
        bool,
        typer.Option(
            help="Restore first the kill switches, queue configurations and job type options kept in Consul "
            "(where Redis lacks them)."
        ),
    ] = True,
    dry_run: Annotated[bool, typer.Option(help="Read and decide; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Rebuild the pending state from Kafka after Redis lost everything: finished and canceled jobs (the
    events topic says which) are not run again."""
    since = _since(from_)
    events = load(EventSettings) if events_topic is None else load(EventSettings, topic=events_topic)
    err = Console(stderr=True)
    target = f"{','.join(topic) if topic else 'every topic'} from {from_}" + ("" if cron else " --no-cron")
    target += "" if configs else " --no-configs"
    with nullcontext(Note()) if dry_run else audited("rebuild", target) as note:
        try:
            report = asyncio.run(
                rebuild_from_kafka(
                    since,
                    topic,
                    dry_run=dry_run,
                    cron=cron,
                    configs=configs,
                    margin_s=margin,
                    events=events,
                    cadences=cadences(load(SchedulerSettings)),
                )
            )
        except JobqError as exc:
            note.outcome = f"{exc.code}: {exc.message}"
            err.print(f"[red]error[/] ({exc.code}): {escape(exc.message)}")
            raise typer.Exit(2) from exc
        except ResponseError as exc:  # e.g. a damaged queue key: every script on that queue fails
            note.outcome = f"rebuild_refused: Redis refused a write: {exc}"
            err.print(
                f"[red]error[/] (rebuild_refused): Redis refused a write: {escape(str(exc))}. What was "
                "written stays written; repair the queue and run the same rebuild again (dedup makes a "
                "rerun safe)."
            )
            raise typer.Exit(2) from exc
        note.count = sum(t.totals()["rebuilt"] for t in report.topics)
    if as_json:
        typer.echo(orjson.dumps(report.as_dict()))
        return
    _print(report)


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else "-"


def _print(report: RebuildReport) -> None:
    console = Console()
    title = f"jobq rebuild from {_when(report.since_ms)}" + (
        " (dry run: nothing written)" if report.dry_run else ""
    )
    cols = ["topic", "read", "rebuilt", "far tier", "graphs", "skipped (finished)", "in the lane"]
    table = Table(*cols, "duplicate", "unscheduled", "refused", "malformed", title=title)
    for t in report.topics:
        d = t.totals()
        skipped = ", ".join(f"{s} {n}" for s, n in d["skipped_by_state"].items()) or "0"
        rebuilt = f"{d['kept']} to write" if report.dry_run else str(d["rebuilt"])
        row = [t.topic, d["read"], rebuilt, d["far"], d["graphs"], skipped, d["held"], d["duplicate"]]
        table.add_row(*(str(v) for v in [*row, d["unscheduled"], d["refused"], d["malformed"]]))
    console.print(table)
    ev, w, c = report.events, report.window, report.configs
    console.print(
        f"configurations from Consul: {len(c.switches)} kill switches, {len(c.queues)} queues and "
        f"{len(c.kinds)} job type options "
        f"{'kept there (Redis not read)' if report.dry_run else 'restored'}, {c.kept} left as Redis had them"
        + (
            f", [yellow]{len(c.unreadable)} unreadable[/]: {escape(', '.join(c.unreadable))}"
            if c.unreadable
            else ""
        )
    )
    console.print(
        f"events: {escape(report.events_topic)} from {_when(report.events_from_ms)}: {ev.read} read, "
        f"{len(ev.jobs)} jobs known, newest {_when(ev.newest_ms)}; cron fires: "
        f"{len(report.cron.refired)} {'to fire' if report.dry_run else 'fired'} again, "
        f"{len(report.cron.missing)} without their schedule, {report.cron.finished} finished"
    )
    for what, cut in [
        (f"the events topic {report.events_topic}", ev.retention_cut_ms),
        *((f"topic {t.topic}", t.retention_cut_ms) for t in report.topics),
    ]:
        if cut:
            console.print(
                f"[yellow]warning[/]: {escape(what)} begins at {_when(cut)} (retention deleted the records "
                "before): what happened before then is not known here."
            )
    delay, ship = w.get("measured_delay_ms") or {}, w["shipping_s"]
    console.print(
        "window: a job whose final event had not reached Kafka when Redis was lost runs again. Events "
        f"ship within {ship['watched_queue']:g} s of a transition on a watched queue, up to "
        f"{ship['new_queue']:g} s for a new queue, {ship['after_scheduler_death']:g} s after a scheduler "
        f"died, {ship['graph_events']:g} s for graphs; measured on the events read: p99 ≤ "
        f"{delay.get('p99_at_most')} ms, max {delay.get('max')} ms."
    )
