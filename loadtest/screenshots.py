"""``python -m loadtest.screenshots`` (``./run screenshots``): the dashboard's screenshots, taken from the
demo's workload — the pictures ``README.md`` and ``docs/dashboard.md`` show (``docs/dashboard/*.png``).

The browser test (``tests/web/test_browser.py``) checks the pages and keeps its screenshots in a temporary
folder: its world is a test's (random queue prefixes, markup in args to prove it is escaped). This takes
them from what a user sees instead: a fresh stack of its own (``--stack``, purged first so nothing but the
demo is in it), ``jobq demo`` on it — its queues (``demo.plain``, ``demo.priority``, ``demo.exclusive``,
``demo.flaky``, ``demo.failing``...), its cron schedule, its push-dispatch kind, the history — plus, through
the demo's gateways, two task graphs of the demo's handlers, a steady trickle of the demo's kinds for
``--warmup`` seconds (the overview's charts, sampled every ``JOBQ_SCHEDULER_SERIES_EVERY_S`` = 10 s here,
show the last hour) and a job running while the workers page is shot. Then Debian's headless chromium
(Playwright on the system browser, as the browser test) signs in with the stack's admin token and saves each
page into ``--out``; the demo is stopped (Ctrl-C, as a user stops it) and the stack purged unless
``--keep-stack``.

Run it from a checkout after changing a page, and commit the pictures it wrote (view them first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from jqcore.graphs import Step, group, pipeline
from jqruntime.client import Gateway, JobqClient
from jqstack.manager import Stack, StackSpec
from jqstack.paths import home, repo_root
from jqstack.pipeline import checkout_env
from jqstack.supervise import stop_pids
from loadtest.report import until

__all__ = ["main", "pages", "take"]

CHROMIUM = os.environ.get("JOBQ_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"]
VIEWPORT_W, VIEWPORT_H = 1280, 860
OUT = repo_root() / "docs" / "dashboard"
QUEUE = "demo.plain"
"""Where the extra jobs go: a queue of the demo's, served by its worker."""
PENDING = "Reading the history"
"""What a job page says until its timeline, read from the history after the page loaded, is in."""
LONG_S = 50.0
"""How long the job shown running on the workers page sleeps (``demo.sleep`` has a 60 s timeout)."""


@dataclass(frozen=True)
class Demo:
    """What the running demo told: its dashboard, gateways, jobs, and the stack's tokens."""

    folder: Path
    dashboard: str
    gateways: list[Gateway]
    jobs: list[tuple[str, str, str]]
    token: str
    admin: str

    def failed_job(self) -> tuple[str, str]:
        """A demo job that ends in the dead-letter list (its page shows the traceback)."""
        return next((q, i) for q, i, state in self.jobs if state == "errored")


def pages(demo: Demo, graph_id: str) -> list[tuple[str, str, str]]:
    """(file name, path, a selector present once the page rendered) of every page shot."""
    queue, job_id = demo.failed_job()
    return [
        ("overview", "/?hours=1", "#alerts, #alerts-none"),
        ("topics", "/topics", "main table"),
        ("queues", "/queues", "main table"),
        ("queue", f"/queues/{QUEUE}", "main h1"),
        ("jobs", f"/jobs?queue={QUEUE}&state=done", "#search-form"),
        ("job", f"/jobs/{queue}/{job_id}", "pre.value"),
        ("dead", f"/dead?queue={queue}", "#dead-table"),
        ("schedules", "/schedules", "#cron-table"),
        ("graphs", "/graphs", "main h1"),
        ("graph", f"/graphs/{graph_id}", "main svg"),
        ("workers", "/workers", "#workers-table"),
        ("audit", "/audit", "#audit"),
    ]


def _jobq(*args: str) -> list[str]:
    return [sys.executable, "-m", "jobq", *args]


def _tokens(stack: str) -> tuple[str, str]:
    """The stack's gateway token and dashboard admin token (``jobq stack env``'s exports)."""
    said = subprocess.run(_jobq("stack", "env", "--name", stack), capture_output=True, text=True, check=True)
    env = dict(re.findall(r"^export (\w+)=(.*)$", said.stdout, re.MULTILINE))
    admin = env["JOBQ_WEB_ADMIN_TOKENS"].strip("'\"").split(",")[0]  # name:token
    return env["JOBQ_TOKEN"].strip("'\""), admin.split(":", 1)[-1]


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise SystemExit(
                f"the demo exited ({proc.returncode}) before writing {path.name}: see {path.parent}"
            )
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path.name} after {timeout_s:.0f} s: see {path.parent}")
        time.sleep(1)
    return orjson.loads(path.read_bytes())


@contextlib.contextmanager
def running_demo(stack_name: str, folder: Path, keep_stack: bool) -> Iterator[Demo]:
    """A fresh stack and ``jobq demo`` on it, until the block ends (then Ctrl-C, and the stack purged)."""
    stack = Stack(StackSpec(name=stack_name, redis_mode="single", fixed_ports=False))
    stack.down(purge=True)  # nothing but the demo in the pictures
    stack.up()
    folder.mkdir(parents=True, exist_ok=True)
    env = checkout_env(JOBQ_SCHEDULER_SERIES_EVERY_S="10")
    with (folder / "demo.out").open("ab") as out:
        proc = subprocess.Popen(
            _jobq("demo", "--stack", stack_name, "--workdir", str(folder)),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        urls = _wait_for(folder / "urls.json", proc, 600)
        jobs = _wait_for(folder / "jobs.json", proc, 120)
        token, admin = _tokens(stack_name)
        gateways = [Gateway(g["url"], g["az"]) for g in urls["gateways"]]
        yield Demo(folder, urls["dashboard"].rstrip("/"), gateways, [tuple(j) for j in jobs], token, admin)
    finally:
        proc.send_signal(signal.SIGINT)  # as a user stops it: every process stopped cleanly
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
        with contextlib.suppress(OSError, ValueError):  # anything it could not stop
            stop_pids(orjson.loads((folder / "pids.json").read_bytes()).values(), grace_s=10)
        if not keep_stack:
            stack.down(purge=True)


async def _state(client: JobqClient, queue: str, job_id: str) -> str | None:
    job = await client.get_job(queue, job_id)
    return None if job is None else str(job["state"])


async def workload(client: JobqClient, demo: Demo, warmup_s: float) -> str:
    """The demo's own jobs finished, two graphs, a trickle of the demo's kinds for ``warmup_s``; the id of
    the graph shot."""

    async def demo_done() -> bool:
        states = [await _state(client, q, i) for q, i, _ in demo.jobs]
        return states == [expected for _, _, expected in demo.jobs]

    await until(demo_done, "the demo's jobs", 300, poll_s=1)
    report = f"report-{int(time.time())}"
    graphs = [
        pipeline(
            f"totals-{int(time.time())}",
            Step("demo.graph.add", [1]),
            Step("demo.graph.add", [2]),
            Step("demo.graph.add", [3]),
            queue=QUEUE,
        ),
        group(
            report,
            [Step("demo.graph.add", [n]) for n in (10, 20, 30)],
            callback=Step("demo.graph.sum"),
            queue=QUEUE,
        ),
    ]
    for doc in graphs:
        await client.submit_graph(doc)
    rng = random.Random(20261205)
    mix: list[tuple[str, dict[str, Any]]] = [
        (QUEUE, {"kind": "demo.sleep", "args": {"seconds": 0.2}}),
        ("demo.priority", {"kind": "demo.noop", "priority": 0}),
        ("demo.flaky", {"kind": "demo.flaky", "args": {"fail_times": 1}}),
        ("demo.exclusive", {"kind": "demo.sleep", "args": {"seconds": 0.1}, "excl": "account-1"}),
    ]
    started = time.monotonic()
    while time.monotonic() - started < warmup_s:
        batch = rng.choices(mix, weights=(6, 2, 1, 1), k=rng.randint(2, 8))
        if rng.random() < 0.05:
            batch.append(("demo.failing", {"kind": "demo.always_fails"}))
        for queue, job in batch:
            await client.enqueue(queue, [job])
        await asyncio.sleep(1)
    return report


async def shoot(demo: Demo, out: Path, graph_id: str, client: JobqClient) -> list[Path]:
    """Every page of :func:`pages` as ``out/<name>.png``, signed in as the stack's admin, while a job runs."""
    from playwright.async_api import async_playwright

    long = (await client.enqueue(QUEUE, [{"kind": "demo.sleep", "args": {"seconds": LONG_S}}]))[0]

    async def running() -> bool:
        return await _state(client, QUEUE, long) == "running"

    await until(running, "a job running for the workers page", 60, poll_s=1)
    written: list[Path] = []
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = await (
            await browser.new_context(viewport={"width": VIEWPORT_W, "height": VIEWPORT_H})
        ).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"{demo.dashboard}/login")
        await page.fill("input[name=token]", demo.admin)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{demo.dashboard}/")
        for name, path, ready in pages(demo, graph_id):
            await page.goto(demo.dashboard + path)
            await page.wait_for_selector(ready, timeout=30_000)
            await _settled(page)
            await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            written.append(out / f"{name}.png")
        await browser.close()
    if errors:
        raise SystemExit(f"page errors: {errors}")
    return written


async def _settled(page: Any, timeout_s: float = 60.0) -> None:
    """Wait until the parts a page loads after itself (htmx: a job's timeline) are in. Read from the page's
    text: its CSP forbids the evaluated scripts ``wait_for_function`` would use."""
    deadline = time.monotonic() + timeout_s
    while PENDING in await page.inner_text("main"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{page.url}: still {PENDING!r} after {timeout_s:.0f} s")
        await asyncio.sleep(0.5)


async def _take(demo: Demo, out: Path, warmup_s: float) -> list[Path]:
    async with JobqClient(demo.gateways, demo.token) as client:
        graph_id = await workload(client, demo, warmup_s)
        return await shoot(demo, out, graph_id, client)


def take(
    out: Path = OUT, *, stack: str = "screenshots", warmup_s: float = 300.0, keep_stack: bool = False
) -> list[Path]:
    """Run the demo on a fresh stack, add its extra work, shoot every page into ``out``; the files written."""
    if not shutil.which(CHROMIUM):
        raise SystemExit(f"no chromium at {CHROMIUM} (apt-get install chromium; `./run screenshots` does)")
    folder = home() / "screenshots" / time.strftime("%Y%m%d-%H%M%S")
    with running_demo(stack, folder, keep_stack) as demo:
        return asyncio.run(_take(demo, out, warmup_s))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.screenshots", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go (default docs/dashboard)")
    parser.add_argument("--stack", default="screenshots", help="the stack to run the demo on (purged first)")
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds of steady work before the shots")
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running at the end")
    args = parser.parse_args(argv)
    for path in take(args.out, stack=args.stack, warmup_s=args.warmup, keep_stack=args.keep_stack):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
