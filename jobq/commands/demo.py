"""``jobq demo``: the README's first command — the whole pipeline on this machine, with a demo workload.

It starts (and caches) Kafka, Consul and Redis, creates the topics, then runs as separate processes
2 gateways (AZ labels az-a and az-b), 2 relays, 2 schedulers (which also ship the lifecycle events to
Kafka), the history pipeline (``jobq history run``, PySpark), a worker pool with the example handlers
and the heartbeat canary; it enqueues a demo workload over HTTP (plain, delayed, prioritized, exclusive,
flaky and failing jobs, so the dead-letter list fills; a cron schedule every 10 s) and shows it flowing
with the status screen.
Ctrl-C stops every process cleanly (workers release what they run; nothing accepted is lost). ``--once``
exits 0 as soon as every demo job reached its expected state, and the history shows each in that state
(1 otherwise, after ``--timeout``): ``jobq history JOB_ID`` then tells any demo job's story.

The demo's folder (``--workdir``, default ``JOBQ_HOME/demo/<time>``) holds every process's log,
``pids.json`` (the child processes) and ``jobs.json`` (queue, id and expected final state of every demo
job), so a restarted demo can be checked against the jobs an interrupted one had enqueued.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from jobq.commands.stack import (
    DEV_TOKEN,
    DEV_WEB_ADMIN,
    DEV_WEB_READ,
    existing_stack,
    history_of,
    open_stack,
    print_status,
)
from jobq.commands.status import collect, render
from jqcore.client import Gateway, JobqClient
from jqcore.errors import JobqError
from jqcore.history import HistoryStore
from jqcore.kafka import ensure_topics
from jqcore.routing import RoutingSettings
from jqcore.settings import ConsulSettings, HistorySettings, KafkaSettings, RedisSettings, RelayKeys, load
from jqstack.paths import home, repo_root
from jqstack.procs import free_port
from jqstack.supervise import Child, Children, http_ok, python_m
from jqweb.overview import Sources

__all__ = ["demo"]

TOKEN = DEV_TOKEN
"""The development token ``jobq stack env`` exports (JOBQ_TOKEN): one token for every local gateway."""
APP = "examples.demo_app:registry"
"""The demo worker's handlers (``module:attribute`` of a ``worker.Registry``): ``examples/`` of the checkout
(``./run demo``), which the demo puts on the worker's ``PYTHONPATH``; the installed product leaves it out."""
TOPICS = ["jobs.demo", "jobs.default"]
CRON = "demo.tick"
"""The demo's cron schedule (a no-op job into demo.plain every 10 s)."""
QUEUES = ["demo.plain", "demo.delayed", "demo.priority", "demo.exclusive", "demo.flaky", "demo.failing"]
SCHEDULED = "demo.*,canary.*"
WEB_PORT = 28090
"""The dashboard's port in the demo (``JOBQ_WEB_PORT``'s default; another free one when it is taken)."""
"""The queues the demo's schedulers keep (and whose events they ship): the demo's and the canary's, not
whatever else lives in the stack's Redis (the test suite runs the demo on a Redis full of other queues)."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _env(exports: dict[str, str]) -> dict[str, str]:
    routes = [{"queues": "demo.*", "topic": "jobs.demo"}]
    return {
        **os.environ,
        **exports,
        "JOBQ_GATE_TOKENS": TOKEN,
        "JOBQ_WEB_ADMIN_TOKENS": f"admin:{DEV_WEB_ADMIN}",
        "JOBQ_WEB_READ_TOKENS": f"viewer:{DEV_WEB_READ}",
        "JOBQ_ROUTES": orjson.dumps(routes).decode(),
        "JOBQ_DEFAULT_TOPIC": "jobs.default",
        "JOBQ_RELAY_TOPICS": ",".join(TOPICS),
        "JOBQ_RELAY_SESSION_TTL_S": "10",
        "JOBQ_RELAY_LOCK_DELAY_S": "1",
        "JOBQ_LOG_FORMAT": "json",
    }


def _sources(env: dict[str, str]) -> Sources:
    """The demo's own reads (status screen, history) with the settings its children get in ``env``;
    the demo's environment is left as it was."""
    redis: dict[str, Any] = {"cluster": "JOBQ_REDIS_CLUSTER" in env}
    if "JOBQ_REDIS_URL" in env:
        redis["url"] = env["JOBQ_REDIS_URL"]
    return Sources(
        routing=load(RoutingSettings, routes=env["JOBQ_ROUTES"], default_topic=env["JOBQ_DEFAULT_TOPIC"]),
        relay=load(RelayKeys, topics=env["JOBQ_RELAY_TOPICS"]),
        kafka=load(KafkaSettings, bootstrap=env["JOBQ_KAFKA_BOOTSTRAP"]),
        consul=load(ConsulSettings, addr=env["CONSUL_HTTP_ADDR"]),
        redis=load(RedisSettings, **redis),
        history=load(HistorySettings, path=env["JOBQ_HISTORY_PATH"]),
    )


def _checkout_path() -> str:
    """``PYTHONPATH`` with the checkout's root first: where the demo's handlers (:data:`APP`) live."""
    return os.pathsep.join(p for p in (str(repo_root()), os.environ.get("PYTHONPATH")) if p)


class Processes(Children):
    """The demo's child processes, each logging into ``<folder>/<name>.log`` in its own session (Ctrl-C
    reaches the demo only, which stops them all with one grace period)."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        super().__init__(grace_s=20.0)
        self.folder, self.env = folder, env
        folder.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, module: str, *args: str, **env: str) -> Child:
        """Start ``python -m module args...`` with the demo's environment plus ``env``."""
        log = self.folder / f"{name}.log"
        return self.start(name, python_m(module, *args), output=log, env={**self.env, **env})


def _workload() -> list[tuple[str, dict[str, Any], str]]:
    """(queue, job, expected final state)."""
    jobs: list[tuple[str, dict[str, Any], str]] = []
    jobs += [
        ("demo.plain", {"kind": "demo.sleep", "args": {"seconds": 0.05}}, "completed") for _ in range(20)
    ]
    jobs += [
        (
            "demo.delayed",
            {"kind": "demo.sleep", "args": {"seconds": 0.01}, "delay_ms": 3000 + 1000 * i},
            "completed",
        )
        for i in range(5)
    ]
    jobs += [
        ("demo.priority", {"kind": "demo.noop", "priority": p}, "completed") for p in (50, 10, 40, 20, 30)
    ]
    jobs += [
        (
            "demo.exclusive",
            {"kind": "demo.sleep", "args": {"seconds": 0.2}, "excl": f"account-{i % 3}"},
            "completed",
        )
        for i in range(9)
    ]
    jobs += [("demo.flaky", {"kind": "demo.flaky", "args": {"fail_times": 1}}, "completed") for _ in range(3)]
    jobs += [("demo.failing", {"kind": "demo.always_fails"}, "errored") for _ in range(3)]
    return jobs


async def _enqueue(gateways: list[Gateway]) -> list[tuple[str, str, str]]:
    async with JobqClient(gateways, TOKEN, az="az-a") as client:
        await client.request(
            "PATCH",
            "/v1/queues/demo.exclusive",
            json={"mode": "exclusive", "excl_key": "account"},
            idempotent=True,
        )
        await client.request(  # fired by the schedulers every 10 s; `jobq cron list` shows it
            "PUT",
            f"/v1/cron/{CRON}",
            json={"every_s": 10, "queue": "demo.plain", "kind": "demo.noop"},
            idempotent=True,
        )
        out = []
        for queue, job, expected in _workload():
            ids = await client.enqueue(queue, [job])
            out.append((queue, ids[0], expected))
        return out


async def _states(gateways: list[Gateway], jobs: list[tuple[str, str, str]]) -> dict[str, int]:
    """How many demo jobs reached their expected state, per state reached."""
    async with JobqClient(gateways, TOKEN) as client:
        tally: dict[str, int] = {"ok": 0}
        for queue, job_id, expected in jobs:
            info = await client.get_job(queue, job_id)
            state = info["state"] if info else "in kafka"
            if state == expected:
                tally["ok"] += 1
            else:
                tally[state] = tally.get(state, 0) + 1
        return tally


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
        str, typer.Option("--stack", help="Run on this stack (other than `default`, it must exist).")
    ] = "default",
    workdir: Annotated[
        Path | None,
        typer.Option(help="Folder for logs, pids.json and jobs.json (default: JOBQ_HOME/demo/<time>)."),
    ] = None,
) -> None:
    """Bring the whole stack up, run gateways, relays, workers and the canary, and show a demo workload."""
    console = Console()
    signal.signal(signal.SIGINT, _on_sigint)  # before any asyncio.run: it then keeps this handler
    started = time.monotonic()
    stack = open_stack("default") if stack_name == "default" else existing_stack(stack_name)
    stack.provision()  # cached; on the first run each fetch and build says what it does, and how far
    with console.status("starting Kafka, Consul and Redis..."):
        stack.up()
    console.print(f"stack up in {time.monotonic() - started:.1f}s")
    if not print_status(stack):
        raise typer.Exit(1)
    env = _env(stack.endpoints.exports())
    # the history of this stack's events lives with the stack (a purge removes both); a given path wins
    env["JOBQ_HISTORY_PATH"] = os.environ.get("JOBQ_HISTORY_PATH") or str(history_of(stack.root))
    sources = _sources(env)
    ensure_topics(KafkaSettings(bootstrap=stack.endpoints.kafka_bootstrap), [*TOPICS], partitions=3)
    folder = workdir or home() / "demo" / time.strftime("%Y%m%d-%H%M%S")
    procs = Processes(folder, env)
    ports = [free_port(), free_port()]
    gateways = [
        Gateway(f"http://127.0.0.1:{ports[0]}", "az-a"),
        Gateway(f"http://127.0.0.1:{ports[1]}", "az-b"),
    ]
    serve = ",".join([*QUEUES, *(f"canary.{t}" for t in TOPICS)])
    try:
        gates = [
            procs.run(f"gate-{g.az}", "kafkagate", JOBQ_GATE_PORT=str(port), JOBQ_GATE_AZ=g.az)
            for g, port in zip(gateways, ports, strict=True)
        ]
        for i in (1, 2):
            procs.run(f"relay-{i}", "jqrelay", JOBQ_RELAY_HOLDER=f"relay-{i}")
        for i in (1, 2):  # the two split the demo's queues (timers, events); either alone keeps them all
            procs.run(
                f"scheduler-{i}",
                "jqsched",
                JOBQ_SCHEDULER_NAME=f"scheduler-{i}",
                JOBQ_SCHEDULER_QUEUES=SCHEDULED,
            )
        # the history of the default stack's events (JOBQ_HISTORY_PATH): `jobq history JOB_ID` reads it
        procs.run("history", "jobq", "history", "run", JOBQ_HISTORY_TRIGGER_S="2")
        web_port = WEB_PORT if _free(WEB_PORT) else free_port()
        web = procs.run("web", "jqweb", JOBQ_WEB_PORT=str(web_port))
        worker = ("--app", APP, "--queues", serve, "--concurrency", "20", "--grace", "5")
        procs.run("worker", "jobq", "worker", *worker, PYTHONPATH=_checkout_path())
        canary_env = {
            "JOBQ_CANARY_GATEWAYS": ",".join(f"{g.url}@{g.az}" for g in gateways),
            "JOBQ_CANARY_TOKEN": TOKEN,
            "JOBQ_CANARY_INTERVAL_S": "10",
            "JOBQ_CANARY_LATE_AFTER_S": "20",
        }
        procs.run("canary", "canary", **canary_env)
        _write_atomic(folder / "pids.json", orjson.dumps(procs.pids()))
        console.print(f"processes started; logs in {folder}")
        for gate, gateway in zip(gates, gateways, strict=True):  # fails at once if a gateway exits
            gate.wait_ready(http_ok(f"{gateway.url}/readyz"), timeout_s=60)
        web.wait_ready(http_ok(f"http://127.0.0.1:{web_port}/healthz"), timeout_s=60)
        console.print(
            f"[bold]dashboard:[/] http://127.0.0.1:{web_port}/  "
            f"(sign in with [bold]{DEV_WEB_ADMIN}[/] to act, {DEV_WEB_READ} to look)"
        )
        jobs = asyncio.run(_enqueue(gateways))
        _write_atomic(folder / "jobs.json", orjson.dumps(jobs))
        console.print(f"enqueued {len(jobs)} demo jobs over HTTP (202 = in Kafka)")
        ok = _follow(console, procs, gateways, jobs, sources, once=once, duration=duration, timeout=timeout)
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


def _in_history(jobs: list[tuple[str, str, str]], history: HistorySettings) -> int:
    """How many demo jobs the history tables show in their expected state (0 before the first batch)."""
    root = history.root
    if not root.is_dir():
        return 0
    ids = ", ".join("'" + job_id.replace("'", "''") + "'" for _, job_id, _ in jobs)
    try:
        rows = HistoryStore(root).query(f"SELECT queue, id, to_state FROM current WHERE id IN ({ids})").rows
    except JobqError:  # tables being written for the first time: the next poll reads them
        return 0
    seen = {(queue, job_id): state for queue, job_id, state in rows}
    return sum(1 for queue, job_id, expected in jobs if seen.get((queue, job_id)) == expected)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _follow(
    console: Console,
    procs: Processes,
    gateways: list[Gateway],
    jobs: list[tuple[str, str, str]],
    sources: Sources,
    *,
    once: bool,
    duration: float,
    timeout: float,
) -> bool:
    started = time.monotonic()
    while True:
        if _STOP.is_set():
            raise KeyboardInterrupt
        tally = asyncio.run(_states(gateways, jobs))
        archived = _in_history(jobs, sources.history)
        console.print(render(collect(sources)))
        console.print(f"demo jobs in their expected state: {tally['ok']}/{len(jobs)}  others: {tally}")
        console.print(
            f"demo jobs in the history in that state: {archived}/{len(jobs)} (`jobq history JOB_ID`)"
        )
        if dead := procs.dead():
            console.print(f"[red]a process exited:[/] {', '.join(dead)} (see its log in {procs.folder})")
            return False
        elapsed = time.monotonic() - started
        if once and tally["ok"] == len(jobs) and archived == len(jobs):
            console.print("[green]every demo job reached its expected state, and the history says so[/]")
            return True
        if once and elapsed > timeout:
            console.print("[red]timed out waiting for the demo jobs[/]")
            return False
        if duration and elapsed > duration:
            return True
        if _STOP.wait(2):
            raise KeyboardInterrupt
