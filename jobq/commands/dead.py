"""``jobq dead ls|retry|purge``: the dead letters (errored jobs: out of attempts, or failed for good),
grouped by their error and filtered by queue, kind, error text, digest and age — through the gateway with
``JOBQ_TOKEN`` (:mod:`jobq.commands.remote`).

A **digest** names one error: 12 hex digits of the SHA-1 of the error's line (``Class: message``, a
traceback's last line) — the ``digest`` of the failure's lifecycle events, so ``jobq history errors``
shows the same one (:func:`jqcore.events.failure`). ``retry`` and ``purge`` act on exactly the jobs ``ls``
shows for the same filters, by id (``POST``/``DELETE /v1/queues/{queue}/dead`` with ``ids``), after naming
how many.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobq.commands.remote import EXIT_NOT_OK, confirm, parse_duration, print_json, run, when
from jqcore.events import failure
from jqruntime.client import JobqClient

__all__ = ["app"]

app = typer.Typer(
    help="Dead letters: list them grouped by error, retry or purge them by queue, kind, error or age.",
    no_args_is_help=True,
)

PAGE = 1000
"""Dead jobs read per request (the route's largest page), and ids retried or purged per request."""

QueueOpt = Annotated[str, typer.Option("--queue", "-q", help="A queue, or a glob of them (billing.*).")]
KindOpt = Annotated[str | None, typer.Option("--kind", help="Only jobs of this kind.")]
ErrorOpt = Annotated[
    str | None, typer.Option("--error", help="Only jobs whose error contains this text (any case).")
]
DigestOpt = Annotated[
    str | None, typer.Option("--digest", help="Only jobs whose error has this digest (its start will do).")
]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Only jobs that died this recently: 30m, 2h, 1d.")
]
Json = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do it without asking (required without a terminal).")]


@dataclass(frozen=True, slots=True)
class Filters:
    queue: str
    kind: str | None
    error: str | None
    digest: str | None
    since_ms: int | None

    @classmethod
    def of(
        cls, queue: str, kind: str | None, error: str | None, digest: str | None, since: str | None
    ) -> Filters:
        if error is not None and digest is not None:
            raise typer.BadParameter("give --error or --digest, not both", param_hint="--digest")
        cutoff = None if since is None else int(time.time() * 1000) - parse_duration(since, "--since")
        return cls(queue, kind, error.lower() if error else None, digest.lower() if digest else None, cutoff)

    def matches(self, job: dict[str, Any]) -> bool:
        if self.kind is not None and job.get("kind") != self.kind:
            return False
        if self.since_ms is not None and int(job.get("finished_at") or 0) < self.since_ms:
            return False
        text = str(job.get("last_error") or job.get("reason") or "")
        if self.error is not None and self.error not in text.lower():
            return False
        return self.digest is None or failure(text).digest.startswith(self.digest)

    def describe(self) -> str:
        said = [f"queue {self.queue}"] if self.queue != "*" else []
        said += [f"kind {self.kind}"] if self.kind else []
        said += [f"error containing {self.error!r}"] if self.error else []
        said += [f"digest {self.digest}"] if self.digest else []
        said += [f"died after {when(self.since_ms)}"] if self.since_ms else []
        return " and ".join(said) if said else "every queue"


async def select(jq: JobqClient, f: Filters) -> list[dict[str, Any]]:
    """Every dead job the token may see that matches ``f`` (each queue's dead letters read in pages)."""
    if any(c in f.queue for c in "*?["):
        visible = (await jq.request("GET", "/v1/queues"))["queues"]
        queues = [q for q in visible if fnmatch.fnmatchcase(q, f.queue)]
    else:
        queues = [f.queue]
    found = []
    for queue in queues:
        offset = 0
        while True:
            page = await jq.request(
                "GET", f"/v1/queues/{queue}/dead", params={"offset": offset, "limit": PAGE}
            )
            jobs = page["jobs"]
            found += [j for j in jobs if f.matches(j)]
            if len(jobs) < PAGE:
                break
            offset += len(jobs)
    return found


def groups(jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Jobs grouped by (queue, kind, error digest), the largest group first."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for job in jobs:
        text = str(job.get("last_error") or job.get("reason") or "")
        fail_ = failure(text)
        key = (str(job.get("queue")), str(job.get("kind")), fail_.digest)
        died = int(job.get("finished_at") or 0)
        group = out.setdefault(
            key,
            {
                "queue": key[0],
                "kind": key[1],
                "digest": fail_.digest,
                "error": f"{fail_.error}: {fail_.message}" if fail_.error else fail_.message,
                "count": 0,
                "first_ms": died,
                "last_ms": died,
                "ids": [],
            },
        )
        group["count"] += 1
        group["first_ms"], group["last_ms"] = min(group["first_ms"], died), max(group["last_ms"], died)
        group["ids"].append(job["id"])
    return sorted(out.values(), key=lambda g: (-g["count"], -g["last_ms"], g["queue"], g["kind"]))


@app.command("ls")
def ls(
    queue: QueueOpt = "*",
    kind: KindOpt = None,
    error: ErrorOpt = None,
    digest: DigestOpt = None,
    since: SinceOpt = None,
    jobs: Annotated[bool, typer.Option("--jobs", help="One row per job instead of per error.")] = False,
    as_json: Json = False,
) -> None:
    """The dead letters grouped by error, the largest group first (--jobs: each job).

    A group is a queue, a kind and an error digest, with its count and its first and last death."""
    f = Filters.of(queue, kind, error, digest, since)
    found = run(lambda jq: select(jq, f))
    if as_json:
        print_json({"total": len(found), "groups": groups(found)} if not jobs else {"jobs": found})
        return
    console = Console()
    if not found:
        console.print(f"no dead letter ({f.describe()})")
        return
    if jobs:
        table = Table(title=f"{len(found)} dead job(s)", title_justify="left")
        for col in ("job", "kind", "died", "attempts", "digest", "error"):
            table.add_column(col, no_wrap=col == "job", overflow="fold")
        for j in found:
            fail_ = failure(str(j.get("last_error") or j.get("reason") or ""))
            line = f"{fail_.error}: {fail_.message}" if fail_.error else fail_.message
            table.add_row(
                escape(f"{j['queue']}/{j['id']}"),
                escape(str(j.get("kind"))),
                when(j.get("finished_at")),
                str(j.get("attempt", "")),
                fail_.digest,
                escape(line),
            )
        console.print(table)
        return
    table = Table(title=f"{len(found)} dead job(s) ({f.describe()})", title_justify="left")
    for col in ("digest", "count", "queue", "kind", "error", "last died"):
        table.add_column(col, justify="right" if col == "count" else "left", overflow="fold")
    for g in groups(found):
        table.add_row(
            g["digest"],
            str(g["count"]),
            escape(g["queue"]),
            escape(g["kind"]),
            escape(g["error"]),
            when(g["last_ms"]),
        )
    console.print(table)


def _act(action: Literal["retry", "purge"], f: Filters, yes: bool, as_json: bool) -> None:
    found = run(lambda jq: select(jq, f))
    by_queue: dict[str, list[str]] = {}
    for job in found:
        by_queue.setdefault(str(job["queue"]), []).append(str(job["id"]))
    count = len(found)
    if count == 0:
        if as_json:
            print_json({"asked": 0, "retried" if action == "retry" else "purged": 0})
        else:
            typer.echo(f"no dead letter ({f.describe()})")
        return
    what = "retry" if action == "retry" else "delete"
    confirm(f"{what} {count} dead job(s) ({f.describe()})?", yes=yes, count=count)
    key = "retried" if action == "retry" else "purged"
    method, end = ("POST", "/dead/retry") if action == "retry" else ("DELETE", "/dead")

    async def go(jq: JobqClient) -> dict[str, int]:
        done: dict[str, int] = {}
        for queue, ids in by_queue.items():
            for i in range(0, len(ids), PAGE):  # never an empty list: that means "the oldest up to limit"
                part = ids[i : i + PAGE]
                body = await jq.request(
                    method, f"/v1/queues/{queue}{end}", json={"ids": part, "limit": len(part)}
                )
                done[queue] = done.get(queue, 0) + int(body[key])
        return done

    done = run(go)
    n = sum(done.values())
    if as_json:
        print_json({"asked": count, key: n, "by_queue": done})
    else:
        typer.echo(f"{key} {n} of {count} dead job(s)")
    if n < count:  # left the dead letters meanwhile (retried, purged or collected by someone else)
        typer.echo(f"{count - n} job(s) were no longer in the dead letters", err=True)
        raise typer.Exit(EXIT_NOT_OK)


@app.command("retry")
def retry(
    queue: QueueOpt = "*",
    kind: KindOpt = None,
    error: ErrorOpt = None,
    digest: DigestOpt = None,
    since: SinceOpt = None,
    yes: Yes = False,
    as_json: Json = False,
) -> None:
    """Retry the dead letters matching the filters, after naming how many.

    Each is pending again with fresh attempts, under its own id."""
    _act("retry", Filters.of(queue, kind, error, digest, since), yes, as_json)


@app.command("purge")
def purge(
    queue: QueueOpt = "*",
    kind: KindOpt = None,
    error: ErrorOpt = None,
    digest: DigestOpt = None,
    since: SinceOpt = None,
    yes: Yes = False,
    as_json: Json = False,
) -> None:
    """Delete the dead letters matching the filters now, after naming how many.

    Their ids can be enqueued again."""
    _act("purge", Filters.of(queue, kind, error, digest, since), yes, as_json)
