"""``jobq enqueue QUEUE KIND [ARGS_JSON]``: one job through the gateway, by kind name (``AsyncClient``'s
``enqueue_kind`` with :class:`~jqruntime.client.JobOptions`), optionally waiting for its result."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer

from jobq.commands.job import finish, show_outcome, wait_for, waited
from jobq.commands.remote import parse_duration, print_json, run
from jqruntime.client import AsyncClient, JobOptions, JobqClient

__all__ = ["enqueue"]


def _meta(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"key=value, not {pair!r}", param_hint="--meta")
        out[key] = value
    return out


def _run_at(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: an ISO-8601 time, e.g. 2026-12-24T18:00:00+01:00 (no zone: UTC)",
            param_hint="--run-at",
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def enqueue(
    queue: Annotated[str, typer.Argument(help="The queue.")],
    kind: Annotated[str, typer.Argument(help="The job's kind (its handler's name).")],
    args: Annotated[str, typer.Argument(help="The job's args as JSON (default: null).")] = "null",
    delay: Annotated[str | None, typer.Option(help="Run it this much later: 30s, 5m, 2h, 1d.")] = None,
    run_at: Annotated[str | None, typer.Option(help="Run it at this ISO-8601 time (no zone: UTC).")] = None,
    priority: Annotated[
        int | None, typer.Option(help="Lower runs first (default: the enqueue time).")
    ] = None,
    job_id: Annotated[
        str | None, typer.Option("--id", help="The job's own id: enqueues of the same id are one job.")
    ] = None,
    meta: Annotated[
        list[str] | None, typer.Option(help="key=value kept with the job (repeat for more).")
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait until the job ends and print its result.")] = False,
    timeout: Annotated[
        str | None, typer.Option(help="With --wait: give up after this long (exit 3); default: no limit.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")] = False,
) -> None:
    """Enqueue one job; prints its ref <queue>/<id> once Kafka has it.

    Follow it with `jobq job show REF`. With --wait: exit 0 completed, 1 errored, canceled or expired,
    3 not ended within --timeout."""
    try:
        job_args: Any = orjson.loads(args)
    except orjson.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="ARGS_JSON") from None
    if delay is not None and run_at is not None:
        raise typer.BadParameter("give --delay or --run-at, not both", param_hint="--run-at")
    if timeout is not None and not wait:
        raise typer.BadParameter("--timeout goes with --wait", param_hint="--timeout")
    options = JobOptions(
        delay=None if delay is None else parse_duration(delay, "--delay") / 1000,
        run_at=None if run_at is None else _run_at(run_at),
        priority=priority,
        id=job_id,
        meta=_meta(meta or []) or None,
    )
    limit = None if timeout is None else parse_duration(timeout, "--timeout")

    async def go(jq: JobqClient) -> tuple[str, dict[str, Any] | None]:
        handle = await AsyncClient(jq).enqueue_kind(queue, kind, job_args, options)
        if not wait:
            return handle.ref, None
        if not as_json:
            typer.echo(handle.ref)
        return handle.ref, await wait_for(jq, queue, handle.id, limit)

    ref, job = run(go)
    if not wait:
        if as_json:
            print_json({"ref": ref, "queue": queue, "id": ref.partition("/")[2]})
        else:
            typer.echo(ref)
        return
    if as_json:
        print_json(waited(ref, job))
    else:
        show_outcome(ref, job, timeout)
    finish(job)
