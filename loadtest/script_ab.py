"""``python -m loadtest.script_ab BASELINE``: this checkout's Lua transitions against another checkout's, on
one throw-away Redis, interleaved — the steadiest way to see what a script change costs Redis: both run
on the same server, the same data sizes, the same moments (separate runs on this 2-core machine differ by
±10 % from an append-only rewrite or another process alone).

``BASELINE`` is a checkout's root (``git archive <rev> | tar -x -C /tmp/base``); its Lua is built by its
own loader (run with it on ``PYTHONPATH``: a checkout from after the engine became the package
``jqengine``) — a Redis Functions library (``jqengine.scripts.function_library``, called by ``FCALL``) or,
from a checkout before it, one script a transition (``jqengine.scripts.source``, called by ``EVALSHA``) —
and called through this checkout's engine, so the two must take the same ``KEYS`` and ``ARGV`` (true when
only Lua or how it reaches Redis changed).

Per tree, per run (6 a sample, the trees' order alternating), on a fresh queue: 20,000 no-op jobs stored
in calls of 2,000 (``enqueue_batch``), then run in pool rounds of 50 (``settle_claim``: the last round's
completions and the next claims in one call); events off (``events_cap`` 0) and on. The figure is Redis's
time in the script calls (``INFO commandstats``: ``evalsha``, ``fcall`` and ``fcall_ro``), µs per job.
Beside them, the worker floor's lease queue (:mod:`loadtest.floors.lease`) runs as many jobs the same
way — written in batches of 2,000 (two commands, no script), run in rounds of 50 by its one call
(``SETTLE_CLAIM``) — the least Lua a lease queue's promise needs: ``rounds: floor`` is the figure a
tree's rounds compare with.

A script call's fixed cost, per tree: 2,000 ``complete`` calls for jobs that do not exist (pipelined;
each binds its keys, reads one record and answers ``MISSING``; a script also defines the library
functions it is sent with), µs per call.

What loading the Lua costs, per tree: the bytes of all its scripts as ``SCRIPT LOAD`` sends them, or of
its library as ``FUNCTION LOAD`` does (sent once, and again after Redis lost it), and Redis's time to
compile them all (``script|load`` or ``function|load`` µs, each run loading them :data:`LOADS` times, each
time as a text Redis has not seen: a trailing comment differs, so nothing comes from its script cache).

``--instructions``: the same two trees counted in **instructions**, not time (the machine's load does not
move them): a Redis of its own under ``valgrind --tool=callgrind``, counting only inside the script
commands (``FCALL``, ``FCALL_RO``, ``EVALSHA``, ``EVAL``: not the event loop), zeroed before a phase and
dumped after it (``callgrind_control``); :data:`INSTR_RUNS` runs a tree, interleaved, events on. The
phases (:func:`_counted`): one-job ``claim``, ``enqueue_batch`` and missing-job ``complete`` calls (k
instructions a call), ``settle_claim`` rounds of 7 and 50 and an ``enqueue_batch`` of 500 (a job); beside
them the floor's rounds of 50 (a job), what a tree's rounds of 50 compare with: the Redis-CPU ratio of
``./run bench floors --hop worker`` without the machine's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqengine import Engine, QueueConfig, Settle
from jqengine.core import Functions
from jqengine.keys import QueueKeys
from jqengine.scripts import SCRIPT_NAMES, FunctionLibrary, function_library
from loadtest.events_bench import CALL, ROUND, run_in_rounds, store
from loadtest.floors.lease import SETTLE_CLAIM
from loadtest.floors.lease import keys as floor_keys
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["run"]

LOADS = 5
"""How often a run loads every script of each tree (compile-time figure)."""
CALLS = 2_000
"""``complete`` calls a run makes for missing jobs (the fixed cost of a call)."""


LIBRARY = "library"
"""A tree's texts: ``{LIBRARY: <name>\\n<text>}`` (a Functions library), else a script's by its name."""


def baseline_sources(root: Path) -> dict[str, str]:
    """The baseline's Lua as its own loader builds it: its library, or (an older checkout) its scripts
    of this checkout's names."""
    code = (
        "import json, sys\n"
        "import jqengine.scripts as s\n"
        "if hasattr(s, 'function_library'):\n"
        "    lib = s.function_library()\n"
        f"    print(json.dumps({{{LIBRARY!r}: lib.name + '\\n' + lib.text}}))\n"
        "else:\n"
        "    print(json.dumps({n: s.source(n) for n in sys.argv[1:] if n in s.SCRIPTS}))\n"
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


def this_tree() -> dict[str, str]:
    lib = function_library()
    return {LIBRARY: f"{lib.name}\n{lib.text}"}


class _Scripts:
    """A tree of scripts called as its engine called them: by ``EVALSHA``, loaded where Redis lacks one
    (the caller :class:`jqengine.core.Functions` is to this checkout's engine)."""

    def __init__(self, client: aioredis.Redis, texts: dict[str, str]) -> None:
        self._client = client
        self._scripts = {name: client.register_script(text) for name, text in texts.items()}

    async def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self._scripts[name](keys=keys, args=args)

    async def pipelined(self, name: str, keys: Sequence[str], calls: Sequence[Sequence[Any]]) -> list[Any]:
        script = self._scripts[name]
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            got = await pipe.execute(raise_on_error=False)
            if attempt or not any(isinstance(r, NoScriptError) for r in got):
                return got
            await self._client.script_load(script.script)
        raise AssertionError("unreachable")


def _caller(client: aioredis.Redis, texts: dict[str, str]) -> Any:
    if LIBRARY in texts:
        name, _, text = texts[LIBRARY].partition("\n")
        return Functions(client, FunctionLibrary(name, text))
    return _Scripts(client, texts)


async def _script_usec(client: aioredis.Redis) -> float:
    stats = await client.info("commandstats")
    return float(sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in ("evalsha", "fcall", "fcall_ro")))


async def _load_usec(client: aioredis.Redis, texts: dict[str, str], tag: str) -> float:
    """Redis's µs to compile every script (or the library) in ``texts`` once (:data:`LOADS` loads each,
    averaged)."""
    stat = "cmdstat_function|load" if LIBRARY in texts else "cmdstat_script|load"
    before = (await client.info("commandstats")).get(stat, {}).get("usec", 0)
    for i in range(LOADS):
        for text in texts.values():
            if LIBRARY in texts:
                await client.function_load(f"{text.partition(chr(10))[2]}\n-- {tag} {i}\n", replace=True)
            else:
                await client.script_load(f"{text}\n-- {tag} {i}\n")
    after = (await client.info("commandstats")).get(stat, {}).get("usec", 0)
    return float(after - before) / LOADS


async def _call_usec(engine: Engine, client: aioredis.Redis, queue: str) -> float:
    """Redis's µs a ``complete`` call for a job that does not exist (:data:`CALLS` calls, averaged)."""
    start = await _script_usec(client)
    await engine.jobs.complete_many(queue, [((f"missing-{i}", 1, "token"), None) for i in range(CALLS)])
    return (await _script_usec(client) - start) / CALLS


def script_bytes(texts: dict[str, str]) -> float:
    """kB ``SCRIPT LOAD`` sends for every script of a tree (``FUNCTION LOAD`` for its library)."""
    return sum(len(text.encode()) for text in texts.values()) / 1000


async def _phases(
    engine: Engine, client: aioredis.Redis, queue: str, events: bool, jobs: int
) -> tuple[float, float]:
    """(enqueue, rounds) script µs per job on a fresh ``queue`` of ``jobs`` jobs."""
    await engine.admin.configure_queue(queue, QueueConfig(events_cap=10_000_000 if events else 0))
    start = await _script_usec(client)
    await store(engine, queue, jobs)
    enqueue, start = await _script_usec(client) - start, await _script_usec(client)
    await run_in_rounds(engine, queue, jobs)
    rounds = await _script_usec(client) - start
    await client.delete(*[k async for k in client.scan_iter(match=f"{QueueKeys(queue).prefix}*")])
    return enqueue / jobs, rounds / jobs


async def _floor_fill(client: aioredis.Redis, queue: str, jobs: int) -> list[str]:
    """``jobs`` written to the floor's lease queue in batches of :data:`CALL`; its keys."""
    keys = floor_keys(queue)
    pending, _, records, _, _ = keys
    payload = b"x" * 200  # about a no-op job's envelope
    for i in range(0, jobs, CALL):
        ids = [f"e{j}" for j in range(i, min(jobs, i + CALL))]
        pipe = client.pipeline(transaction=False)
        pipe.hset(records, mapping=dict.fromkeys(ids, payload))
        pipe.zadd(pending, {job_id: i for job_id in ids}, nx=True)
        await pipe.execute()
    return keys


async def _floor_drain(client: aioredis.Redis, keys: list[str], jobs: int) -> None:
    """The floor's ``jobs`` run in rounds of :data:`ROUND`, each call settling the last round's jobs and
    claiming the next."""
    settle_claim = client.register_script(SETTLE_CLAIM)
    done: list[bytes] = []
    ran = 0
    while True:
        reply = await settle_claim(keys, [now_ms(), 60_000, ROUND, *done])
        ran += int(reply[0])
        done = [x for i in range(1, len(reply), 3) for x in (reply[i], reply[i + 1])]
        if not done:
            break
    await client.delete(*keys)
    if ran != jobs:
        raise RuntimeError(f"the floor's rounds settled {ran} of {jobs} jobs")


async def _floor_rounds(client: aioredis.Redis, queue: str, jobs: int) -> float:
    """The floor's script µs per job (:func:`_floor_fill`, then :func:`_floor_drain`)."""
    keys = await _floor_fill(client, queue, jobs)
    start = await _script_usec(client)
    await _floor_drain(client, keys, jobs)
    return (await _script_usec(client) - start) / jobs


def _ab(url: str, sources: dict[str, dict[str, str]], jobs: int, reps: int) -> dict[str, float]:
    async def both() -> dict[str, float]:
        client = aioredis.Redis.from_url(url, socket_timeout=120)
        engines = {"this": Engine(client), "baseline": Engine(client)}
        engines["baseline"].core.functions = _caller(client, sources["baseline"])
        sums: dict[str, float] = {}
        try:
            for rep in range(reps):
                order = list(engines) if rep % 2 == 0 else list(reversed(engines))
                for tree in order:
                    load = await _load_usec(client, sources[tree], f"ab {tree} {rep}")
                    sums[f"load all scripts: {tree}"] = (
                        sums.get(f"load all scripts: {tree}", 0.0) + load / reps
                    )
                await client.script_flush()  # the loads' copies; the engines load theirs again on use
                await client.function_flush()
                for tree in order:
                    call = await _call_usec(engines[tree], client, f"ab{tree}{rep}call")
                    key = f"complete, missing job: {tree}"
                    sums[key] = sums.get(key, 0.0) + call / reps
                floor = await _floor_rounds(client, f"abfloor{rep}", jobs)
                sums["rounds: floor"] = sums.get("rounds: floor", 0.0) + floor / reps
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
    sources = {"this": this_tree(), "baseline": baseline}
    report = Report("script-ab", {"baseline": str(baseline_root), "jobs": jobs, "reps": reps})
    samples = redis_rounds("script-ab", samples_n, lambda url, _rep: _ab(url, sources, jobs, reps))
    for name, values in sorted(samples.items()):
        unit = {"load": "µs all scripts", "complete": "µs a call"}.get(
            name.split()[0].strip(","), "µs script/job"
        )
        report.add(name, unit, values)
    for tree, texts in sources.items():
        what = "a library" if LIBRARY in texts else f"{len(texts)} scripts"
        report.add(f"script bytes: {tree}", f"kB, {what}", [script_bytes(texts)])
    report.notes.append(
        f"{jobs:,} no-op jobs a run, enqueued in calls of {CALL:,}, run in rounds of {ROUND}; {reps} runs a "
        f"sample, the trees interleaved on one Redis; {samples_n} samples, each on a Redis of its own"
    )
    return report


INSTR_RUNS = 3
"""Runs a tree in ``--instructions`` (interleaved with the other tree's)."""
_COUNTED = ("fcallCommand", "fcallroCommand", "evalShaCommand", "evalCommand")
"""Redis 7.0's functions for the script commands: callgrind counts inside them only."""


@contextmanager
def _callgrind_redis() -> Iterator[tuple[str, int, Path]]:
    """A throw-away Redis under callgrind, counting nothing outside the script commands: its URL, its
    process id (``callgrind_control``'s) and the folder its dumps go to."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise RuntimeError("--instructions needs valgrind (apt-get install valgrind)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="script-ab-cg-"))
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.%p"]
    valgrind += [f"--toggle-collect={f}" for f in _COUNTED]
    redis = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(folder)]
    server = subprocess.Popen(
        [*valgrind, *redis],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            if (
                subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout
                == b"PONG\n"
            ):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("Redis under callgrind did not answer in 60 s")
        yield f"redis://127.0.0.1:{port}/0", server.pid, folder
    finally:
        server.terminate()
        server.wait(60)
        shutil.rmtree(folder, ignore_errors=True)


def _zero(pid: int) -> None:
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)


def _dump(pid: int, folder: Path) -> int:
    """Instructions since :func:`_zero` (a dump's ``summary:``)."""
    before = set(glob.glob(f"{folder}/cg.*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    for _ in range(600):
        for path in set(glob.glob(f"{folder}/cg.*")) - before:
            lines = Path(path).read_text().splitlines()
            total = [x for x in lines if x.startswith(("summary:", "totals:"))]
            if total:
                os.remove(path)
                return int(total[0].split()[1])
        time.sleep(0.05)
    raise RuntimeError("callgrind wrote no dump")


async def _counted(engine: Engine, pid: int, folder: Path, quick: bool) -> dict[str, float]:
    """One run of the phases on fresh queues: k instructions a call or a job."""
    calls, jobs, batch = (3, 70, 50) if quick else (20, 700, 500)
    q, t, out = f"cg{secrets.token_hex(4)}", now_ms(), {}

    def jobs_of(queue: str, n: int, tag: str) -> list[Any]:
        return [new_envelope(queue, "noop", None, id=f"{tag}{j}", at_ms=t) for j in range(n)]

    await engine.admin.configure_queue(q, QueueConfig(events_cap=10_000_000))
    await engine.enqueue_batch(jobs_of(q, 1, "warm"))  # the tree's Lua loaded, the queue announced
    await engine.jobs.claim(q, 1, lease_ms=60_000)
    _zero(pid)
    for i in range(calls):
        await engine.enqueue_batch(jobs_of(q, 1, f"one{i}-"))
    out["enqueue_batch of 1, a call"] = _dump(pid, folder) / calls
    _zero(pid)
    for _ in range(calls):
        await engine.jobs.claim(q, 1, lease_ms=60_000)
    out["claim of 1, a call"] = _dump(pid, folder) / calls
    _zero(pid)
    for i in range(calls):
        await engine.jobs.complete_many(q, [((f"missing{i}", 1, "token"), None)])
    out["complete, missing job, a call"] = _dump(pid, folder) / calls
    for size in (7, ROUND):
        rq = f"{q}r{size}"
        await engine.admin.configure_queue(rq, QueueConfig(events_cap=10_000_000))
        await engine.enqueue_batch(jobs_of(rq, jobs, "r"))
        _zero(pid)
        done, (_, claimed) = 0, await engine.jobs.settle_claim(rq, [], size, lease_ms=60_000, worker="ab")
        while claimed:
            items = [Settle((c.envelope.id, c.attempt, c.token)) for c in claimed]
            _, claimed = await engine.jobs.settle_claim(rq, items, size, lease_ms=60_000, worker="ab")
            done += len(items)
        out[f"settle_claim rounds of {size}, a job"] = _dump(pid, folder) / done
    bq = f"{q}b"
    await engine.admin.configure_queue(bq, QueueConfig(events_cap=10_000_000))
    await engine.enqueue_batch(jobs_of(bq, 1, "warm"))
    _zero(pid)
    await engine.enqueue_batch(jobs_of(bq, batch, "b"))
    out[f"enqueue_batch of {batch}, a job"] = _dump(pid, folder) / batch
    return {k: v / 1000 for k, v in out.items()}


def instructions(baseline_root: Path, quick: bool = False) -> Report:
    """``--instructions`` (``quick``: tiny sizes, one run a tree)."""
    runs = 1 if quick else INSTR_RUNS
    sources = {"this": this_tree(), "baseline": baseline_sources(baseline_root)}

    async def both(url: str, pid: int, folder: Path) -> dict[str, list[float]]:
        client = aioredis.Redis.from_url(url, socket_timeout=600)
        engines = {tree: Engine(client) for tree in sources}
        engines["baseline"].core.functions = _caller(client, sources["baseline"])
        samples: dict[str, list[float]] = {}
        try:
            for rep in range(runs):
                for tree in list(engines) if rep % 2 == 0 else list(reversed(engines)):
                    for name, value in (await _counted(engines[tree], pid, folder, quick)).items():
                        samples.setdefault(f"{name}: {tree}", []).append(value)
            for _ in range(runs):  # the floor's rounds (module doc), beside the trees' rounds of ROUND
                keys = await _floor_fill(client, f"cgfloor{secrets.token_hex(4)}", floor_jobs)
                _zero(pid)
                await _floor_drain(client, keys, floor_jobs)
                samples.setdefault(f"settle_claim rounds of {ROUND}, a job: floor", []).append(
                    _dump(pid, folder) / floor_jobs / 1000
                )
        finally:
            await client.aclose()
        return samples

    floor_jobs = 70 if quick else 700
    report = Report("script-ab-instructions", {"baseline": str(baseline_root), "runs": runs})
    with _callgrind_redis() as (url, pid, folder):
        samples = asyncio.run(both(url, pid, folder))
    for name, values in sorted(samples.items()):
        report.add(name, "k instructions", values)
    report.notes.append(
        f"Redis under callgrind, counting inside {', '.join(_COUNTED)} only; {runs} runs a tree, the trees "
        "interleaved on one Redis; events on"
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.script_ab",
        description="This checkout's Lua against another checkout's, on one throw-away Redis.",
    )
    parser.add_argument("baseline", type=Path, help="a checkout's root, with jqengine/ (git archive REV)")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count Redis's instructions in the script commands under callgrind (valgrind), not time",
    )
    args = parser.parse_args()
    if not Path(args.baseline, "jqengine").is_dir():
        parser.error(f"{args.baseline} has no jqengine/")
    result = instructions(args.baseline) if args.instructions else run(args.baseline)
    for figure in result.figures:
        print(f"{figure.name:<44} {figure.median:10.2f} {figure.unit}  ±{figure.spread:.1%}")
    for note in result.notes:
        print(f"- {note}")
    print(f"report: {result.save()}")


if __name__ == "__main__":
    main()
