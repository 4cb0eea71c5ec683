"""``python -m loadtest.script_ab BASELINE``: this checkout's Lua transitions against another checkout's, on
one throw-away Redis, interleaved — the steadiest way to see what a script change costs Redis: both run
on the same server, the same data sizes, the same moments (separate runs on this 2-core machine differ by
±10 % from an append-only rewrite or another process alone).

``BASELINE`` is a checkout's root (``git archive <rev> | tar -x -C /tmp/base``); its scripts are built by
its own loader (``jqcore.state.scripts.source``, run with it on ``PYTHONPATH``) and called through this
checkout's engine, so the two must take the same ``KEYS`` and ``ARGV`` (true when only Lua changed).

Per tree, per repetition, on a fresh queue: 20,000 no-op jobs stored in calls of 2,000 (``enqueue_batch``),
then run in pool rounds of 50 (``settle_claim``: the last round's completions and the next claims in one
call); events off (``events_cap`` 0) and on. The figure is Redis's time in the script calls
(``INFO commandstats``, ``evalsha``), µs per job.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqcore.state import Engine, QueueConfig, Settle
from jqcore.state.keys import QueueKeys
from jqcore.state.scripts import SCRIPT_NAMES
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["run"]

JOBS, CALL, ROUND, REPS = 20_000, 2_000, 50, 6


def baseline_sources(root: Path) -> dict[str, str]:
    """The scripts as the baseline's own loader builds them (those it has of this checkout's names)."""
    code = (
        "import json, sys\n"
        "from jqcore.state.scripts import SCRIPTS, source\n"
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


async def _phases(engine: Engine, client: aioredis.Redis, queue: str, events: bool) -> tuple[float, float]:
    """(enqueue, rounds) script µs per job on a fresh ``queue``."""
    await engine.configure_queue(queue, QueueConfig(events_cap=10_000_000 if events else 0))
    t, start = now_ms(), await _script_usec(client)
    for i in range(0, JOBS, CALL):
        jobs = range(i, min(JOBS, i + CALL))
        await engine.enqueue_batch([new_envelope(queue, "noop", None, id=f"a{j}", at_ms=t) for j in jobs])
    enqueue, start = await _script_usec(client) - start, await _script_usec(client)
    done = 0
    _, claimed = await engine.settle_claim(queue, [], ROUND, lease_ms=60_000, worker="ab")
    while claimed:
        items = [Settle((c.envelope.id, c.attempt, c.token)) for c in claimed]
        _, claimed = await engine.settle_claim(queue, items, ROUND, lease_ms=60_000, worker="ab")
        done += len(items)
    if done != JOBS:
        raise RuntimeError(f"rounds finished {done} of {JOBS} jobs")
    rounds = await _script_usec(client) - start
    await client.delete(*[k async for k in client.scan_iter(match=f"{QueueKeys(queue).prefix}*")])
    return enqueue / JOBS, rounds / JOBS


def _ab(url: str, baseline: dict[str, str]) -> dict[str, float]:
    async def both() -> dict[str, float]:
        client = aioredis.Redis.from_url(url, socket_timeout=120)
        engines = {"this": Engine(client), "baseline": Engine(client)}
        for name, text in baseline.items():
            engines["baseline"]._scripts[name] = client.register_script(text)
        sums: dict[str, float] = {}
        try:
            for rep in range(REPS):
                order = list(engines) if rep % 2 == 0 else list(reversed(engines))
                for events in (False, True):
                    for tree in order:
                        on = "on" if events else "off"
                        enqueue, rounds = await _phases(engines[tree], client, f"ab{tree}{rep}{on}", events)
                        for phase, value in (("enqueue", enqueue), ("rounds", rounds)):
                            key = f"{phase}, events {on}: {tree}"
                            sums[key] = sums.get(key, 0.0) + value / REPS
        finally:
            await client.aclose()
        return sums

    return asyncio.run(both())


def run(baseline_root: Path) -> Report:
    baseline = baseline_sources(baseline_root)
    report = Report("script-ab", {"baseline": str(baseline_root), "jobs": JOBS, "reps": REPS})
    samples = redis_rounds("script-ab", 3, lambda url, _rep: _ab(url, baseline))
    for name, values in sorted(samples.items()):
        report.add(name, "µs script/job", values)
    report.notes.append(
        f"{JOBS:,} no-op jobs a run, enqueued in calls of {CALL:,}, run in rounds of {ROUND}; {REPS} runs a "
        "sample, the trees interleaved on one Redis; 3 samples, each on a Redis of its own"
    )
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1], "jqcore").is_dir():
        sys.exit("usage: python -m loadtest.script_ab BASELINE (a checkout's root, e.g. from git archive)")
    result = run(Path(sys.argv[1]))
    for figure in result.figures:
        print(f"{figure.name:<36} {figure.median:8.2f} {figure.unit}  ±{figure.spread:.1%}")
    for note in result.notes:
        print(f"- {note}")
    print(f"report: {result.save()}")
