"""``./run bench graphs``: task graphs (``docs/graphs.md``) in jobq, celery and dramatiq, on one dedicated
Redis (flushed between systems), 2 worker processes each, the same trivial tasks.

Two shapes, N graphs each, submitted **one at a time** (the next once the previous completed), so each
graph's time is its own and not queueing behind the others:

* **fan-out**: ``WIDTH`` (100) parallel ``add(i)`` (= i + 1), then a callback fed the list of their
  results (``tsum``: their sum). jobq: ``fan_out(id, "graphbench.add", range(WIDTH),
  callback=Step("graphbench.sum"))``;
  celery: ``chord(group(add.s(i) ...), tsum.s())``; dramatiq: ``group([...]).add_completion_callback(...)``.
* **pipeline**: ``LENGTH`` (100) steps, each adding 1 to the previous result (``add(0)``, then
  ``add(prev)``). jobq: ``pipeline(id, Step("graphbench.add", [0]), Step("graphbench.add"), ...)``;
  celery: ``chain(add.s(0), add.s(), ...)``; dramatiq: ``pipeline([add.message(0), add.message(), ...])``.

Every final result is checked (WIDTH·(WIDTH+1)/2, LENGTH). Figures per system and shape: jobs/s (nodes
executed per second: nodes of all N graphs / the sum of their times) and the time per graph, p50 and max.

**jobq** is driven from this process straight into the engine (``engine.graphs.create(parse(doc))``: the
Kafka hop is measured by ``./run bench e2e``) with 2 ``jobq worker`` processes (concurrency 50) running the
handlers below. A graph's time runs from ``now_ms()`` just before ``create`` to the graph's
``finished_at`` (the time the script that completed it was given, from the same clock, also whole
milliseconds: the truncations cancel on average). The same jobs **without a graph** run the same way:

* fan-out: one ``enqueue_batch`` of WIDTH ``add`` jobs and one ``tsum`` job (given the list it would be
  fed), until the last of them finished (``finished_at``);
* pipeline: a chain of ``graphbench.chain`` jobs, each handler enqueuing the next step with its result
  (the cheapest hand-made continuation) before it returns, until the last one finished.

The graph's overhead per node = (Σ graph times − Σ plain times) / nodes, in µs. The bench learns that a
graph or a batch finished by polling one key every 2 ms (graph state, count of finished jobs); that load
is the same for both and the times come from the records, not from the polling.

**celery and dramatiq** run from their own virtualenvs (``loadtest/peers_bench.py``: pinned versions)
through ``loadtest/peers/run_celery_graphs.py`` and ``run_dramatiq_graphs.py`` (settings in their
docstrings); a graph's time runs from submit until the client holds the final result (a pushed result:
celery's pub/sub, dramatiq's blocking pop), so theirs include handing the result to the client (a fraction
of a millisecond), jobq's does not.

Before measuring, every system runs groups of ``pid`` tasks until both worker processes answered.
Ratios (per repetition, then the median): jobq / each peer, jobs/s and e2e p50. Everything shares this
machine's cores (2 here): the bench process, Redis and the workers.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
from rich.progress import Progress

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqcore.graphs import Step, fan_out, parse, pipeline
from jqengine import Engine, GraphInfo, RedisClient
from jqengine.keys import GraphKeys, QueueKeys
from jqstack.manager import Endpoints
from jqstack.paths import home
from jqstack.pipeline import PipelineEnv, worker_argv
from jqstack.procs import free_port
from jqstack.supervise import Children
from loadtest import peers_bench
from loadtest.report import Report, until
from worker.registry import Registry, current_job

__all__ = ["FULL", "PEERS", "QUICK", "SHAPES", "SYSTEMS", "Sizes", "registry", "run"]

WORKERS = 2
CONCURRENCY = 50
QUEUE = "graphs"
SHARED_DB = 9
"""On servers passed in (the test session's), the bench flushes and uses this Redis database only."""
PEERS = ("celery", "dramatiq")
SYSTEMS = ("jobq", *PEERS)
SHAPES = ("fan-out", "pipeline")
POLL_S = 0.002
WARM_NODES = 100


@dataclass(frozen=True)
class Sizes:
    fanouts: int
    """Fan-out graphs per system and repetition."""
    width: int
    """Parallel nodes of a fan-out (its callback makes one more)."""
    pipelines: int
    length: int
    """Steps of a pipeline."""
    reps: int = 3

    def nodes(self, shape: str) -> int:
        return self.width + 1 if shape == "fan-out" else self.length

    def graphs(self, shape: str) -> int:
        return self.fanouts if shape == "fan-out" else self.pipelines


FULL = Sizes(fanouts=20, width=100, pipelines=5, length=100, reps=3)
QUICK = Sizes(fanouts=3, width=10, pipelines=2, length=10, reps=1)


# --- jobq's handlers (``jobq worker --app loadtest.graph_bench:registry``) ------------------------------

registry = Registry()


@registry.job("graphbench.add")
async def add(x: int, y: int = 1) -> int:
    return x + y


@registry.job("graphbench.sum")
async def tsum(values: list[int]) -> int:
    return sum(values)


@registry.job("graphbench.pid")
async def pid(_: int = 0) -> int:
    await asyncio.sleep(0.005)
    return os.getpid()


_HANDLER_ENGINE: list[Engine] = []


@registry.job("graphbench.chain")
async def chain_step(x: int, left: int) -> int:
    """A hand-made pipeline step: enqueue the next step (job id ``<base>-<i+1>``) with this result."""
    if left > 0:
        if not _HANDLER_ENGINE:
            _HANDLER_ENGINE.append(Engine(aioredis.Redis.from_url(os.environ["JOBQ_REDIS_URL"])))
        job = current_job()
        base, _, index = job.id.rpartition("-")
        step = new_envelope(job.queue, "graphbench.chain", [x + 1, left - 1], id=f"{base}-{int(index) + 1}")
        await _HANDLER_ENGINE[0].enqueue_batch([step])
    return x + 1


# --- jobq -------------------------------------------------------------------------------------------


@dataclass
class Times:
    """Per graph, seconds (one shape on one system, one repetition)."""

    graph: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    submit: list[float] = field(default_factory=list)
    """jobq: seconds the ``graphs.create`` call took (the graph's ``submit``)."""


def _alive(procs: Children) -> Callable[[], None]:
    def check() -> None:
        if dead := procs.dead():
            raise RuntimeError(f"a worker exited: {dead}")

    return check


class JobqRun:
    """One repetition of jobq: graphs and their plain equivalents on a running pair of workers."""

    def __init__(self, client: RedisClient, procs: Children, rep: int, sizes: Sizes) -> None:
        self.engine, self.client, self.procs, self.rep, self.sizes = Engine(client), client, procs, rep, sizes

    async def _graph(self, doc: dict[str, Any], expected: tuple[str, int], out: Times) -> None:
        """Create the graph, wait for its end; add its time and its create call's to ``out``.
        ``expected``: (node, its result)."""
        spec = parse(doc)
        started, clock = now_ms(), time.perf_counter()
        await self.engine.graphs.create(spec)
        out.submit.append(time.perf_counter() - clock)
        info = await self._ended(spec.id)
        got = {n.name: n.result for n in info.nodes}.get(expected[0])
        if info.state != "completed" or got != expected[1] or info.finished_at is None:
            raise RuntimeError(f"graph {spec.id}: {info.state}, {expected[0]} = {got!r} (want {expected[1]})")
        out.graph.append((info.finished_at - started) / 1000)

    async def _ended(self, graph_id: str) -> GraphInfo:
        """Wait until the graph is no longer running; the graph."""
        key = GraphKeys(graph_id).named("graph")

        async def ended() -> bool:
            return await self.client.hget(key, "state") not in (b"running", None)

        await until(ended, f"graph {graph_id}", 60, alive=_alive(self.procs), poll_s=POLL_S)
        return await self.engine.graphs.get(graph_id)

    async def _finished(self) -> int:
        return int(await self.client.zcard(QueueKeys(QUEUE).done))

    async def _plain(self, first: list[Any], ids: list[str], expected: tuple[str, int]) -> float:
        """Enqueue ``first`` (envelopes), wait until the jobs ``ids`` finished; the time (s) from the
        enqueue to the last one's ``finished_at``."""
        target = await self._finished() + len(ids)

        async def done() -> bool:
            return await self._finished() >= target

        started = now_ms()
        await self.engine.enqueue_batch(first)
        await until(done, f"plain jobs {ids[0]}…", 60, alive=_alive(self.procs), poll_s=POLL_S)
        jobs = await self.engine.reads.get_jobs(QUEUE, ids)
        if any(j is None or j.state != "completed" or j.finished_at is None for j in jobs):
            raise RuntimeError(f"plain jobs {ids[0]}…: not all completed")
        last = next(j for j in jobs if j is not None and j.id == expected[0])
        if last.result is None or json.loads(last.result) != expected[1]:
            raise RuntimeError(f"plain job {last.id}: result {last.result!r}, want {expected[1]}")
        return (max(j.finished_at or 0 for j in jobs if j is not None) - started) / 1000

    async def warm(self) -> list[int]:
        """Fan-outs of ``pid`` nodes until both workers answered."""
        deadline, seen, i = time.monotonic() + 60, set[int](), 0
        while len(seen) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only worker pids {sorted(seen)} answered in 60 s")
            spec = parse(fan_out(f"warm-{self.rep}-{i}", "graphbench.pid", range(WARM_NODES), queue=QUEUE))
            await self.engine.graphs.create(spec)
            seen |= {int(n.result) for n in (await self._ended(spec.id)).nodes if n.result}
            i += 1
        return sorted(seen)

    async def fan_out(self) -> Times:
        out, w = Times(), self.sizes.width
        want = w * (w + 1) // 2
        for g in range(self.sizes.fanouts):
            doc = fan_out(
                f"fo-{self.rep}-{g}", "graphbench.add", range(w), callback=Step("graphbench.sum"), queue=QUEUE
            )
            await self._graph(doc, ("callback", want), out)
        for g in range(self.sizes.fanouts):
            ids = [f"fp-{self.rep}-{g}-{i}" for i in range(w + 1)]
            envs = [new_envelope(QUEUE, "graphbench.add", [i], id=ids[i]) for i in range(w)]
            envs.append(new_envelope(QUEUE, "graphbench.sum", [list(range(1, w + 1))], id=ids[w]))
            out.plain.append(await self._plain(envs, ids, (ids[w], want)))
        return out

    async def pipeline(self) -> Times:
        out, n = Times(), self.sizes.length
        for g in range(self.sizes.pipelines):
            steps = [Step("graphbench.add", [0]), *(Step("graphbench.add") for _ in range(n - 1))]
            doc = pipeline(f"pl-{self.rep}-{g}", *steps, queue=QUEUE)
            await self._graph(doc, (f"step-{n}", n), out)
        for g in range(self.sizes.pipelines):
            ids = [f"pp-{self.rep}-{g}-{i}" for i in range(n)]
            first = new_envelope(QUEUE, "graphbench.chain", [0, n - 1], id=ids[0])
            out.plain.append(await self._plain([first], ids, (ids[-1], n)))
        return out


def _jobq(url: str, rep: int, sizes: Sizes) -> dict[str, Times]:
    env = PipelineEnv({"JOBQ_REDIS_URL": url}, log_level="warning").worker()
    argv = worker_argv(QUEUE, app="loadtest.graph_bench:registry", concurrency=CONCURRENCY)

    async def go(procs: Children) -> dict[str, Times]:
        client = aioredis.Redis.from_url(url, socket_timeout=90)
        try:
            bench = JobqRun(client, procs, rep, sizes)
            await bench.warm()
            return {"fan-out": await bench.fan_out(), "pipeline": await bench.pipeline()}
        finally:
            await client.aclose()

    with Children(grace_s=15.0) as procs:
        for i in range(WORKERS):
            procs.start(f"jobq-worker-{i}", argv, output="inherit", env=env)  # warnings reach the terminal
        return asyncio.run(go(procs))


# --- peers ------------------------------------------------------------------------------------------


def _role(peer: str, env: dict[str, str], *args: float | str, timeout_s: float) -> dict[str, Any]:
    """Run one role of the peer's graph runner; the JSON object it printed last."""
    cmd = [str(peers_bench.peer_python(peer)), f"run_{peer}_graphs.py", *(str(a) for a in args)]
    done = subprocess.run(
        cmd, cwd=peers_bench.PEERS_DIR, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(f"{peer} {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _peer(peer: str, url: str, sizes: Sizes) -> dict[str, Times]:
    env = {**os.environ, "QUEUE_REDIS": url, "PYTHONPATH": str(peers_bench.PEERS_DIR)}
    python = str(peers_bench.peer_python(peer))
    out: dict[str, Times] = {}
    with Children(grace_s=15.0) as procs:
        for i in range(WORKERS):
            argv = [python, f"run_{peer}_graphs.py", "worker"]
            procs.start(f"{peer}-worker-{i}", argv, cwd=peers_bench.PEERS_DIR, env=env)
        _role(peer, env, "warm", timeout_s=120)
        for shape, role in (("fan-out", "fanout"), ("pipeline", "pipeline")):
            size = sizes.width if shape == "fan-out" else sizes.length
            n = sizes.graphs(shape)
            got = _role(peer, env, role, n, size, timeout_s=60 + n * sizes.nodes(shape) * 0.1)
            out[shape] = Times(graph=[float(t) for t in got["times"]])
            if dead := procs.dead():
                raise RuntimeError(f"a {peer} worker exited: {dead}")
    return out


# --- the run ----------------------------------------------------------------------------------------


@contextmanager
def _server(endpoints: Endpoints | None) -> Iterator[str]:
    """The Redis URL the bench may flush: database :data:`SHARED_DB` of ``endpoints``' Redis, else a
    throw-away ``redis-server`` on a free port (as ``./run bench peers`` starts)."""
    if endpoints is not None:
        url = urlsplit(endpoints.redis_url or "")
        yield urlunsplit(url._replace(path=f"/{SHARED_DB}"))
        return
    folder = home() / "peers" / f"graphs-redis-{os.getpid()}"
    port = free_port()
    servers = Children(grace_s=10.0)
    try:
        peers_bench._redis(servers, port, folder)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        servers.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _flush(url: str) -> None:
    with redis.Redis.from_url(url) as client:
        client.flushdb()


def _figures(system: str, sizes: Sizes, times: dict[str, Times]) -> dict[str, float]:
    out: dict[str, float] = {}
    for shape, t in times.items():
        nodes = sizes.nodes(shape) * len(t.graph)
        out[f"{shape} jobs/s {system}"] = nodes / sum(t.graph)
        out[f"{shape} e2e p50 {system}"] = statistics.median(t.graph) * 1000
        out[f"{shape} e2e max {system}"] = max(t.graph) * 1000
        if t.plain:
            out[f"{shape} plain jobs/s {system}"] = nodes / sum(t.plain)
            out[f"{shape} plain e2e p50 {system}"] = statistics.median(t.plain) * 1000
            out[f"{shape} plain e2e max {system}"] = max(t.plain) * 1000
            out[f"{shape} graph overhead per node {system}"] = (sum(t.graph) - sum(t.plain)) / nodes * 1e6
        if t.submit:
            out[f"{shape} submit (graphs.create) p50 {system}"] = statistics.median(t.submit) * 1000
    return out


def _ratios(fig: dict[str, float]) -> dict[str, float]:
    """jobq / each peer within one repetition: jobs/s (above 1: jobq faster) and e2e p50 (below 1)."""
    out: dict[str, float] = {}
    for shape in SHAPES:
        for name in ("jobs/s", "e2e p50"):
            ours = fig.get(f"{shape} {name} jobq")
            for peer in PEERS:
                theirs = fig.get(f"{shape} {name} {peer}")
                if ours is not None and theirs:
                    out[f"{shape} {name} ratio jobq/{peer}"] = ours / theirs
    return out


def _unit(name: str) -> str:
    if "ratio" in name:
        return "x"
    if "overhead" in name:
        return "µs"
    return "jobs/s" if "jobs/s" in name else "ms"


def _measure(system: str, url: str, rep: int, sizes: Sizes) -> dict[str, float]:
    _flush(url)
    times = _jobq(url, rep, sizes) if system == "jobq" else _peer(system, url, sizes)
    return _figures(system, sizes, times)


def run(
    quick: bool = False,
    *,
    sizes: Sizes | None = None,
    systems: tuple[str, ...] = SYSTEMS,
    endpoints: Endpoints | None = None,
) -> Report:
    """``sizes`` (default :data:`FULL`, ``quick``: :data:`QUICK`); ``endpoints``: run on that Redis
    (database :data:`SHARED_DB`) instead of a throw-away one."""
    sizes = sizes or (QUICK if quick else FULL)
    report = Report("graphs", {**asdict(sizes), "systems": list(systems), "worker_processes": WORKERS})
    per_rep: list[dict[str, float]] = []
    started = time.monotonic()
    with _server(endpoints) as url, Progress() as progress:
        setup = progress.add_task("peer virtualenvs", total=len(systems))
        for system in systems:
            if system != "jobq":
                peers_bench.peer_python(system)
            progress.advance(setup)
        task = progress.add_task("systems x repetitions", total=len(systems) * sizes.reps)
        for rep in range(sizes.reps):
            figures: dict[str, float] = {}
            for system in systems:
                try:
                    figures |= _measure(system, url, rep, sizes)
                except Exception as exc:
                    report.notes.append(f"{system} failed (repetition {rep + 1}): {exc!r}"[:600])
                progress.advance(task)
            per_rep.append(figures | _ratios(figures))
        _flush(url)
    names = list(dict.fromkeys(name for figures in per_rep for name in figures))
    order = {s: i for i, s in enumerate(SHAPES)}
    names.sort(key=lambda n: (order.get(n.split(" ")[0], 9), "ratio" in n))
    for name in names:
        report.add(name, _unit(name), [f[name] for f in per_rep if name in f])
    report.notes += _notes(report, sizes, time.monotonic() - started)
    report.artifacts["graphs.png"] = lambda path: _plot(report, path)
    return report


def _notes(report: Report, sizes: Sizes, elapsed_s: float) -> list[str]:
    med = {f.name: f.median for f in report.figures}
    lines = [
        f"{sizes.fanouts} fan-outs of {sizes.width} + 1 callback and {sizes.pipelines} pipelines of "
        f"{sizes.length} steps per system and repetition, one graph at a time; {WORKERS} worker processes "
        f"each (jobq: concurrency {CONCURRENCY}); {sizes.reps} repetition(s) in {elapsed_s:.0f} s",
    ]
    for shape in SHAPES:
        for name, better in (("jobs/s", max), ("e2e p50", min)):
            peers = {p: med[f"{shape} {name} {p}"] for p in PEERS if f"{shape} {name} {p}" in med}
            ours = med.get(f"{shape} {name} jobq")
            if not peers or ours is None:
                continue
            best = better(peers, key=lambda p: peers[p])
            lines.append(
                f"{shape} {name}: jobq {ours:.4g} vs best peer {best} {peers[best]:.4g} → ratio "
                f"{ours / peers[best]:.2f}"
            )
    return lines


def _plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = {f.name: f.median for f in report.figures}
    rows = [("jobq", "jobq"), ("jobq, no graph", "jobq plain"), *((p, p) for p in PEERS)]

    def value(shape: str, name: str, row: str) -> float:
        system = row.split(" ")[0]
        plain = " plain" if row.endswith("plain") else ""
        return med.get(f"{shape}{plain} {name} {system}", 0.0)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.8 / len(rows)
    panels = ((axes[0], "jobs/s", "nodes executed per second"), (axes[1], "e2e p50", "ms per graph"))
    for ax, name, label in panels:
        for i, (title, row) in enumerate(rows):
            xs = [x + i * width for x in range(len(SHAPES))]
            ax.bar(xs, [value(shape, name, row) for shape in SHAPES], width, label=title)
        ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(SHAPES))], list(SHAPES))
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.set_title(f"{name} (medians over repetitions)")
    axes[0].legend(fontsize=8)
    fig.suptitle("task graphs: 2 worker processes, one graph at a time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
