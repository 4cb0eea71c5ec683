"""``jobq demo``: the README's first command — the whole pipeline on this machine, with a demo workload.

It starts (and caches) Kafka, Consul and Redis, creates the topics, then runs as separate processes
2 gateways (AZ labels az-a and az-b), 2 relays, a worker pool with the example handlers and the heartbeat
canary; it enqueues a demo workload over HTTP (plain, delayed, prioritized, exclusive, flaky and failing
jobs, so the dead-letter list fills) and shows it flowing with the status screen. Ctrl-C stops every
process cleanly (workers release what they run; nothing accepted is lost). ``--once`` exits 0 as soon
as every demo job reached its expected state (1 otherwise, after ``--timeout``).

The demo's folder (``--workdir``, default ``JOBQ_HOME/demo/<time>``) holds every process's log,
``pids.json`` (the child processes) and ``jobs.json`` (queue, id and expected final state of every demo
job), so a restarted demo can be checked against the jobs an interrupted one had enqueued.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from jobq.commands.stack import existing_stack, open_stack, print_status
from jobq.commands.status import collect, render
from jobq.stack.paths import home
from jobq.stack.procs import free_port
from jqcore.client import Gateway, JobqClient
from jqcore.kafka import ensure_topics
from jqcore.settings import KafkaSettings

__all__ = ["demo"]

TOKEN = "demo-token"
TOPICS = ["jobs.demo", "jobs.default"]
QUEUES = ["demo.plain", "demo.delayed", "demo.priority", "demo.exclusive", "demo.flaky", "demo.failing"]


def _env(exports: dict[str, str]) -> dict[str, str]:
    routes = [{"queues": "demo.*", "topic": "jobs.demo"}]
    return {
        **os.environ,
        **exports,
        "JOBQ_GATE_TOKENS": TOKEN,
        "JOBQ_ROUTES": orjson.dumps(routes).decode(),
        "JOBQ_DEFAULT_TOPIC": "jobs.default",
        "JOBQ_RELAY_TOPICS": ",".join(TOPICS),
        "JOBQ_RELAY_SESSION_TTL_S": "10",
        "JOBQ_RELAY_LOCK_DELAY_S": "1",
        "JOBQ_LOG_FORMAT": "json",
    }


class Processes:
    """The demo's child processes, each logging into the demo folder; stopped with SIGTERM, then KILL."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env = folder, env
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        folder.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, module: str, *args: str, **env: str) -> None:
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the demo only; it stops the children in order
        )
        log.close()
        self.procs.append((name, proc))

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs}

    def dead(self) -> list[str]:
        return [f"{n} (exit {p.returncode})" for n, p in self.procs if p.poll() is not None]

    def stop(self, grace_s: float = 20.0) -> list[str]:
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
        killed = []
        for name, p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
                killed.append(name)
        return killed


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
        await _until_ready(client)
        await client.request(
            "PATCH",
            "/v1/queues/demo.exclusive",
            json={"mode": "exclusive", "excl_key": "account"},
            idempotent=True,
        )
        out = []
        for queue, job, expected in _workload():
            ids = await client.enqueue(queue, [job])
            out.append((queue, ids[0], expected))
        return out


async def _until_ready(client: JobqClient, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await client.request("GET", "/readyz")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


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
    with console.status(
        "starting Kafka, Consul and Redis (the first run downloads jars and builds Consul)..."
    ):
        stack.up()
    console.print(f"stack up in {time.monotonic() - started:.1f}s")
    if not print_status(stack):
        raise typer.Exit(1)
    env = _env(stack.endpoints.exports())
    os.environ.update({k: v for k, v in env.items() if k.startswith(("JOBQ_", "CONSUL_"))})
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
        for i, az in enumerate(("az-a", "az-b")):
            procs.start(f"gate-{az}", "kafkagate", JOBQ_GATE_PORT=str(ports[i]), JOBQ_GATE_AZ=az)
        for i in (1, 2):
            procs.start(f"relay-{i}", "jqrelay", JOBQ_RELAY_HOLDER=f"relay-{i}")
        procs.start("worker", "worker", "--queues", serve, "--concurrency", "20", "--grace", "5")
        canary_env = {
            "JOBQ_CANARY_GATEWAYS": ",".join(f"{g.url}@{g.az}" for g in gateways),
            "JOBQ_CANARY_TOKEN": TOKEN,
            "JOBQ_CANARY_INTERVAL_S": "10",
            "JOBQ_CANARY_LATE_AFTER_S": "20",
        }
        procs.start("canary", "canary", **canary_env)
        _write_atomic(folder / "pids.json", orjson.dumps(procs.pids()))
        console.print(f"processes started; logs in {folder}")
        jobs = asyncio.run(_enqueue(gateways))
        _write_atomic(folder / "jobs.json", orjson.dumps(jobs))
        console.print(f"enqueued {len(jobs)} demo jobs over HTTP (202 = in Kafka)")
        ok = _follow(console, procs, gateways, jobs, once=once, duration=duration, timeout=timeout)
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
is both raised and remembered, and the status loop checks the flag between polls."""


def _on_sigint(_signum: int, _frame: object) -> None:
    _STOP.set()
    raise KeyboardInterrupt


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _follow(
    console: Console,
    procs: Processes,
    gateways: list[Gateway],
    jobs: list[tuple[str, str, str]],
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
        console.print(render(collect()))
        console.print(f"demo jobs in their expected state: {tally['ok']}/{len(jobs)}  others: {tally}")
        if dead := procs.dead():
            console.print(f"[red]a process exited:[/] {', '.join(dead)} (see its log in {procs.folder})")
            return False
        elapsed = time.monotonic() - started
        if once and tally["ok"] == len(jobs):
            console.print("[green]every demo job reached its expected state[/]")
            return True
        if once and elapsed > timeout:
            console.print("[red]timed out waiting for the demo jobs[/]")
            return False
        if duration and elapsed > duration:
            return True
        if _STOP.wait(2):
            raise KeyboardInterrupt
