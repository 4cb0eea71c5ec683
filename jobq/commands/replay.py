"""``jobq replay``: re-drive a range of a topic's records into Redis (:mod:`jqrecover.replay`: ranges,
reading, dedup, ``--force``); here the options and the table."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated

import orjson
import typer
from confluent_kafka import Message
from redis.exceptions import ResponseError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobq.audited import audited
from jqcore.admission import Admission, carries_signature
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqrecover.replay import (
    PartitionRange,
    Point,
    ReplayError,
    count_malformed,
    parse_point,
    read_range,
    write_records,
)
from jqruntime.stores.config import read_graph_key

__all__ = ["bad_parameter", "replay"]


def bad_parameter(exc: ReplayError) -> typer.BadParameter:
    """A replay's problem as the CLI reports a bad option."""
    return typer.BadParameter(exc.message, param_hint=exc.option)


def _points(from_: str, to: str | None) -> tuple[Point, Point | None]:
    try:
        start = parse_point(from_, "--from")
        end = parse_point(to, "--to") if to is not None else None
    except ReplayError as exc:
        raise bad_parameter(exc) from None
    if end is not None and (
        (start.offset is not None and end.offset is not None and end.offset < start.offset)
        or (start.time_ms is not None and end.time_ms is not None and end.time_ms < start.time_ms)
    ):
        raise typer.BadParameter(f"--to ({to}) is before --from ({from_})", param_hint="--to")
    return start, end


def replay(
    topic: Annotated[str, typer.Option(help="The topic to re-drive (also <topic>.retry or <topic>.dead).")],
    from_: Annotated[
        str,
        typer.Option("--from", help="Start (incl.): an offset, an ISO-8601 time, or relative (--from=-15m)."),
    ],
    to: Annotated[
        str | None, typer.Option(help="End (exclusive), same forms; default: the end offsets at start.")
    ] = None,
    partition: Annotated[int | None, typer.Option(help="Only this partition.")] = None,
    force: Annotated[
        bool, typer.Option(help="Run already-finished ids again (never doubles live ones).")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Read and count; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Re-drive a range of a topic's jobs into Redis; dedup decides whether finished ids run again."""
    start, end = _points(from_, to)
    try:
        ranges, records = read_range(load(KafkaSettings), topic, start, end, partition)
    except ReplayError as exc:
        raise bad_parameter(exc) from exc
    if dry_run:
        count_malformed(records)
    else:
        target = (
            f"{topic} from {from_}"
            + (f" to {to}" if to else "")
            + ("" if partition is None else f" p{partition}")
        )
        with audited("replay", target + (" --force" if force else "")) as note:
            try:
                asyncio.run(write_records(records, load(RedisSettings), force, _admission(topic, records)))
            except ResponseError as exc:  # e.g. a damaged queue key: every script on that queue fails
                written = note.count = sum(r.written for r in ranges)
                note.outcome = f"replay_refused: Redis refused a write: {exc}"
                Console(stderr=True).print(
                    f"[red]error[/] (replay_refused): Redis refused a write: {escape(str(exc))}. {written} "
                    "job(s) were written before it and stay written; repair the queue and run the same "
                    "replay again (dedup makes a rerun safe)."
                )
                raise typer.Exit(2) from exc
            finally:
                note.count = sum(r.written for r in ranges)
    _report(topic, ranges, dry_run=dry_run, as_json=as_json)


def _report(topic: str, ranges: list[PartitionRange], *, dry_run: bool, as_json: bool) -> None:
    if as_json:
        doc = {"topic": topic, "dry_run": dry_run, "partitions": [asdict(r) for r in ranges]}
        typer.echo(orjson.dumps(doc))
        return
    cols = ["partition", "from", "to (excl.)", "read", "malformed"]
    if not dry_run:
        cols += ["written", "duplicate", "forced", "live (not forced)", "unscheduled", "refused"]
    table = Table(*cols, title=f"jobq replay {topic}" + (" (dry run: nothing written)" if dry_run else ""))
    for r in ranges:
        row = [r.partition, r.start, r.end, r.read, r.malformed]
        if not dry_run:
            row += [r.written, r.duplicate, r.forced, r.active, r.unscheduled, r.refused]
        table.add_row(*(str(v) for v in row))
    Console().print(table)


def _admission(topic: str, records: list[tuple[PartitionRange, Message]]) -> Admission:
    """The relay's rules for ``topic``'s records (``jqcore.admission``): its routing, and the graph key
    from Consul when a record carries a gateway's signature (a range without graphs needs no Consul)."""
    keys = []
    if any(carries_signature(msg.headers()) for _, msg in records):
        keys.append(asyncio.run(read_graph_key(load(ConsulSettings), load(CronSettings).kv_prefix)))
    routing = load(RoutingSettings)
    return Admission(topic, routing if topic in routing.topics() else None, keys)
