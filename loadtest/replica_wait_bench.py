"""``python -m loadtest.replica_wait_bench [BATCHES] [JOBS]``: what the relay's replica check costs per batch.

A Redis master with one replica (``redis-server`` processes of its own, no persistence, on loopback);
batches of the relay's default size written with one engine call each, as the relay writes them, then
the check the relay makes before committing (:class:`jqengine.ReplicaWait`: ``SET`` + ``WAIT 1``
on the master written). Printed: the median write and check times per batch, and the check per job.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis
import redis.asyncio as aioredis

from jqcore.envelope import new_envelope
from jqengine import Engine, ReplicaWait, recording_writes
from jqstack.procs import free_port
from jqstack.supervise import Children

BATCH = 500
"""``JOBQ_RELAY_BATCH``'s default."""


def _synced(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=2) as client:
        return bool(client.info("replication").get("slave0", {}).get("state") == "online")


async def _measure(port: int, batches: int, size: int) -> tuple[list[float], list[float]]:
    client = aioredis.Redis(port=port)
    engine, writes, checks = Engine(client), [], []
    wait = ReplicaWait(client, None, 1000)
    try:
        for b in range(batches):
            envs = [new_envelope("bench", "noop", None, id=f"j{b}-{i}") for i in range(size)]
            with recording_writes() as written:
                started = time.perf_counter()
                await engine.enqueue_batch(envs, source="bench", origins={e.id: f"t/0/{b}" for e in envs})
                wrote = time.perf_counter()
                why = await wait.confirm(written)
                checked = time.perf_counter()
            if why is not None:
                raise RuntimeError(f"not confirmed: {why}")
            writes.append(wrote - started)
            checks.append(checked - wrote)
    finally:
        await client.aclose()
    return writes, checks


def main(batches: int = 200, size: int = BATCH) -> None:
    master_port, replica_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp, Children(grace_s=5.0) as children:
        for name, port, extra in (
            ("master", master_port, []),
            ("replica", replica_port, ["--replicaof", "127.0.0.1", str(master_port)]),
        ):
            (Path(tmp) / name).mkdir()
            argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", f"{tmp}/{name}"]
            children.start(
                name, [*argv, "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", *extra]
            )
        children.members[0].wait_ready(lambda: _synced(master_port), timeout_s=30, what="the replica")
        writes, checks = asyncio.run(_measure(master_port, batches, size))
    write, check = statistics.median(writes) * 1e6, statistics.median(checks) * 1e6
    print(f"{batches} batches of {size} jobs: write {write:.0f} µs/batch, replica check {check:.0f} µs/batch")
    p90 = statistics.quantiles(checks, n=10)[-1] * 1e6
    print(f"check per job {check / size:.2f} µs; p90 check {p90:.0f} µs")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
