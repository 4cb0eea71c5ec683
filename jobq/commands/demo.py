"""``jobq demo``: the README's first command — the whole pipeline on this machine, with a demo workload.

It starts (and caches) Kafka, Consul and Redis, creates the topics, then runs as separate processes 2 gateways
(AZ labels az-a and az-b), 2 relays, 2 schedulers (which also ship the lifecycle events to Kafka), the history
pipeline (``jobq history run``, PySpark), the dashboard, a worker pool with the example handlers, a push
dispatcher with its example downstream (``examples.dispatch_hook``) and the heartbeat canary; it enqueues a
demo workload over HTTP (:mod:`jobq.demo_workload`) and shows it flowing with the status screen. On a secure
stack (``--stack`` of one made with ``jobq stack up --secure``) every process gets its own role's credentials
(``Stack.client_env``) and the gateways, canary and dashboard the stack's own tokens.
Ctrl-C stops every process cleanly (workers release what they run; nothing accepted is lost). ``--once``
exits 0 as soon as every demo job reached its expected state, and the history shows each in that state
(1 otherwise, after ``--timeout``): ``jobq history JOB_ID`` then tells any demo job's story.

The demo's folder (``--workdir``, default ``JOBQ_HOME/demo/<time>``) holds every process's log,
``pids.json`` (the child processes), ``urls.json`` (the dashboard's and the gateways' URLs, once they are
ready) and ``jobs.json`` (queue, id and expected final state of every demo job), so a restarted demo can be
checked against the jobs an interrupted one had enqueued, and a tool can reach the demo's pipeline
(``python -m loadtest.screenshots`` takes the dashboard's screenshots from it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console

from jobq import demo_workload as workload
from jobq.commands.stack import (
    StackTokens,
    existing_stack,
    history_of,
    open_stack,
    print_status,
    stack_tokens,
)
from jobq.commands.status import collect, render
from jqcore.settings.common import load_env
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import job_topics
from jqruntime.client import Gateway
from jqruntime.topicadmin import ensure
from jqstack.manager import Stack
from jqstack.paths import home, repo_root
from jqstack.pipeline import PipelineEnv, history_argv, service_argv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Child, Children, http_ok, python_m
from jqweb.overview import Sources

__all__ = ["demo"]

WEB_PORT = 28090
"""The dashboard's port in the demo (``JOBQ_WEB_PORT``'s default; another free one when it is taken)."""

NO_EXAMPLES = "jobq demo: the demo's handlers (examples/) come with a checkout; run ./run demo there"
"""Said where jobq is installed without its checkout (the wheel leaves ``examples/`` out)."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Processes(Children):
    """The demo's child processes, each logging into ``<folder>/<name>.log`` in its own session (Ctrl-C
    reaches the demo only, which stops them all with one grace period)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(grace_s=20.0)
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        return self.start(name, argv, output=self.folder / f"{name}.log", env=env)


@dataclass(frozen=True)
class Running:
    """What the demo waits on before it enqueues: the gateways (and their processes) and the dashboard."""

    gateways: list[tuple[Gateway, Child]]
    web: Child
    web_port: int
    hook_url: str
    """The push-dispatch kind's downstream (``examples.dispatch_hook``)."""

    def urls(self) -> dict[str, object]:
        """Where the dashboard and the gateways answer (``urls.json``)."""
        return {
            "dashboard": f"http://127.0.0.1:{self.web_port}/",
            "gateways": [{"url": g.url, "az": g.az} for g, _ in self.gateways],
        }

    def wait_ready(self) -> None:
        for gateway, gate in self.gateways:  # fails at once if a gateway exits
            gate.wait_ready(http_ok(f"{gateway.url}/readyz"), timeout_s=60)
        self.web.wait_ready(http_ok(f"http://127.0.0.1:{self.web_port}/healthz"), timeout_s=60)


def _start(procs: Processes, spec: PipelineEnv) -> Running:
    """Start every process of the demo's pipeline."""
    gateways: list[tuple[Gateway, Child]] = []
    for az in ("az-a", "az-b"):
        port = free_port()
        gate = procs.run(f"gate-{az}", service_argv("gateway"), spec.gateway(port, az=az))
        gateways.append((Gateway(f"http://127.0.0.1:{port}", az), gate))
    for name in ("relay-1", "relay-2"):
        procs.run(name, service_argv("relay"), spec.relay(name))
    for name in ("scheduler-1", "scheduler-2"):  # they split the demo's queues; either alone keeps them all
        procs.run(name, service_argv("scheduler"), spec.scheduler(name, queues=workload.SCHEDULED))
    # the history of the stack's events (JOBQ_HISTORY_PATH): `jobq history JOB_ID` reads it
    procs.run("history", history_argv(), spec.history(trigger_s=2))
    web_port = WEB_PORT if _free(WEB_PORT) else free_port()
    web = procs.run("web", service_argv("web"), spec.web(web_port))
    serve = ",".join([*workload.QUEUES, *(f"canary.{t}" for t in workload.TOPICS)])
    worker = worker_argv(serve, app=workload.APP, concurrency=20, grace_s=5)
    procs.run("worker", worker, spec.worker())
    hook_port = free_port()  # the dispatcher POSTs demo.hook jobs there; it calls back through a gateway
    procs.run("hook", python_m("examples.dispatch_hook", "--port", str(hook_port)), spec.worker())
    callbacks = spec.dispatcher(workload.HOOK_QUEUE, callback_url=gateways[0][0].url)
    procs.run("dispatcher", service_argv("dispatcher"), callbacks)
    urls = [f"{g.url}@{g.az}" for g, _ in gateways]
    procs.run("canary", service_argv("canary"), spec.canary(urls, interval_s=10, late_after_s=20))
    return Running(gateways, web, web_port, f"http://127.0.0.1:{hook_port}/hook")


def _stack_up(console: Console, stack_name: str) -> Stack:
    started = time.monotonic()
    stack = open_stack("default") if stack_name == "default" else existing_stack(stack_name)
    stack.provision()  # cached; on the first run each fetch and build says what it does, and how far
    with console.status("starting Kafka, Consul and Redis..."):
        stack.up()
    console.print(f"stack up in {time.monotonic() - started:.1f}s")
    if not print_status(stack):
        raise typer.Exit(1)
    return stack


def demo(
    once: Annotated[
        bool, typer.Option(help="Exit 0 when every demo job reached its expected state.")
    ] = False,
    duration: Annotated[
        float, typer.Option(help="Run this many seconds, then stop (0: until Ctrl-C).")
    ] = 0.0,
    timeout: Annotated[
        float, typer.Option(help="With --once: give up (exit 1) after this many seconds.")
    ] = 300.0,
    stack_name: Annotated[
        str,
        typer.Option(
            "--stack",
            help="Run on this stack (other than `default`, it must exist). On a secure stack every process "
            "uses its own role's credentials and the stack's own tokens.",
        ),
    ] = "default",
    workdir: Annotated[
        Path | None,
        typer.Option(help="Folder for logs, pids.json and jobs.json (default: JOBQ_HOME/demo/<time>)."),
    ] = None,
) -> None:
    """Bring the whole stack up, run gateways, relays, workers and the canary, and show a demo workload."""
    console = Console()
    if not (repo_root() / "examples" / "demo_app.py").is_file():
        typer.echo(NO_EXAMPLES, err=True)
        raise typer.Exit(2)
    signal.signal(signal.SIGINT, _on_sigint)  # before any asyncio.run: it then keeps this handler
    stack = _stack_up(console, stack_name)
    # the history of this stack's events lives with the stack (a purge removes both); a given path wins
    history = os.environ.get("JOBQ_HISTORY_PATH") or str(history_of(stack.root))
    tokens = stack_tokens(stack)
    spec = workload.pipeline_env(stack.client_env, tokens, history)
    ensure(load_env(KafkaSettings, spec.common()), job_topics(workload.TOPICS))
    folder = workdir or home() / "demo" / time.strftime("%Y%m%d-%H%M%S")
    procs = Processes(folder)
    try:
        running = _start(procs, spec)
        _write_atomic(folder / "pids.json", orjson.dumps(procs.pids()))
        console.print(f"processes started; logs in {folder}")
        running.wait_ready()
        _write_atomic(folder / "urls.json", orjson.dumps(running.urls()))
        console.print(
            f"[bold]dashboard:[/] http://127.0.0.1:{running.web_port}/  ({_sign_in(tokens, stack_name)})"
        )
        gateways = [g for g, _ in running.gateways]
        jobs = asyncio.run(workload.enqueue(gateways, tokens.gate, running.hook_url))
        _write_atomic(folder / "jobs.json", orjson.dumps(jobs))
        console.print(f"enqueued {len(jobs)} demo jobs over HTTP (202 = in Kafka)")
        follow = _Follow(console, procs, gateways, tokens.gate, jobs, workload.sources(spec))
        ok = follow.run(once=once, duration=duration, timeout=timeout)
    except KeyboardInterrupt:
        ok = True
    finally:
        with console.status("stopping every process (workers release what they run)..."):
            killed = procs.stop()
        if killed:
            console.print(f"[yellow]had to kill:[/] {', '.join(killed)}")
    console.print("stopped; the stack keeps running (`jobq stack down` stops it)")
    if not ok:
        raise typer.Exit(1)


def _sign_in(tokens: StackTokens, stack_name: str) -> str:
    """How to sign in to the dashboard; a secure stack's tokens are only shown by ``jobq stack env``."""
    if tokens.secret:
        return (
            f"sign in with the tokens of `jobq stack env --name {stack_name} --role web` (JOBQ_WEB_*_TOKENS)"
        )
    return f"sign in with [bold]{tokens.web_admin}[/] to act, {tokens.web_read} to look"


_STOP = threading.Event()
"""Set by Ctrl-C. ``asyncio.run`` turns SIGINT into a task cancellation, which a library may swallow
(on Python 3.11 a lost Ctrl-C left the demo running): the demo installs its own handler, so the interrupt
is remembered — and raised at once outside an event loop — and the status loop checks the flag between
polls."""


def _on_sigint(_signum: int, _frame: object) -> None:
    _STOP.set()
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop running: stop right here
        raise KeyboardInterrupt from None
    # Inside an asyncio.run (a status poll, bounded by the client's timeouts): an exception raised between
    # two steps of a task can strand another task that waits on it, and asyncio.run's cleanup then waits
    # forever (seen in CI). The poll finishes; the follow loop sees the flag right after it.


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


@dataclass(frozen=True)
class _Follow:
    """The status screen every 2 s until the demo's end (Ctrl-C, ``--duration``, or with ``--once``:
    every job done and in the history, or ``--timeout``)."""

    console: Console
    procs: Processes
    gateways: list[Gateway]
    token: str
    jobs: list[workload.Job]
    sources: Sources

    def run(self, *, once: bool, duration: float, timeout: float) -> bool:
        started = time.monotonic()
        while True:
            if _STOP.is_set():
                raise KeyboardInterrupt
            done = self._poll()
            if done is None:
                return False
            elapsed = time.monotonic() - started
            if once and done:
                self.console.print(
                    "[green]every demo job reached its expected state, and the history says so[/]"
                )
                return True
            if once and elapsed > timeout:
                self.console.print("[red]timed out waiting for the demo jobs[/]")
                return False
            if duration and elapsed > duration:
                return True
            if _STOP.wait(2):
                raise KeyboardInterrupt

    def _poll(self) -> bool | None:
        """Show the pipeline and the demo jobs; whether every job is done and in the history (None: a
        process exited)."""
        jobs, console = self.jobs, self.console
        tally = asyncio.run(workload.states(self.gateways, self.token, jobs))
        archived = workload.in_history(jobs, self.sources.history)
        console.print(render(collect(self.sources), console.width))
        console.print(f"demo jobs in their expected state: {tally['ok']}/{len(jobs)}  others: {tally}")
        console.print(
            f"demo jobs in the history in that state: {archived}/{len(jobs)} (`jobq history JOB_ID`)"
        )
        if again := self.procs.revive():
            _write_atomic(self.procs.folder / "pids.json", orjson.dumps(self.procs.pids()))
            console.print(f"[yellow]started again:[/] {', '.join(again)} (a server it needs did not answer)")
        if dead := self.procs.dead():
            console.print(f"[red]a process exited:[/] {', '.join(dead)} (see its log in {self.procs.folder})")
            return None
        return tally["ok"] == len(jobs) and archived == len(jobs)
