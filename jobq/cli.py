"""The ``jobq`` command: the one composition root of every jobq part.

A bare ``pip install jobq`` has the client, the worker and this command; the other commands need an extra
(``jqcore.extras``). A command whose module cannot be imported for want of its extra stays listed, and
running it says which extra to install in one line.

Start-up costs what the command run needs: ``jobq --help`` lists every command from :data:`COMMANDS` and
imports none of their modules; running one imports its module only (``tests/unit/test_start_imports.py``).
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from jqcore.errors import JobqError
from jqcore.extras import MissingExtra, extra_for, install_hint, require
from jqcore.imports import REDIS_UNUSED, STRUCTLOG_UNUSED, preload
from jqcore.release import version
from jqstack.errors import StackError

__all__ = ["COMMANDS", "app", "main", "version"]

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
COMMANDS: list[tuple[str, str, str, tuple[str, ...]]] = [
    # (name, module under jobq.commands, attribute: a function is a command, a Typer a group; the extras
    # the module imports: listed as needing the first one not installed)
    ("bench", "bench", "bench", ()),
    ("demo", "demo", "demo", ("server",)),
    ("dev", "dev", "dev", ("server", "local")),
    ("worker", "worker", "worker", ()),
    ("gate", "gate", "gate", ()),
    ("relay", "relay", "relay", ()),
    ("scheduler", "scheduler", "scheduler", ()),
    ("dispatcher", "dispatcher", "dispatcher", ()),
    ("status", "status", "status", ("server",)),
    ("doctor", "doctor", "doctor", ("server",)),
    ("enqueue", "enqueue", "enqueue", ()),
    ("canary", "canary", "canary", ()),
    ("reconcile", "reconcile", "reconcile", ("server",)),
    ("replay", "replay", "replay", ("server",)),
    ("rebuild", "rebuild", "rebuild", ("server",)),
    ("apply", "apply", "apply", ("server",)),
    ("export", "apply", "export", ("server",)),
    ("rollout", "rollout", "rollout", ()),
    ("stack", "stack", "app", ()),
    ("job", "job", "app", ()),
    ("queue", "queue", "app", ()),
    ("dead", "dead", "app", ()),
    ("web", "web", "app", ()),
    ("topics", "topics", "app", ("server",)),
    ("spark", "spark", "app", ("server",)),
    ("cron", "cron", "app", ("server",)),
    ("graph", "graph", "app", ()),
    ("history", "history", "app", ()),
    ("switch", "switch", "app", ()),
    ("tokens", "tokens", "app", ()),
]
"""Every subcommand, in ``--help``'s order (commands, then groups, as typer lists them)."""

SUMMARIES = {
    "bench": "Run a benchmark scenario from a checkout (forwards to python -m loadtest).",
    "demo": (
        "Bring the whole stack up, run gateways, relays, workers and the canary, and show a demo workload."
    ),
    "dev": (
        "Run your app on the local stack: gateway, relay, scheduler, dashboard and a worker pool that "
        "restarts when your files change. Prints the dashboard, its sign-in and how to enqueue; Ctrl-C "
        "stops everything."
    ),
    "worker": "Run a worker pool: claim jobs of --queues from Redis and run the handlers of --app.",
    "gate": "Run the HTTP gateway: enqueue into Kafka (202 after Kafka's ack) and every job/queue operation.",
    "relay": "Relay jobs from Kafka into Redis for every topic whose Consul lock this process wins.",
    "scheduler": (
        "Keep the timers of every queue in Redis: promote due delayed and retried jobs, reap expired"
        " leases, collect garbage."
    ),
    "dispatcher": (
        'POST each job of a dispatch kind to its URL (PUT /v1/kinds/{kind} {"dispatch": {"url": ...}}).'
    ),
    "status": "Show the pipeline: Kafka lag per partition, relay lock holders, queue depths, canary health.",
    "doctor": (
        "Check a deployment as its services see it (the same JOBQ_* settings): Kafka topics against the"
        " declaration, Redis's eviction policy and persistence, Consul's ACLs and the relays' locks, "
        "clock offsets (this host, Redis, Consul, the processes' heartbeats), gateways, relays, "
        "schedulers and canaries alive, gateways ready, and the tokens a non-loopback gateway or "
        "dashboard accepts."
    ),
    "enqueue": "Enqueue one job; prints its ref <queue>/<id> once Kafka has it.",
    "canary": (
        "Send one heartbeat job through the gateway to every partition of every routed topic each "
        "interval, time each hop, and flag late or missing partitions (metrics jobq_canary_*, and `jobq"
        " status`)."
    ),
    "reconcile": (
        "Compare, per topic, gateway → Kafka → relay → Redis → workers; exit 1 if a balance does not hold."
    ),
    "replay": "Re-drive a range of a topic's jobs into Redis; dedup decides whether finished ids run again.",
    "rebuild": (
        "Rebuild the pending state from Kafka after Redis lost everything: finished and canceled jobs "
        "(the events topic says which) are not run again."
    ),
    "apply": "Make the stack match a jobq.toml: print the plan, then apply it through the gateway.",
    "export": "Write today's state as a jobq.toml (`jobq export | jobq apply -f -` changes nothing).",
    "rollout": (
        "Roll the Deployment MANIFEST names to MANIFEST's pod template and wait until every replica "
        "runs it (in a pod: the service account's token; it needs get and patch on that Deployment). "
        "No such Deployment yet: nothing to do. Exit 1 when it does not roll in time (Helm then stops "
        "the upgrade)."
    ),
    "stack": (
        "Provision, start, inspect and stop the local Kafka + Consul + Redis stack. The default stack "
        "uses the documented ports; each other --name runs beside it on ports of its own; --secure makes"
        " a stack of secured servers (TLS, SASL/ACL users, tokens per role)."
    ),
    "job": "One job by its ref <queue>/<id>: show it, wait for it, retry it (dead), cancel it, replay it.",
    "queue": (
        "Queues: list them with their depths, show one's settings, set its rate limit, pause, resume, purge "
        "its waiting jobs."
    ),
    "dead": "Dead letters: list them grouped by error, retry or purge them by queue, kind, error or age.",
    "web": "Run the web dashboard: the pipeline from HTTP to execution, seen and repaired.",
    "topics": (
        "jobq's Kafka topics: the routed job topics with their .retry/.dead, the events topic and the "
        "schedule topic, as declared in jqcore/topics.py."
    ),
    "spark": "Spark as a jobq producer (needs the spark extra: pyspark).",
    "cron": (
        "Cron and periodic schedules: kept in Consul KV (JOBQ_CRON_KV_PREFIX), fired by `jobq scheduler`."
    ),
    "graph": (
        "Task graphs: show one (its DAG, node states, results, errors, timings), list open ones, cancel,"
        " retry from failure."
    ),
    "history": (
        "What happened to jobs: `jobq history JOB_ID` (a job's timeline), reports and SQL over the "
        "history tables (JOBQ_HISTORY_PATH), and `jobq history run` that builds them from the events "
        "topic."
    ),
    "switch": "Kill switches: jobs matching one are not started (parked until it lifts, or dead-lettered).",
    "tokens": "Named, scoped tokens of the gateway and the dashboard (JOBQ_TOKENS_FILE, docs/security.md).",
}
"""Each command's help as ``jobq --help`` lists it (its first paragraph): tests/unit/test_start_imports.py
keeps them the commands' own."""


class Later(TyperCommand):
    """A command listed by its summary whose module is imported when it runs: ``jobq --help`` imports none
    of them. Listed as needing an extra when one of its module's extras is not installed."""

    def __init__(self, name: str, module: str, attribute: str, extras: tuple[str, ...], summary: str) -> None:
        try:
            require(f"jobq {name}", *extras)
        except MissingExtra as missing:
            from rich.markup import escape

            summary = escape(f"(needs the {missing.extra} extra: {install_hint(missing.extra)})")
        super().__init__(name, help=summary)
        self.module, self.attribute = module, attribute

    def load(self) -> Any:
        """The command itself (a click command or group), its module imported."""
        preload("redis", *REDIS_UNUSED)  # before the commands import them (jqcore.imports)
        preload("structlog", *STRUCTLOG_UNUSED)
        try:
            found: Any = getattr(importlib.import_module(f"jobq.commands.{self.module}"), self.attribute)
        except ImportError as exc:  # a library of an extra that is not installed
            extra = extra_for(exc)
            if extra is None:
                raise
            raise MissingExtra(f"jobq {self.name}", extra) from exc
        if not gc.isenabled():  # main() paused it: what the imports made lives as long as the process
            gc.freeze()
            gc.enable()
        holder = typer.Typer()
        holder.callback()(_nothing)  # a group, so the command keeps its name
        if isinstance(found, typer.Typer):
            holder.add_typer(found, name=self.name)
        elif self.name == "bench":  # forwards every argument to loadtest
            holder.command(self.name, context_settings=_PASS_THROUGH)(found)
        else:
            holder.command(self.name)(found)
        return typer.main.get_command(holder).commands[self.name]  # type: ignore[attr-defined]


def _nothing() -> None:
    pass


class Commands(TyperGroup):
    """jobq's commands: each a :class:`Later` until it runs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, module, attribute, extras in COMMANDS:
            self.add_command(Later(name, module, attribute, extras, SUMMARIES[name]))

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return name, command.load() if isinstance(command, Later) else command, rest


app = typer.Typer(
    name="jobq",
    help="jobq: a job queue that never loses an accepted job (HTTP -> Kafka -> Redis -> workers).",
    cls=Commands,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"jobq {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print jobq's version and exit."
        ),
    ] = False,
) -> None:
    pass


def _invoked(argv: list[str]) -> str:
    """``jobq`` and the (sub)command names at the start of ``argv``: what the user ran."""
    words, command = ["jobq"], typer.main.get_command(app)
    for arg in argv:
        subcommands = getattr(command, "commands", None)  # a group's (typer vendors click)
        sub = subcommands.get(arg) if isinstance(subcommands, dict) else None
        if sub is None:
            break
        words.append(arg)
        if isinstance(sub, Later):  # its module: imported to walk its subcommands
            try:
                sub = sub.load()
            except ImportError:
                break
        command = sub
    return " ".join(words)


def main() -> None:
    """Entry point: jobq errors become one readable line and exit code 2 (1 when trying again later may
    succeed: a server did not answer, as ``python -m <service>``), never a traceback; so does a
    library of an extra that is not installed (which extra to install, in one line). rich, which prints
    them, is imported when there is one to print.

    The cyclic garbage collector is paused until the command's module is imported (:meth:`Later.load`
    then freezes what the imports made out of its reach and resumes it): start-up allocates ~100,000
    objects — modules, classes, functions — that live as long as the process, and the ~130 collections
    that walked them were a tenth of a worker's CPU to its first claim."""
    gc.disable()
    try:
        app()
    except ImportError as exc:
        extra = extra_for(exc)
        if extra is None:
            raise
        from rich.console import Console
        from rich.markup import escape

        what = exc.what if isinstance(exc, MissingExtra) and exc.what.startswith("jobq ") else None
        line = f"{what or _invoked(sys.argv[1:])} needs the {extra} extra: {install_hint(extra)}"
        Console(stderr=True, soft_wrap=True).print(f"[red]error[/] (missing_extra): {escape(line)}")
        sys.exit(2)
    except (JobqError, StackError) as exc:
        from rich.console import Console

        Console(stderr=True).print(f"[red]error[/] ({exc.code}): {exc.message}")
        sys.exit(1 if isinstance(exc, JobqError) and exc.retriable else 2)  # 1: a supervisor tries again
    finally:
        gc.enable()  # a command that ended before its module was imported (--help, --version, an error)


if __name__ == "__main__":
    main()
