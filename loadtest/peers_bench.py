"""``./run bench peers``: jobq side by side with celery, rq, dramatiq, arq, huey, taskiq (list and stream
brokers), saq and streaq, in one run, on one dedicated Redis.

Every peer runs from its own virtualenv (created once with uv under ``JOBQ_HOME/peers/<peer>-<hash>``,
exact versions pinned below) through a small runner in ``loadtest/peers/run_<peer>.py`` that uses the
peer's documented API and CLI (settings in each runner's docstring). jobq's Redis stage runs the same
way from jobq's own environment (``run_jobq.py``); its full Kafka path is ``./run bench e2e``.

Same conditions for every system: the same queue Redis (flushed between systems), a separate
measurement Redis, the same no-op task (one RPUSH of its start latency when due, one INCR), 2 worker
processes. Scenarios, in order, per system:

1. **enqueue** N jobs from one client process with the peer's best way (bulk where it has one);
2. **drain** those N jobs: 2 workers start; the rate is taken from the last sample (every 20 ms) with
   fewer than 1 % done to the last job (start-up excluded, the same for everyone); the samples make the
   throughput plot;
3. **latency** at a fixed arrival rate (open loop; each job carries its due time; a late send keeps it,
   so no coordinated omission): p50/p99/max of start − due;
4. **delayed lateness**: jobs scheduled ``delay`` seconds ahead with the peer's delay API; start −
   scheduled time (negative = early). taskiq needs a separate scheduler process: not measured.

Two tables (``tables``), each a full pass over the systems:

* **one shape** (``shape``, first): every system's worker the same shape — :data:`WORKERS` processes ×
  ``slots`` (default :data:`SHAPE`: 2 × 16; ``./run bench peers --slots N``; ``BENCH_SLOTS``: threads,
  async tasks or jobs in flight, as the system calls them; rq's SimpleWorker runs one job at a time, so
  2 × 1) — and the same no-op job that counts itself with one
  Redis round trip (``BENCH_ROUNDTRIP``: blocking in a thread, awaited in an event loop); enqueue and drain
  only: the steady drain (start-up excluded, as above), spawn → last job (start-up included, and the drain
  rate over it), worker and Redis CPU per job;
* **each system at its best** (``best``): every system with its own settings (each runner's docstring)
  and the in-memory count, all four scenarios. Its figures keep their names (``drain jobq``); the one
  shape's are prefixed with it (``2x16 drain jobq``).

jobq's worker floor (:mod:`loadtest.floors.worker`, ``run_floor.py``) runs as a system too: a yardstick,
not a peer. Ratios are to the best peer (the floor is not one) and to the floor. Everything shares this
machine's 2 cores.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
from rich.progress import Progress

from jqstack.paths import home
from jqstack.procs import free_port
from jqstack.supervise import Children
from loadtest.cpu import redis_cpu_s, tree_cpu_s
from loadtest.report import Report

__all__ = ["PEERS", "run"]

PEERS_DIR = Path(__file__).parent / "peers"
PEERS: dict[str, list[str]] = {
    "celery": ["celery[redis]==5.7.0"],
    "rq": ["rq==3.0.0"],
    "dramatiq": ["dramatiq[redis]==2.2.1"],
    "arq": ["arq==0.28.0"],
    "huey": ["huey==3.5.4", "redis"],
    "taskiq-list": ["taskiq==0.13.0", "taskiq-redis==1.2.4"],
    "taskiq-stream": ["taskiq==0.13.0", "taskiq-redis==1.2.4"],
    "saq": ["saq==0.26.4", "typing-extensions"],
    "streaq": ["streaq==7.2.0"],
}
"""Peer → pinned requirements (its venv also gets ``redis`` for the measurement)."""
WORKERS = 2
SHAPE = 16
"""Slots per worker process in the one-shape table (its processes: :data:`WORKERS`)."""
OWN_ENV = ("jobq", "floor")
"""Systems that run in jobq's own environment, from this checkout."""
TABLES = ("shape", "best")


@dataclass
class Sizes:
    jobs: int
    rate: float
    seconds: float
    delayed: int
    delay_s: float


@dataclass
class Outcome:
    figures: dict[str, float] = field(default_factory=dict)
    series: list[tuple[float, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def peer_python(peer: str) -> Path:
    """The peer's venv python (created and cached on first use)."""
    if peer in OWN_ENV:
        return Path(sys.executable)
    reqs = [*PEERS[peer], "redis"]
    tag = hashlib.sha256("\n".join(sorted(set(reqs))).encode()).hexdigest()[:10]
    venv = home() / "peers" / f"{peer.split('-')[0]}-{tag}"
    python = venv / "bin" / "python"
    if not python.exists():
        uv = Path(sys.executable).parent / "uv"
        subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        subprocess.run([str(uv), "pip", "install", "-q", "--python", str(python), *reqs], check=True)
    return python


def _env(peer: str, queue_url: str, metric_url: str, slots: int) -> dict[str, str]:
    path = [str(PEERS_DIR), *([str(PEERS_DIR.parents[1])] if peer in OWN_ENV else [])]
    return {
        **os.environ,
        "QUEUE_REDIS": queue_url,
        "METRIC_REDIS": metric_url,
        "TASKIQ_BROKER": peer.removeprefix("taskiq-"),
        "PYTHONPATH": os.pathsep.join(path),
        "BENCH_SLOTS": str(slots) if slots else "",
        "BENCH_ROUNDTRIP": "1" if slots else "",
    }


def _runner(peer: str) -> str:
    return f"run_{peer.split('-')[0]}.py"


def _role(peer: str, env: dict[str, str], *args: float | str, timeout: float = 600) -> float | None:
    """Run one role of the peer's runner; its own elapsed seconds, or None if unsupported."""
    cmd = [str(peer_python(peer)), _runner(peer), *(str(a) for a in args)]
    done = subprocess.run(cmd, cwd=PEERS_DIR, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode == 3:
        return None
    if done.returncode != 0:
        raise RuntimeError(f"{peer} {args[0]} failed: {done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1].split()[1])


def _wait_done(
    m: redis.Redis,
    n: int,
    timeout_s: float,
    procs: Children,
    mark: tuple[int, Callable[[int], None]] | None = None,
) -> list[tuple[float, int]]:
    """Sample the done counter until ``n``; [(seconds since start, done)]. ``mark = (k, f)`` calls
    ``f(done)`` once, at the first sample with at least ``k`` done."""
    started = time.perf_counter()
    series: list[tuple[float, int]] = []
    while True:
        done = int(m.get("done") or 0)
        series.append((time.perf_counter() - started, done))
        if mark is not None and done >= mark[0]:
            mark[1](done)
            mark = None
        if done >= n:
            return series
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"only {done}/{n} jobs done in {timeout_s:g}s")
        if dead := procs.dead():
            raise RuntimeError(f"a worker exited: {dead}")
        time.sleep(0.02)


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    if not values:
        return float("nan"), float("nan"), float("nan")
    n = len(values)
    return values[min(n - 1, n // 2)], values[min(n - 1, int(0.99 * n))], values[-1]


def measure(peer: str, queue_url: str, metric_url: str, sizes: Sizes, slots: int = 0) -> Outcome:
    """One system's figures: at its best (``slots`` 0), or in the one shape (``slots`` per worker process,
    the round-trip job; enqueue and drain only)."""
    q, m = redis.Redis.from_url(queue_url), redis.Redis.from_url(metric_url)
    q.flushall()
    m.flushall()
    env = _env(peer, queue_url, metric_url, slots)
    out = Outcome()
    elapsed = _role(peer, env, "enqueue", sizes.jobs)
    assert elapsed is not None
    out.figures["enqueue"] = sizes.jobs / elapsed
    with Children(grace_s=15.0) as procs:  # stopped together, one grace, on any exit
        spawned = time.perf_counter()
        for i in range(WORKERS):
            procs.start(
                f"{peer}-worker-{i}",
                [str(peer_python(peer)), _runner(peer), "worker"],
                cwd=PEERS_DIR,
                env=env,
            )
        pids = list(procs.pids().values())
        started = time.perf_counter()
        cpu: list[tuple[int, float, float]] = []  # (done, workers' CPU s, Redis CPU s) once 1 % is done
        series = _wait_done(
            m,
            sizes.jobs,
            60 + sizes.jobs / 50,
            procs,
            (max(1, sizes.jobs // 100), lambda done: cpu.append((done, tree_cpu_s(pids), redis_cpu_s(q)))),
        )
        if (jobs := sizes.jobs - cpu[0][0]) >= 1000:  # start-up excluded, as for the rate
            out.figures["worker CPU per 1k jobs"] = (tree_cpu_s(pids) - cpu[0][1]) / jobs * 1000
            out.figures["Redis CPU per 1k jobs"] = (redis_cpu_s(q) - cpu[0][2]) / jobs * 1000
        first = [(t, n) for t, n in series if n < max(1, sizes.jobs // 100)][-1]
        out.figures["drain"] = (sizes.jobs - first[1]) / max(1e-6, series[-1][0] - first[0])
        out.series = [(t - first[0], n) for t, n in series if t >= first[0]]
        to_last = series[-1][0] + (started - spawned)
        out.figures["spawn → last job"] = to_last
        out.figures["drain incl. start-up"] = sizes.jobs / to_last
        if slots:
            return out
        m.flushall()
        _role(peer, env, "rate", sizes.rate, sizes.seconds)
        _wait_done(m, int(sizes.rate * sizes.seconds), 120, procs)
        lat = [float(v) for v in m.lrange("lat", 0, -1)]
        out.figures["latency p50"], out.figures["latency p99"], out.figures["latency max"] = _percentiles(lat)
        m.flushall()
        if _role(peer, env, "delayed", sizes.delayed, sizes.delay_s) is None:
            why = "it has no delayed jobs" if peer == "floor" else "needs a separate scheduler process"
            out.notes.append(f"{peer}: delayed jobs not measured ({why})")
        else:
            _wait_done(m, sizes.delayed, sizes.delay_s + 60, procs)
            late = [float(v) for v in m.lrange("lat", 0, -1)]
            p50, p99, worst = _percentiles(late)
            out.figures |= {"lateness p50": p50, "lateness p99": p99, "lateness max": worst}
            out.figures["early starts"] = sum(1 for v in late if v < 0)
    return out


def _redis(servers: Children, port: int, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = servers.start(f"redis-{port}", [*argv, "--dir", str(folder)])
    server.wait_ready(lambda: _pings(port), timeout_s=10, interval_s=0.05)


def _pings(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=2) as client:
        return bool(client.ping())


SYSTEMS = ["jobq", "floor", *PEERS]


def run(
    quick: bool = False,
    systems: list[str] | None = None,
    tables: tuple[str, ...] = TABLES,
    slots: int = SHAPE,
    sizes: Sizes | None = None,
) -> Report:
    """Every table of ``tables`` (``shape``: :data:`WORKERS` × ``slots``; ``best``) over ``systems``
    (default :data:`SYSTEMS`); ``sizes``: other than the full or quick ones."""
    sizes = sizes or (Sizes(300, 100.0, 1.0, 10, 1.0) if quick else Sizes(50_000, 500.0, 10.0, 200, 3.0))
    reps = 1 if quick else 3
    chosen = systems or SYSTEMS
    params = {"reps": reps, "worker_processes": WORKERS, "shape_slots": slots, "tables": list(tables)}
    report = Report("peers", {**params, **sizes.__dict__})
    folder = home() / "peers" / f"redis-{os.getpid()}"
    qport, mport = free_port(), free_port()
    servers = Children(grace_s=10.0)
    urls = (f"redis://127.0.0.1:{qport}/0", f"redis://127.0.0.1:{mport}/0")
    samples: dict[str, dict[str, list[float]]] = {}
    series: dict[str, list[tuple[float, int]]] = {}
    try:
        _redis(servers, qport, folder / "queue")
        _redis(servers, mport, folder / "metrics")
        _measure_all(report, chosen, tables, (urls, sizes, reps, slots), samples, series)
    finally:
        servers.stop()
        shutil.rmtree(folder, ignore_errors=True)
    for peer, figures in samples.items():
        for name, values in figures.items():
            report.add(f"{name} {peer}", _unit(name.removeprefix(shape_prefix(slots))), values)
    if "rq" in chosen and "shape" in tables:
        report.notes.append(
            f"rq in the one shape: its SimpleWorker runs one job at a time: {WORKERS} × 1, not × {slots}"
        )
    report.notes += _ratios(report, shape_prefix(slots))
    report.sections += _tables(report, chosen, tables, slots)
    if series:
        report.artifacts["throughput.png"] = lambda path: _plot_drain(series, path)
    if "best" in tables:
        report.artifacts["latency.png"] = lambda path: _plot_latency(report, path)
    return report


def _measure_all(
    report: Report,
    chosen: list[str],
    tables: tuple[str, ...],
    how: tuple[tuple[str, str], Sizes, int, int],
    samples: dict[str, dict[str, list[float]]],
    series: dict[str, list[tuple[float, int]]],
) -> None:
    """Each table's repetitions of every chosen system into ``samples`` (and the best table's drain
    ``series``); a system that fails is noted and left out of that repetition."""
    urls, sizes, reps, slots = how
    with Progress() as progress:
        setup = progress.add_task("peer virtualenvs", total=len(chosen))
        for peer in chosen:
            peer_python(peer)
            progress.advance(setup)
        task = progress.add_task("tables x repetitions x systems", total=len(tables) * len(chosen) * reps)
        for table, _rep, peer in ((t, r, p) for t in tables for r in range(reps) for p in chosen):
            prefix = shape_prefix(slots) if table == "shape" else ""
            try:
                got = measure(peer, urls[0], urls[1], sizes, slots if table == "shape" else 0)
            except Exception as exc:
                report.notes.append(f"{prefix}{peer} failed: {exc!r}"[:500])
                got = Outcome()
            for name, value in got.figures.items():
                samples.setdefault(peer, {}).setdefault(prefix + name, []).append(value)
            report.notes += [n for n in got.notes if n not in report.notes]
            if got.series and table == "best":
                series[peer] = got.series
            progress.advance(task)


def shape_prefix(slots: int) -> str:
    """What the one shape's figure names start with: ``2x16 `` (``2x16 drain jobq``)."""
    return f"{WORKERS}x{slots} "


def _unit(name: str) -> str:
    if name in ("enqueue", "drain", "drain incl. start-up"):
        return "jobs/s"
    if "CPU" in name or name == "spawn → last job":
        return "s"
    return "jobs" if name == "early starts" else "ms"


def _tables(report: Report, chosen: list[str], tables: tuple[str, ...], slots: int) -> list[str]:
    """The report's markdown tables: the one shape, and each system at its best."""
    med = {f.name: f.median for f in report.figures}

    def cell(name: str, scale: float = 1.0, digits: str = ",.0f") -> str:
        return format(med[name] * scale, digits) if name in med else "—"

    out = []
    if "shape" in tables:
        p = shape_prefix(slots)
        lines = [
            f"## One shape: {WORKERS} worker processes × {slots} slots, the same no-op job (one Redis round "
            "trip), medians",
            "",
            "| system | drain, steady, jobs/s | spawn → last job, s | drain incl. start-up, jobs/s | "
            "worker CPU µs/job | Redis CPU µs/job |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for x in chosen:
            cells = [
                x,
                cell(f"{p}drain {x}"),
                cell(f"{p}spawn → last job {x}", digits=".2f"),
                cell(f"{p}drain incl. start-up {x}"),
                cell(f"{p}worker CPU per 1k jobs {x}", 1000),
                cell(f"{p}Redis CPU per 1k jobs {x}", 1000),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    if "best" in tables:
        lines = [
            "## Each system at its best (its own settings, each runner's docstring; in-memory count)",
            "",
            "| system | enqueue, jobs/s | drain, jobs/s | spawn → last job, s | worker / Redis CPU µs/job | "
            "start latency p50 / p99, ms | delayed lateness p50 / p99, ms |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for x in chosen:
            cells = [
                x,
                cell(f"enqueue {x}"),
                cell(f"drain {x}"),
                cell(f"spawn → last job {x}", digits=".2f"),
                f"{cell(f'worker CPU per 1k jobs {x}', 1000)} / {cell(f'Redis CPU per 1k jobs {x}', 1000)}",
                f"{cell(f'latency p50 {x}', digits='.2f')} / {cell(f'latency p99 {x}', digits='.2f')}",
                f"{cell(f'lateness p50 {x}', digits='.1f')} / {cell(f'lateness p99 {x}', digits='.1f')}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return out


def _ratios(report: Report, prefix: str) -> list[str]:
    med = {f.name: f.median for f in report.figures}
    lines = []
    for name, better in (
        (f"{prefix}drain", max),
        (f"{prefix}drain incl. start-up", max),
        ("drain", max),
        ("enqueue", max),
        ("latency p50", min),
        ("latency p99", min),
        ("lateness p99", min),
    ):
        peers = {p: med[f"{name} {p}"] for p in PEERS if f"{name} {p}" in med}
        if not peers or f"{name} jobq" not in med:
            continue
        best = better(peers, key=lambda p: peers[p])
        ratio = med[f"{name} jobq"] / peers[best]
        ours = med[f"{name} jobq"]
        line = f"{name}: jobq {ours:.4g} vs best peer {best} {peers[best]:.4g} → ratio {ratio:.2f}"
        if med.get(f"{name} floor"):
            line += f"; jobq / floor {ours / med[f'{name} floor']:.2f}"
        lines.append(line)
    return lines


def _plot_drain(series: dict[str, list[tuple[float, int]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for peer, points in sorted(series.items()):
        ax.plot([t for t, _ in points], [n for _, n in points], label=peer)
    ax.set_xlabel("seconds since the last sample under 1 % done")
    ax.set_ylabel("jobs done")
    ax.set_title("drain with 2 worker processes (last repetition)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_latency(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = {f.name: f.median for f in report.figures}
    systems = [s for s in SYSTEMS if f"latency p50 {s}" in med]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.27
    for i, q in enumerate(("p50", "p99", "max")):
        xs = [x + i * width for x in range(len(systems))]
        ax.bar(xs, [med[f"latency {q} {s}"] for s in systems], width, label=q)
    ax.set_xticks([x + width for x in range(len(systems))], systems, rotation=30)
    ax.set_yscale("log")
    ax.set_ylabel("enqueue → start (ms)")
    ax.set_title("start latency at a fixed arrival rate (medians over repetitions)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
