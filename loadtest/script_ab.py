"""``python -m loadtest.script_ab BASELINE``: this checkout's Lua transitions against another checkout's, on
one throw-away Redis, interleaved — the steadiest way to see what a script change costs Redis: both run
on the same server, the same data sizes, the same moments (separate runs on this 2-core machine differ by
±10 % from an append-only rewrite or another process alone).

``BASELINE`` is a checkout's root (``git archive <rev> | tar -x -C /tmp/base``); its scripts are built by
its own loader (``jqengine.scripts.source``, run with it on ``PYTHONPATH``: a checkout from after the
engine became the package ``jqengine``) and called through this checkout's engine, so the two must take the
same ``KEYS`` and ``ARGV`` (true when only Lua changed).

Per tree, per run (6 a sample, the trees' order alternating), on a fresh queue: 20,000 no-op jobs stored
in calls of 2,000 (``enqueue_batch``), then run in pool rounds of 50 (``settle_claim``: the last round's
completions and the next claims in one call); events off (``events_cap`` 0) and on. The figure is Redis's
time in the script calls (``INFO commandstats``, ``evalsha``), µs per job.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis

from jqengine import Engine, QueueConfig
from jqengine.keys import QueueKeys
from jqengine.scripts import SCRIPT_NAMES
from loadtest.events_bench import CALL, ROUND, run_in_rounds, store
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["run"]


def baseline_sources(root: Path) -> dict[str, str]:
    """The scripts as the baseline's own loader builds them (those it has of this checkout's names)."""
    code = (
        "import json, sys\n"
        "from jqengine.scripts import SCRIPTS, source\n"
        "print(json.dumps({n: source(n) for n in sys.argv[1:] if n in SCRIPTS}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", code, *SCRIPT_NAMES],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    sources: dict[str, str] = json.loads(out.stdout)
    return sources


async def _script_usec(client: aioredis.Redis) -> float:
    stats = await client.info("commandstats")
    return float(stats.get("cmdstat_evalsha", {}).get("usec", 0))


async def _phases(
    engine: Engine, client: aioredis.Redis, queue: str, events: bool, jobs: int
) -> tuple[float, float]:
    """(enqueue, rounds) script µs per job on a fresh ``queue`` of ``jobs`` jobs."""
    await engine.configure_queue(queue, QueueConfig(events_cap=10_000_000 if events else 0))
    start = await _script_usec(client)
    await store(engine, queue, jobs)
    enqueue, start = await _script_usec(client) - start, await _script_usec(client)
    await run_in_rounds(engine, queue, jobs)
    rounds = await _script_usec(client) - start
    await client.delete(*[k async for k in client.scan_iter(match=f"{QueueKeys(queue).prefix}*")])
    return enqueue / jobs, rounds / jobs


def _ab(url: str, baseline: dict[str, str], jobs: int, reps: int) -> dict[str, float]:
    async def both() -> dict[str, float]:
        client = aioredis.Redis.from_url(url, socket_timeout=120)
        engines = {"this": Engine(client), "baseline": Engine(client)}
        for name, text in baseline.items():
            engines["baseline"]._scripts[name] = client.register_script(text)
        sums: dict[str, float] = {}
        try:
            for rep in range(reps):
                order = list(engines) if rep % 2 == 0 else list(reversed(engines))
                for events in (False, True):
                    for tree in order:
                        on = "on" if events else "off"
                        queue = f"ab{tree}{rep}{on}"
                        enqueue, rounds = await _phases(engines[tree], client, queue, events, jobs)
                        for phase, value in (("enqueue", enqueue), ("rounds", rounds)):
                            key = f"{phase}, events {on}: {tree}"
                            sums[key] = sums.get(key, 0.0) + value / reps
        finally:
            await client.aclose()
        return sums

    return asyncio.run(both())


def run(baseline_root: Path, quick: bool = False) -> Report:
    """``quick``: tiny sizes, one sample (a smoke run)."""
    jobs, reps, samples_n = (1_000, 2, 1) if quick else (20_000, 6, 3)
    baseline = baseline_sources(baseline_root)
    report = Report("script-ab", {"baseline": str(baseline_root), "jobs": jobs, "reps": reps})
    samples = redis_rounds("script-ab", samples_n, lambda url, _rep: _ab(url, baseline, jobs, reps))
    for name, values in sorted(samples.items()):
        report.add(name, "µs script/job", values)
    report.notes.append(
        f"{jobs:,} no-op jobs a run, enqueued in calls of {CALL:,}, run in rounds of {ROUND}; {reps} runs a "
        f"sample, the trees interleaved on one Redis; {samples_n} samples, each on a Redis of its own"
    )
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1], "jqengine").is_dir():
        sys.exit("usage: python -m loadtest.script_ab BASELINE (a checkout's root, with jqengine/)")
    result = run(Path(sys.argv[1]))
    for figure in result.figures:
        print(f"{figure.name:<36} {figure.median:8.2f} {figure.unit}  ±{figure.spread:.1%}")
    for note in result.notes:
        print(f"- {note}")
    print(f"report: {result.save()}")
