"""``jobq apply -f jobq.toml`` and ``jobq export``: configuration as code (docs/operations.md).

``apply`` reads the file (:mod:`jobq.commands.config_file`), reads today's state through the gateway,
prints the **plan** — what it creates, updates and deletes, object by object, field by field — and carries
it out through the same gateway, so a token's policy and the audit trail apply to each change. Applying
the same file again changes nothing. ``--prune`` also removes the schedules and kill switches of the file's
scope that it no longer names (asking first: ``--yes``); ``--dry-run`` only plans (exit 1 when there is
something to change, so a CI job can check that a stack matches its file). ``--app module:registry`` adds
the cron schedules the application's handlers declare (``@registry.job(..., cron="*/5 * * * *")``).

``export`` writes today's state as such a file: ``jobq export | jobq apply -f -`` changes nothing.
"""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path
from typing import Annotated

import typer

from jobq.commands.config_file import ConfigFile, CronTable, dumps, load
from jobq.commands.plan import Change, Live, Plan, execute, export_doc, make_plan, read_live
from jobq.commands.remote import EXIT_ERROR, EXIT_NOT_OK, confirm, fail, print_json, run
from jqcore.errors import JobqError
from jqruntime.client import JobqClient

__all__ = ["apply", "export"]

AppOpt = Annotated[
    str | None,
    typer.Option("--app", help="module:registry whose handlers' cron= schedules join the file's."),
]
Json = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]


def _read(path: str) -> ConfigFile:
    where = "<stdin>" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail("config_invalid", f"{where}: cannot read it ({type(exc).__name__}: {exc})")
    try:
        return load(text, where)
    except JobqError as exc:
        fail(exc.code, exc.message)


def app_crons(spec: str | None) -> dict[str, CronTable]:
    """The schedules an application's handlers declare (``cron=``), by name."""
    if spec is None:
        return {}
    from worker.main import load_registry

    try:
        registry = load_registry(spec)
    except JobqError as exc:
        fail(exc.code, exc.message)
    out: dict[str, CronTable] = {}
    for s in registry.scheduled():
        name = s.schedule_name
        if name in out:
            fail(
                "config_invalid",
                f"--app {spec}: kinds {out[name].kind!r} and {s.kind!r} both name schedule {name!r}",
            )
        out[name] = CronTable.model_validate(
            {"queue": s.queue, "kind": s.kind, "cron": s.cron, "tz": s.cron_tz}
        )
    return out


def _crons(doc: ConfigFile, spec: str | None, where: str) -> dict[str, CronTable]:
    declared = app_crons(spec)
    twice = sorted(set(declared) & set(doc.cron))
    if twice:
        fail(
            "config_invalid",
            f"{where}: [cron.{twice[0]}] is also declared by a handler of --app {spec} (cron=): keep one",
        )
    return {**doc.cron, **declared}


def apply(
    file: Annotated[str, typer.Option("--file", "-f", help="The jobq.toml to apply (- reads stdin).")],
    app_spec: AppOpt = None,
    prune: Annotated[
        bool,
        typer.Option(help="Also remove the schedules and switches of the file's scope it does not name."),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only print the plan (exit 1 if it changes anything).")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Remove without asking (required without a terminal).")
    ] = False,
    as_json: Json = False,
) -> None:
    """Make the stack match a jobq.toml: print the plan, then apply it through the gateway.

    Queues, job types' options, cron schedules and kill switches the file names are created or updated;
    applying it again changes nothing. Exit 0 applied (or nothing to do), 1 --dry-run found changes,
    2 an error (what was applied before it is said)."""
    doc = _read(file)
    crons = _crons(doc, app_spec, "<stdin>" if file == "-" else file)

    async def plan_of(jq: JobqClient) -> tuple[Live, Plan]:
        live = await read_live(jq, lambda q: q in doc.queues)
        return live, make_plan(doc, live, crons=crons, prune=prune)

    _, plan = run(plan_of)
    if not as_json:
        for line in plan.lines():
            typer.echo(line)
    if dry_run or not plan.changes:
        if as_json:
            print_json({"plan": plan.as_dict(), "applied": []})
        raise typer.Exit(EXIT_NOT_OK if dry_run and plan.changes else 0)
    deletes = plan.count("delete")
    confirm(f"delete {deletes} object(s) the file no longer names?", yes=yes, count=deletes)
    done: list[Change] = []
    try:
        run(lambda jq: execute(jq, plan, done))
    except typer.Exit as stop:
        if stop.exit_code == EXIT_ERROR:
            typer.echo(f"applied {len(done)} of {len(plan.changes)} change(s) before the error", err=True)
        raise
    if as_json:
        print_json({"plan": plan.as_dict(), "applied": [c.as_dict() for c in done]})
    else:
        typer.echo(f"applied {len(done)} change(s)")


def export(
    queues: Annotated[
        str, typer.Option("--queues", help="Only queues matching this glob (billing.*).")
    ] = "*",
    app_spec: AppOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the file here (default: stdout).")
    ] = None,
) -> None:
    """Write today's state as a jobq.toml (`jobq export | jobq apply -f -` changes nothing).

    The queues matching --queues with their job types' options, every queue's options of job types (no
    --queues only), their cron schedules and kill switches. With --app, the schedules its handlers declare
    are left out (`jobq apply --app` brings them)."""
    skip = set(app_crons(app_spec))
    live = run(lambda jq: read_live(jq, lambda q: _matches(q, queues)))
    doc, left_out = export_doc(live, queues, skip)
    for why in left_out:
        typer.echo(f"left out: {why}", err=True)
    text = dumps(
        doc, f"jobq configuration as code: `jobq apply -f FILE` (docs/operations.md)\nqueues: {queues}"
    )
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


def _matches(queue: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(queue, pattern)
