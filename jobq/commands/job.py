"""``jobq job show|wait|retry|cancel|replay REF``: one job (or a few), named by its ref ``<queue>/<id>`` —
what a job handle's ``ref`` is (``jobq.Client``). Every call goes through the gateway with ``JOBQ_TOKEN``
(:mod:`jobq.commands.remote`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobq.commands.remote import (
    EXIT_NOT_OK,
    EXIT_TIMEOUT,
    confirm,
    fail,
    parse_duration,
    parse_ref,
    print_json,
    run,
    when,
)
from jqruntime.client import AsyncClient, AsyncJobHandle, JobqClient

__all__ = ["app", "decoded_result", "finish", "show_outcome", "wait_for", "waited"]

app = typer.Typer(
    help="One job by its ref <queue>/<id>: show it, wait for it, retry it (dead), cancel it, replay it.",
    no_args_is_help=True,
)

Json = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do it without asking (required without a terminal).")]
Timeout = Annotated[
    str | None, typer.Option(help="Give up waiting after this long (30s, 5m, 2h; default: no limit); exit 3.")
]
COLORS = {"completed": "green", "errored": "red", "canceled": "yellow", "expired": "yellow"}


def decoded_result(job: dict[str, Any]) -> Any:
    """A job's result as the handler returned it (kept as JSON text; other text as it is)."""
    raw = job.get("result")
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


async def get(jq: JobqClient, queue: str, job_id: str) -> dict[str, Any]:
    """The job as the gateway shows it; ``job_not_found`` (exit 2) when it has none."""
    found = await jq.get_job(queue, job_id)
    if found is None:
        fail("job_not_found", f"no job {queue}/{job_id} (not relayed yet, or forgotten)")
    return found


async def wait_for(jq: JobqClient, queue: str, job_id: str, timeout_ms: int | None) -> dict[str, Any] | None:
    """The job once it ended (polled as a job handle does); None when ``timeout_ms`` passed first."""
    handle: AsyncJobHandle[Any] = AsyncClient(jq).job(f"{queue}/{job_id}")
    try:
        async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
            await handle.wait()
    except TimeoutError:
        return None
    return await handle.info()


def show_outcome(ref: str, job: dict[str, Any] | None, timeout: str | None) -> None:
    """What a wait ended with, in one line (the result, or the last error's line)."""
    if job is None:
        typer.echo(f"{ref}: not ended after {timeout}", err=True)
        return
    state = str(job.get("state"))
    if state == "completed":
        typer.echo(f"{ref}: completed → {orjson.dumps(decoded_result(job)).decode()}")
    else:
        why = _line(job.get("last_error") or job.get("reason") or "")
        typer.echo(f"{ref}: {state}" + (f": {why}" if why else ""))


def finish(job: dict[str, Any] | None) -> None:
    """Exit as a wait's outcome says: 0 completed, 1 ended otherwise, 3 not ended in time."""
    if job is None:
        raise typer.Exit(EXIT_TIMEOUT)
    if job.get("state") != "completed":
        raise typer.Exit(EXIT_NOT_OK)


def waited(ref: str, job: dict[str, Any] | None) -> dict[str, Any]:
    """A wait's outcome as JSON: the ref, the state (``timeout``: not ended), result and error."""
    if job is None:
        return {"ref": ref, "state": "timeout", "result": None, "error": None}
    error = job.get("last_error") or job.get("reason") if job.get("state") != "completed" else None
    return {"ref": ref, "state": job.get("state"), "result": decoded_result(job), "error": error}


def _line(text: str) -> str:
    """The line of an error that says what it was: a traceback's last, else the first."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


def _took(start: int | None, end: int | None) -> str:
    if not start or not end or end < start:
        return ""
    ms = end - start
    return f"  ({ms} ms)" if ms < 10_000 else f"  ({ms / 1000:.1f} s)"


def _facts(job: dict[str, Any]) -> list[tuple[str, str]]:
    """What ``show`` lists of a job, label by label."""
    rows: list[tuple[str, str]] = [
        ("attempts", f"{job.get('attempt', 0)} of {job.get('max_attempts') or '-'}"),
        ("enqueued", when(job.get("enqueued_at"))),
    ]
    if job.get("run_at"):
        rows.append(("runs at", when(job.get("run_at"))))
    started, finished = job.get("started_at"), job.get("finished_at")
    rows.append(("started", when(started) + _took(job.get("enqueued_at"), started)))
    rows.append(("finished", when(finished) + _took(started, finished)))
    for label, key in (("reason", "reason"), ("worker", "worker"), ("from", "origin"), ("source", "source")):
        if job.get(key) and not (key == "source" and job[key] == "redis"):
            rows.append((label, str(job[key])))
    rows += [
        (key, orjson.dumps(job[key]).decode()) for key in ("args", "meta") if job.get(key) not in (None, {})
    ]
    if job.get("state") == "completed" or job.get("result") is not None:
        rows.append(("result", orjson.dumps(decoded_result(job)).decode()))
    return rows


def render(job: dict[str, Any]) -> None:
    """The job as ``jobq job show`` prints it: state, attempts with their errors, timings, result."""
    console = Console()
    state = str(job.get("state"))
    color = COLORS.get(state, "cyan")
    ref = f"{job.get('queue')}/{job.get('id')}"
    console.print(f"job [bold]{escape(ref)}[/]  {escape(str(job.get('kind')))}  [{color}]{state}[/]")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    for label, value in _facts(job):
        grid.add_row(label, escape(value))
    console.print(grid)
    history = [h for h in job.get("history") or [] if isinstance(h, dict)]
    if history:
        table = Table(title="attempts", title_justify="left", show_edge=False)
        for col in ("#", "at", "outcome", "error"):
            table.add_column(col, overflow="fold")
        for h in history:
            error = escape(_line(str(h.get("error") or "")))
            table.add_row(str(h.get("attempt", "")), when(h.get("at")), str(h.get("outcome", "")), error)
        console.print(table)
    if job.get("last_error"):
        console.print("[dim]last error[/]")
        console.print(escape(str(job["last_error"]).rstrip()), highlight=False)


@app.command("show")
def show(
    ref: Annotated[str, typer.Argument(help="The job: <queue>/<id>.")],
    as_json: Json = False,
) -> None:
    """A job: its state, attempts with their errors, timings, arguments and result.

    Live from Redis, or from the history once Redis forgot it."""
    queue, job_id = parse_ref(ref)
    job = run(lambda jq: get(jq, queue, job_id))
    if as_json:
        print_json(job)
    else:
        render(job)


@app.command("wait")
def wait(
    ref: Annotated[str, typer.Argument(help="The job: <queue>/<id>.")],
    timeout: Timeout = None,
    as_json: Json = False,
) -> None:
    """Wait until the job ends; print its result (or its error).

    Exit 0 completed, 1 errored, canceled or expired, 3 not ended within --timeout."""
    queue, job_id = parse_ref(ref)
    limit = None if timeout is None else parse_duration(timeout, "--timeout")
    job = run(lambda jq: wait_for(jq, queue, job_id, limit))
    if as_json:
        print_json(waited(ref, job))
    else:
        show_outcome(ref, job, timeout)
    finish(job)


def _refs(refs: Sequence[str]) -> dict[str, list[str]]:
    """Refs as ids per queue (each once, in the order given)."""
    out: dict[str, list[str]] = {}
    for ref in dict.fromkeys(refs):
        queue, job_id = parse_ref(ref)
        out.setdefault(queue, []).append(job_id)
    return out


@app.command("retry")
def retry(
    refs: Annotated[list[str], typer.Argument(help="Dead jobs: <queue>/<id> (one or more).")],
    yes: Yes = False,
    as_json: Json = False,
) -> None:
    """Retry dead jobs: each is pending again with fresh attempts, under its own id.

    The dead-letter retry of their ids (errored jobs: out of attempts, or failed for good). A finished
    job that is not dead is refused (`jobq job replay` makes a new job from it). Several refs ask first."""
    by_queue = _refs(refs)
    count = sum(len(ids) for ids in by_queue.values())
    confirm(f"retry {count} dead jobs?", yes=yes or count == 1, count=count)

    async def go(jq: JobqClient) -> dict[str, int]:
        for queue, ids in by_queue.items():  # every job checked before anything is retried
            for job_id in ids:
                state = (await get(jq, queue, job_id)).get("state")
                if state != "errored":
                    fail(
                        "job_not_dead",
                        f"job {queue}/{job_id} is {state}: only a dead job (errored) is retried;"
                        f" `jobq job replay {queue}/{job_id}` makes a new job from a finished one",
                    )
        done = {}
        for queue, ids in by_queue.items():
            body = await jq.request("POST", f"/v1/queues/{queue}/dead/retry", json={"ids": ids})
            done[queue] = int(body["retried"])
        return done

    done = run(go)
    retried = sum(done.values())
    if as_json:
        print_json({"retried": retried, "asked": count, "by_queue": done})
    else:
        typer.echo(f"retried {retried} of {count} job(s)")
    if retried < count:  # left the dead letters meanwhile (retried or purged by someone else)
        typer.echo(f"{count - retried} job(s) were no longer in the dead letters", err=True)
        raise typer.Exit(EXIT_NOT_OK)


@app.command("cancel")
def cancel(
    refs: Annotated[list[str], typer.Argument(help="Jobs: <queue>/<id> (one or more).")],
    reason: Annotated[str, typer.Option(help="Kept with each job.")] = "canceled with jobq job cancel",
    yes: Yes = False,
    as_json: Json = False,
) -> None:
    """Cancel jobs (several refs ask first).

    A waiting one is unscheduled, a running one's worker is told to stop, one not yet relayed is
    tombstoned; a finished one is left as it is (outcome already_<state>)."""
    by_queue = _refs(refs)
    count = sum(len(ids) for ids in by_queue.values())
    confirm(f"cancel {count} jobs?", yes=yes or count == 1, count=count)

    async def go(jq: JobqClient) -> list[dict[str, Any]]:
        out = []
        for queue, ids in by_queue.items():
            for job_id in ids:
                path = f"/v1/queues/{queue}/jobs/{job_id}"
                body = await jq.request("DELETE", path, params={"reason": reason}, idempotent=True)
                out.append(
                    {"ref": f"{queue}/{job_id}", "outcome": body["outcome"], "changed": body["changed"]}
                )
        return out

    outcomes = run(go)
    if as_json:
        print_json({"jobs": outcomes, "canceled": sum(1 for o in outcomes if o["changed"])})
        return
    for o in outcomes:
        typer.echo(f"{o['ref']}: {o['outcome']}")


@app.command("replay")
def replay(
    ref: Annotated[str, typer.Argument(help="A finished job: <queue>/<id>.")],
    key: Annotated[
        str | None, typer.Option("--idempotency-key", help="The same key twice makes one new job.")
    ] = None,
    as_json: Json = False,
) -> None:
    """A new job from a finished or dead one; prints the new job's ref.

    The same kind, arguments, meta and options, under a new id."""
    queue, job_id = parse_ref(ref)
    headers = {"Idempotency-Key": key} if key else {}

    async def go(jq: JobqClient) -> dict[str, Any]:
        path = f"/v1/queues/{queue}/jobs/{job_id}/replay"
        return dict(await jq.request("POST", path, headers=headers, idempotent=key is not None))

    body = run(go)
    new = f"{queue}/{body['ids'][0]}"
    if as_json:
        print_json({"ref": new, "replay_of": ref, "changed": body.get("changed", True)})
    else:
        typer.echo(new)
