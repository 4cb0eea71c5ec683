"""``jobq dev``: your application on the local stack — what ``jobq demo`` is for the demo, for your code.

One command brings up the stack (Kafka, Consul and Redis, as ``jobq stack up`` does; cached), creates the
topics, and runs as separate processes (``jqstack.pipeline``'s wiring, the demo's) a gateway, a relay, a
scheduler, the dashboard and a worker pool running the application's registry (``--app``) on its queues
(``--queues``, else every queue its kinds name). It prints the dashboard's URL and how to sign in, and a
``curl`` and a Python line that enqueue into the application's queues through the gateway
(``JOBQ_URL``/``JOBQ_TOKEN``, what ``jobq.Client.from_env()`` reads).

When a ``.py`` file of the application changes (its top package's folder, or ``--watch``; changes within
``--debounce-ms`` are taken together) the application is imported again in a child process
(:mod:`jobq.devapp`) and, if it imports, the worker is stopped gracefully (running jobs finish within its
grace, the rest are released without spending an attempt) and started again on the new code; if it does
not, the error is shown, the worker stays stopped and the next change is tried. The worker writes to this
terminal (handler logs, failed attempts with their tracebacks); the other processes to log files in the
work folder (``--workdir``, default ``JOBQ_HOME/dev/<time>``), beside ``dev.json`` (its own pid, the URLs and
every process started, workers included). A worker that does not start (a start-up hook raised) is said,
and the next change retries.

Ctrl-C (or SIGTERM) stops every process it started, and the stack's servers too when this command started
them (``--keep-stack`` keeps them; a stack already running is left running).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import orjson
import typer
import watchfiles
from rich.console import Console
from rich.markup import escape

from jobq.commands.stack import existing_stack, open_stack, print_status, stack_tokens
from jobq.devapp import AppInfo, ProbeFailed, curl_line, probe, python_line
from jqcore.routing import QueueUnrouted, RoutingSettings
from jqcore.settings.common import load_env
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings, EventSettings, FarSettings
from jqcore.topics import declaration
from jqruntime.topicadmin import apply
from jqstack.errors import StackError
from jqstack.manager import Stack
from jqstack.paths import home
from jqstack.pipeline import PipelineEnv, service_argv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Child, Children, http_ok, start, stop_pids

__all__ = ["dev"]

GATE_PORT, WEB_PORT = 28080, 28090
"""The gateway's and the dashboard's ports (``jobq stack env``'s ``JOBQ_URL``, the demo's dashboard); other
free ones when they are taken."""
GRACE_S = 5.0
"""What running jobs get to finish when the worker is reloaded or stopped."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port(given: int | None, default: int) -> int:
    if given is not None:
        return given
    return default if _free(default) else free_port()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@dataclass
class DevLoop:
    """The processes of one ``jobq dev``: the services (started once) and the worker (started again on
    every reload), with what was printed about them in ``dev.json``."""

    app: str
    app_dir: Path
    spec: PipelineEnv
    folder: Path
    queues_given: tuple[str, ...] | None
    concurrency: int
    console: Console
    services: Children = field(default_factory=lambda: Children(grace_s=10.0))
    worker: Child | None = None
    scheduler: Child | None = None
    started: list[dict[str, object]] = field(default_factory=list)
    """Every process started, in order (``name``, ``pid``): ``dev.json``'s ``processes``."""
    urls: dict[str, str] = field(default_factory=dict)
    queues: tuple[str, ...] = ()

    # ---- the application ------------------------------------------------------------------------
    def app_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the application's folder first on ``PYTHONPATH``; no ``.pyc`` written (a file
        saved twice within a second with the same size would otherwise be read from a stale one)."""
        path = os.pathsep.join(p for p in (str(self.app_dir), env.get("PYTHONPATH")) if p)
        return {**env, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}

    def probe(self) -> AppInfo:
        return probe(self.app, self.app_env(self.spec.common()))

    def queues_of(self, info: AppInfo) -> tuple[str, ...]:
        queues = self.queues_given or info.queues
        if not queues:
            raise typer.BadParameter(f"{self.app} registers no kind: no queue to serve", param_hint="--app")
        routing = load_env(RoutingSettings, self.spec.common())
        for queue in queues:
            try:
                routing.route(queue)
            except QueueUnrouted as exc:
                raise typer.BadParameter(exc.message, param_hint="--queues") from None
        return queues

    # ---- processes ------------------------------------------------------------------------------
    def _record(self, child: Child) -> Child:
        self.started.append({"name": child.name, "pid": child.pid})
        self.write_state()
        return child

    def service(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        return self._record(self.services.start(name, argv, output=self.folder / f"{name}.log", env=env))

    def start_scheduler(self) -> None:
        env = self.spec.scheduler("dev", queues=",".join(self.queues))
        self.scheduler = self._record(
            start("scheduler", service_argv("scheduler"), output=self.folder / "scheduler.log", env=env)
        )

    def start_worker(self) -> Child | None:
        """A worker on the application's queues, writing to this terminal, once it claims; None when it
        did not start (a start-up hook of the application raised, say: said, and the next change retries)."""
        port = free_port()
        env = {**self.app_env(self.spec.worker()), "JOBQ_WORKER_METRICS_PORT": str(port)}
        argv = worker_argv(",".join(self.queues), app=self.app, concurrency=self.concurrency, grace_s=GRACE_S)
        number = sum(1 for p in self.started if str(p["name"]).startswith("worker"))
        self.worker = worker = self._record(start(f"worker-{number + 1}", argv, output="inherit", env=env))
        try:
            worker.wait_ready(http_ok(f"http://127.0.0.1:{port}/readyz"), timeout_s=60, what="the worker")
        except StackError as exc:  # exited while starting (its output is above), or never ready
            self.stop_worker()
            said = exc.message.split(" Log tail:")[0].rstrip(".")
            self.console.print(f"[red]{escape(said)}[/]: save a change to start it again")
            return None
        return worker

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop(grace_s=GRACE_S + 10)
            self.worker = None

    def stop_all(self) -> list[str]:
        """Stop every process (one shared grace); the names of those that had to be killed."""
        owned = [*self.services, *(c for c in (self.scheduler, self.worker) if c is not None)]
        killed = set(stop_pids([c.pid for c in owned], grace_s=GRACE_S + 10))
        self.worker = self.scheduler = None
        return [c.name for c in owned if c.pid in killed]

    def write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "app": self.app,
            "queues": list(self.queues),
            **self.urls,
            "processes": self.started,
        }
        tmp = self.folder / "dev.json.tmp"
        tmp.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2))
        tmp.replace(self.folder / "dev.json")

    def dead_service(self) -> str | None:
        dead = self.services.dead()
        if self.scheduler is not None and not self.scheduler.running():
            dead.append(f"scheduler (exit {self.scheduler.returncode})")
        return ", ".join(dead) or None

    # ---- reloads --------------------------------------------------------------------------------
    def reload(self, changed: set[tuple[watchfiles.Change, str]]) -> None:
        """The application changed: import it again; if it imports, restart the worker on it (and the
        scheduler, when the queues changed)."""
        names = sorted({Path(path).name for _, path in changed})
        self.console.print(
            f"[bold]changed:[/] {escape(', '.join(names[:5]))}{' ...' if len(names) > 5 else ''}"
        )
        began = time.monotonic()
        try:
            info = self.probe()
            queues = self.queues_of(info)
        except (ProbeFailed, typer.BadParameter) as exc:
            self.stop_worker()
            message = exc.message if isinstance(exc, typer.BadParameter) else str(exc)
            self.console.print("[red]the application does not load; the worker is stopped until it does:[/]")
            print(message, flush=True)
            return
        self.stop_worker()
        if queues != self.queues:
            self.queues = queues
            if self.scheduler is not None:
                self.scheduler.stop(grace_s=10)
            self.start_scheduler()
            self.console.print(f"queues now: {', '.join(queues)}")
        worker = self.start_worker()
        if worker is not None:
            took = time.monotonic() - began
            said = f"[green]worker reloaded[/] (pid {worker.pid}) in {took:.1f}s"
            self.console.print(said, highlight=False)

    def revive(self) -> None:
        """A worker that exited on its own (a crash at start-up) is said once; the next change restarts it."""
        if self.worker is not None and not self.worker.running():
            self.console.print(
                f"[red]the worker exited ({self.worker.returncode}); save a change to start it again[/]"
            )
            self.worker = None


def _stack(console: Console, name: str) -> tuple[Stack, list[str]]:
    """The stack, up; the servers this call started (they were not running)."""
    stack = open_stack("default") if name == "default" else existing_stack(name)
    before = {row["name"] for row in stack.status() if row["running"]}
    stack.provision()  # cached; on the first run each fetch and build says what it does, and how far
    with console.status("starting Kafka, Consul and Redis..."):
        stack.up()
    if not print_status(stack):
        raise typer.Exit(1)
    return stack, [s.name for s in stack.servers if s.name not in before]


def _spec(stack: Stack) -> PipelineEnv:
    tokens = stack_tokens(stack)
    settings = {
        **tokens.web_settings(),
        "JOBQ_RELAY_SESSION_TTL_S": "10",  # a relay stopped hard hands its topics on within seconds
        "JOBQ_RELAY_LOCK_DELAY_S": "1",
        "JOBQ_SCHEDULER_GROUP": os.environ.get("JOBQ_SCHEDULER_GROUP", "dev"),  # not the demo's group
    }
    return PipelineEnv(stack.client_env, token=tokens.gate, settings=settings)


def _topics(console: Console, spec: PipelineEnv) -> None:
    """Every topic of the routing (by default ``jobs.default``) with its sides, the events and the audit
    topic, as ``jobq topics create`` makes them."""
    env = spec.common()
    names = load_env(RoutingSettings, env).topics()
    events, far, audit = (
        load_env(EventSettings, env),
        load_env(FarSettings, env),
        load_env(AuditSettings, env),
    )
    done = apply(load_env(KafkaSettings, env), declaration(names, events, far, audit=audit))
    for problem in done.left:
        console.print(f"[yellow]topic:[/] {escape(problem.line)}")


def dev(
    app: Annotated[
        str,
        typer.Option(
            envvar="JOBQ_WORKER_APP",
            help="module:attribute of your Registry (attribute default: registry), e.g. myapp.jobs:registry.",
        ),
    ],
    queues: Annotated[
        str | None,
        typer.Option(help="Comma-separated queues the worker serves (default: every queue the kinds name)."),
    ] = None,
    app_dir: Annotated[
        Path, typer.Option(help="The folder --app is imported from (first on the worker's PYTHONPATH).")
    ] = Path("."),
    watch: Annotated[
        list[Path] | None,
        typer.Option(help="Watch these paths for .py changes instead of the app's package (repeatable)."),
    ] = None,
    reload: Annotated[
        bool, typer.Option("--reload/--no-reload", help="Restart the worker when the app's files change.")
    ] = True,
    debounce_ms: Annotated[
        int, typer.Option(min=50, help="Changes this close together make one reload.")
    ] = 400,
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs the worker runs at once.")] = 10,
    port: Annotated[
        int | None, typer.Option(help="The gateway's port (default 28080, else a free one).")
    ] = None,
    web_port: Annotated[
        int | None, typer.Option(help="The dashboard's port (default 28090, else a free one).")
    ] = None,
    stack_name: Annotated[
        str, typer.Option("--stack", help="Run on this stack (other than `default`, it must exist).")
    ] = "default",
    keep_stack: Annotated[
        bool, typer.Option("--keep-stack", help="Leave the stack's servers running at the end.")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="Folder for the logs and dev.json (default: JOBQ_HOME/dev/<time>).")
    ] = None,
) -> None:
    """Run your app on the local stack: gateway, relay, scheduler, dashboard and a worker pool that
    restarts when your files change. Prints the dashboard, its sign-in and how to enqueue; Ctrl-C stops
    everything."""
    console = Console(soft_wrap=True)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends it as Ctrl-C does: everything stopped
    # Ctrl-C stops everything even when started where SIGINT is ignored (a background job of a script:
    # Python keeps an inherited SIG_IGN instead of raising KeyboardInterrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = (workdir or home() / "dev" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    given = tuple(q.strip() for q in queues.split(",") if q.strip()) if queues else None
    stack, started_servers = _stack(console, stack_name)
    loop = DevLoop(app, app_dir.resolve(), _spec(stack), folder, given, concurrency, console)
    try:
        info = loop.probe()
    except ProbeFailed as exc:
        console.print(f"[red]error:[/] {escape(app)} does not load:")
        print(exc, flush=True)
        _stop_stack(console, stack, started_servers, keep_stack)
        raise typer.Exit(2) from None
    try:
        loop.queues = loop.queues_of(info)
        _topics(console, loop.spec)
        _run(loop, stack, info, port, web_port, watch, reload, debounce_ms)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stop is bounded: a second Ctrl-C waits for it
        with console.status("stopping every process (the worker releases what it runs)..."):
            killed = loop.stop_all()
        if killed:
            console.print(f"[yellow]had to kill:[/] {', '.join(killed)}")
        _stop_stack(console, stack, started_servers, keep_stack)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _stop_stack(console: Console, stack: Stack, started: list[str], keep: bool) -> None:
    if started and not keep:
        with console.status("stopping the stack's servers this command started..."):
            stack.down()
        console.print("stopped; so is the stack (it was not running before)")
    else:
        console.print("stopped; the stack keeps running (`jobq stack down` stops it)")


def _run(
    loop: DevLoop,
    stack: Stack,
    info: AppInfo,
    port: int | None,
    web_port: int | None,
    watch: list[Path] | None,
    reload: bool,
    debounce_ms: int,
) -> None:
    spec = loop.spec
    gate_port, dash_port = _port(port, GATE_PORT), _port(web_port, WEB_PORT)
    gate = loop.service("gate", service_argv("gateway"), spec.gateway(gate_port))
    loop.service("relay", service_argv("relay"), spec.relay("dev-relay"))
    loop.start_scheduler()
    web = loop.service("web", service_argv("web"), spec.web(dash_port))
    url, dashboard = f"http://127.0.0.1:{gate_port}", f"http://127.0.0.1:{dash_port}/"
    loop.urls = {"gateway": url, "dashboard": dashboard, "folder": str(loop.folder)}
    gate.wait_ready(http_ok(f"{url}/readyz"), timeout_s=60)
    web.wait_ready(http_ok(f"{dashboard}healthz"), timeout_s=60)
    loop.start_worker()
    paths = [p.resolve() for p in watch] if watch else [info.watch]
    _banner(loop, stack, info, url, dashboard, paths if reload else [])
    while True:
        if not reload:
            time.sleep(1)
            _check(loop)
            continue
        for changes in watchfiles.watch(
            *paths,
            watch_filter=watchfiles.PythonFilter(),
            debounce=max(debounce_ms * 4, 1600),
            step=debounce_ms,
            rust_timeout=1000,
            yield_on_timeout=True,
        ):
            _check(loop)
            if changes:
                loop.reload(changes)
        return  # the watched paths were deleted


def _check(loop: DevLoop) -> None:
    if again := loop.services.revive():
        loop.console.print(f"[yellow]started again:[/] {', '.join(again)} (a server it needs did not answer)")
    dead = loop.dead_service()
    if dead:
        loop.console.print(f"[red]a process exited:[/] {dead} (see its log in {loop.folder})")
        raise typer.Exit(1)
    loop.revive()


def _banner(loop: DevLoop, stack: Stack, info: AppInfo, url: str, dashboard: str, paths: list[Path]) -> None:
    console, tokens = loop.console, stack_tokens(stack)
    console.print(
        f"[bold green]jobq dev[/]: {escape(loop.app)} on {', '.join(loop.queues)}  (logs in {loop.folder})",
        highlight=False,
    )
    if tokens.secret:
        sign_in = f"sign in with the tokens of `jobq stack env --name {stack.spec.name} --role web`"
        token = "$JOBQ_TOKEN"  # `jobq stack env --name ... --role admin` exports it
    else:
        sign_in = f"sign in with {tokens.web_admin} (to act) or {tokens.web_read} (to look)"
        token = tokens.gate
    console.print(f"  dashboard  {dashboard}  {sign_in}", highlight=False)
    console.print(f"  gateway    {url}  token {token}  (JOBQ_URL, JOBQ_TOKEN)", highlight=False)
    print("  enqueue with curl:", flush=True)
    print(f"    {curl_line(url, token, info.kinds, loop.queues)}", flush=True)
    print("  or from Python (jobq.Client.from_env() reads JOBQ_URL and JOBQ_TOKEN):", flush=True)
    print(f"    {python_line(url, token, info.kinds, loop.queues)}", flush=True)
    if paths:
        watched = ", ".join(str(p) for p in paths)
        console.print(f"  watching {watched}: a saved .py file restarts the worker", highlight=False)
    console.print("  Ctrl-C stops everything", highlight=False)
