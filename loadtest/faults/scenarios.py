"""Every fault scenario, by name. Each fault function injects its fault under load, holds it for the time it
states, heals it, and leaves notes for the report; :func:`loadtest.faults.run.run_scenario` does the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from jqcore.keys import RELAY_HELD_KEY
from jqcore.lane import lane_partition
from jqcore.settings.pipeline import RelayKeys
from jqcore.settings.servers import ConsulSettings
from jqcore.topics import held_topic
from jqengine.keys import QueueKeys
from jqruntime.consulconn import close_consul, consul_client
from jqstack.supervise import alive, python_m
from jqstack.testing.kafkatools import reassign_partitions
from loadtest.faults.bites import (
    errors_logged,
    killed,
    moved,
    no_space,
    refused,
    replaced,
    roundtrip_ms,
    severed,
    skew_seen_s,
    skewed,
    slowed,
)
from loadtest.faults.history import Control
from loadtest.faults.invariants import REDIS_WIPED
from loadtest.faults.pipeline import TOKEN, Roles
from loadtest.faults.run import Drill, Scenario

__all__ = ["SCENARIOS", "by_name"]

HOLD_S = 3.0
"""How long a killed process stays dead before it is started again (systemd's ``RestartSec``)."""
LANE_BACKLOG = 20
"""relay-kill-held: the held queue's records in the holding lane before its relay is killed."""


async def _kill_and_restart(d: Drill, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
    d.notes["killed"] = name
    old = d.pipe.children[name].pid
    d.pipe.kill(name, sig)
    gone = killed(old)
    await d.hold(HOLD_S)
    await d.pipe.restart(name)
    new = d.pipe.children[name].pid
    d.evidence(f"{name} killed and replaced", gone and replaced(old, new), old_pid=old, new_pid=new)


async def _lock_holder(d: Drill) -> tuple[str, str]:
    """(holder name, session id) of the relay lock of the scenario's topic, waiting until one holds it."""
    keys = RelayKeys.model_validate({"kv_prefix": f"jobq-faults/{d.pipe.tag}"})
    client = consul_client(ConsulSettings.model_validate({"addr": d.pipe.ep.consul_addr}))
    try:
        for _ in range(600):
            _, entry = await client.kv.get(keys.lock_key(d.pipe.topic))
            if entry and entry.get("Session"):
                return str(orjson.loads(entry["Value"])["holder"]), str(entry["Session"])
            await asyncio.sleep(0.1)
        raise TimeoutError("no relay holds the topic's lock")
    finally:
        await close_consul(client)


async def worker_kill(d: Drill) -> None:
    await _kill_and_restart(d, "worker-1")


async def worker_scale_in(d: Drill) -> None:
    """Scale-in under load: SIGTERM of each worker pool in turn while it runs jobs. A pool stops claiming,
    lets its running jobs finish (or releases them, no attempt spent) and exits 0; the other carries the
    load; each is started again a second later (scaled out again), so the run ends with both."""
    stopped: dict[str, float] = {}
    running: dict[str, int] = {}
    for name in [f"worker-{i + 1}" for i in range(d.pipe.roles.workers)]:
        async with d.engine() as engine:
            running[name] = (await engine.reads.depth(d.pipe.queue)).running
        started, old = time.monotonic(), d.pipe.children[name].pid
        await asyncio.to_thread(d.pipe.kill, name, signal.SIGTERM)
        stopped[name] = round(time.monotonic() - started, 2)
        code = d.pipe.children[name].returncode
        if code != 0:
            raise RuntimeError(f"{name} did not stop gracefully on SIGTERM (exit {code})")
        await d.hold(1.0)
        await d.pipe.restart(name)
        new = d.pipe.children[name].pid
        d.evidence(f"{name} stopped and started again", replaced(old, new), old_pid=old, new_pid=new)
    if not any(running.values()):
        raise RuntimeError("no job was running when the pools were stopped: the drill would prove nothing")
    d.notes["stop_s"], d.notes["running_at_sigterm"] = stopped, running


async def gateway_kill(d: Drill) -> None:
    await _kill_and_restart(d, "gate-1")


async def scheduler_kill(d: Drill) -> None:
    await _kill_and_restart(d, "sched-1")


async def relay_kill(d: Drill) -> None:
    holder, _ = await _lock_holder(d)
    await _kill_and_restart(d, holder)
    successor, _ = await _lock_holder(d)
    d.notes["lock_after"] = successor


Seen = Callable[[int, str, dict[str, Any] | None], bool]
"""What the drill waits for in the snapshot: (written at, ms; by which holder; the queue's entry or None)."""


async def _lane(d: Drill, seen: Seen, timeout_s: float = 120.0) -> float:
    """Wait until the relays' held-queues snapshot of the topic (``jobq:relay:held``, written each second by
    the lock holder: ``jqrelay.lane``) shows what ``seen`` waits for, of the exclusive queue; when."""
    deadline = time.monotonic() + timeout_s
    async with d.engine() as engine:
        while time.monotonic() < deadline:
            raw = await engine._client.hget(RELAY_HELD_KEY, d.pipe.topic)
            snap = orjson.loads(raw) if raw else {}
            held = snap.get("queues", {}).get(d.pipe.xqueue)
            if seen(int(snap.get("at", 0)), str(snap.get("holder", "")), held):
                return time.time()
            await asyncio.sleep(0.2)
    raise TimeoutError(f"the holding lane of {d.pipe.topic} never showed what the drill waits for")


async def _held_through(d: Drill, fault: Callable[[Drill], Awaitable[None]]) -> None:
    """The exclusive queue paused at the relay (its rate ``paused``): its new jobs step aside into the
    topic's holding lane while the load queue on the same topic flows. With a backlog in the lane, the
    ``fault``; then the neighbour flows, the pause is lifted and the lane drains in order. The checker's
    ``lane-held`` judges that no job acknowledged while it was held ran before the release."""
    key = RelayKeys.model_validate({"kv_prefix": f"jobq-faults/{d.pipe.tag}"}).queue_rate_key(d.pipe.xqueue)
    client = consul_client(ConsulSettings.model_validate({"addr": d.pipe.ep.consul_addr}))
    try:
        await client.kv.put(key, "paused")
        on = await _lane(d, lambda _, __, q: q is not None and q["reason"] == "paused")
        await _lane(d, lambda _, __, q: q is not None and q["records"] >= LANE_BACKLOG)
        await fault(d)
        d.notes["neighbour_flowing_s"] = round(await d.flowing(100), 2)
        off = time.time()
    finally:  # released, also when the drill failed (the running path may serve the next scenario)
        await client.kv.delete(key)
        await close_consul(client)
    d.load.controls.append(Control("lane", d.pipe.xqueue, on, off))
    drained = await _lane(d, lambda _, __, q: q is None)
    d.evidence("released, the lane drained", drained > off, drain_s=round(drained - off, 2))


async def _still_held(d: Drill, since: float) -> tuple[float, str]:
    """When a snapshot written after ``since`` still held the queue's backlog, and its holder (after a kill
    that is the successor, whichever relay took the lock: the lock read right after the restart may still
    name the dead session's)."""
    fresh, seen = int(since * 1000), {"holder": ""}

    def held(at: int, by: str, q: dict[str, Any] | None) -> bool:
        if at > fresh and q is not None and q["records"] >= LANE_BACKLOG:
            seen["holder"] = by
            return True
        return False

    return await _lane(d, held), seen["holder"]


async def relay_kill_held(d: Drill) -> None:
    """kill -9 of the lock holder while the exclusive queue waits in the holding lane (``_held_through``),
    restarted 3 s later: the next holder keeps the queue held, its backlog still in the lane."""

    async def fault(d: Drill) -> None:
        await relay_kill(d)
        killed_at = time.time()
        kept, holder = await _still_held(d, killed_at)  # the successor may be the one restarted
        d.evidence("the next holder kept the queue held", kept >= killed_at, holder=holder)

    await _held_through(d, fault)


async def redis_lost_held(d: Drill) -> None:
    """Redis lost with its data (``redis-lost``: the settings applied again, ``jobq rebuild``) while the
    exclusive queue waits in the holding lane (``_held_through``): the rebuild leaves the queue's records to
    the lane, the relay keeps it held, and nothing of it runs before the release."""

    async def fault(d: Drill) -> None:
        await redis_lost(d)
        left = d.notes["rebuild"].get("held", 0)
        d.evidence("the rebuild left the held queue's records to the lane", left >= LANE_BACKLOG, held=left)
        repaired = time.time()
        kept, holder = await _still_held(d, repaired)
        d.evidence("the relay kept the queue held", kept >= repaired, holder=holder)

    await _held_through(d, fault)


async def relay_session_destroyed(d: Drill) -> None:
    """Consul destroys the lock holder's session (an operator, or Consul losing it): the holder must stop
    writing (its fence is stale), a relay — possibly the same one, with a new session — takes over."""
    holder, session = await _lock_holder(d)
    client = consul_client(ConsulSettings.model_validate({"addr": d.pipe.ep.consul_addr}))
    try:
        await client.session.destroy(session)
    finally:
        await close_consul(client)
    d.notes["destroyed_session_of"] = holder
    started = time.monotonic()
    for _ in range(600):
        successor, new_session = await _lock_holder(d)
        if new_session != session:
            d.evidence("the holder's session replaced", True, old=session, new=new_session)
            d.notes["lock_after"] = successor
            d.notes["relock_s"] = round(time.monotonic() - started, 2)
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("no relay took the lock again")


POISON = {
    "fault.raise": "errored",
    "fault.overrun": "errored",
    "fault.exit": "errored",
    "fault.big": "completed",
}
"""Poison kind → the final state it must reach (dead after its attempts; ``fault.big`` completes, its 100 MB
result not kept)."""


async def poison_jobs(d: Drill) -> None:
    """Three of each poison kind enqueued into the loaded queue; each must reach its final state while the
    load's jobs keep running (``fault.exit`` kills the worker's process pool each attempt)."""
    ids = {f"{d.run}-poison-{kind}-{i}": kind for kind in POISON for i in range(3)}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{d.pipe.gate_urls[0]}/v1/queues/{d.pipe.queue}/jobs"
    async with aiohttp.ClientSession(headers=headers) as http:
        for job_id, kind in ids.items():
            async with http.post(url, json={"id": job_id, "kind": kind}) as r:
                if r.status != 202:
                    raise RuntimeError(f"poison enqueue refused: {r.status} {await r.text()}")
    started = time.monotonic()
    async with d.engine() as engine:
        while True:
            jobs = await engine.reads.get_jobs(d.pipe.queue, list(ids))
            states = {i: (j.state if j else "missing") for i, j in zip(ids, jobs, strict=True)}
            if all(states[i] == POISON[k] for i, k in ids.items()):
                break
            if time.monotonic() - started > 120:
                raise TimeoutError(f"poison jobs not in their final states: {states}")
            await asyncio.sleep(0.25)
    d.evidence("every poison job reached its final state", True, jobs=len(ids))
    d.notes["poison_final_s"] = round(time.monotonic() - started, 2)
    d.notes["poison"] = {k: v for k, v in POISON.items()}


FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
"""Debian's libfaketime (package ``faketime``; ``./run test`` installs it)."""
SKEWS = {"worker-2": "-300", "sched-1": "+300"}
"""A worker five minutes behind, the (only) scheduler five minutes ahead — so it keeps the queue's timers —
(wall clock only: ``DONT_FAKE_MONOTONIC``)."""
SKEWED_SCHEDULER = {"JOBQ_SCHEDULER_EVENTS": "false", "JOBQ_SCHEDULER_FAR": "false"}
"""The skewed scheduler keeps timers, cron and graphs but no Kafka client: librdkafka under libfaketime
stalls for minutes at start (a tool artifact: a host with a wrong clock is wrong for every library alike);
the other scheduler ships events and keeps the far-future tier meanwhile."""


async def clock_skew(d: Drill) -> None:
    """One worker pool and one scheduler restarted with skewed clocks for 10 s of load, then restarted right.
    Leases, due times and membership are judged by Redis's clock, so nothing may run early, twice or never."""
    if not await asyncio.to_thread(FAKETIME.exists):
        raise RuntimeError(f"{FAKETIME} is missing: install Debian's faketime (./run test does)")
    d.notes["skew_s"] = SKEWS
    faked = {"LD_PRELOAD": str(FAKETIME), "DONT_FAKE_MONOTONIC": "1", "NO_FAKE_STAT": "1"}
    for name, skew in SKEWS.items():
        d.pipe.overrides[name] = {
            **faked,
            "FAKETIME": skew,
            **(SKEWED_SCHEDULER if name.startswith("sched") else {}),
        }
        await d.pipe.restart(name)
    for name in SKEWS:  # up and logging (with its skewed clock) before the skew counts
        await d.pipe.logged(name, timeout_s=120)
        log = d.pipe.log(name)
        seen = skew_seen_s(await asyncio.to_thread(log.read_text), log.stat().st_mtime)
        d.evidence(f"{name}'s clock {SKEWS[name]} s off", skewed(seen, float(SKEWS[name])), seen_s=seen)
    await d.hold(10.0)
    for name in SKEWS:
        del d.pipe.overrides[name]
        await d.pipe.restart(name)


# ---- servers killed: a stack of the scenario's own --------------------------------------------------


def _restart_servers(d: Drill) -> float:
    """Start every stopped server of the stack again; seconds until all answered."""
    return d.server().restart("all", timeout_s=180)


async def _kill_server(d: Drill, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
    pid = d.server().server(name).pid
    await asyncio.to_thread(d.server().kill, name, sig)
    if name.startswith("redis"):
        d.redis_writes_lost()
    d.evidence(f"{name} ({sig.name}) gone", killed(pid), pid=pid)


async def redis_kill(d: Drill) -> None:
    """kill -9 of Redis (AOF ``appendfsync everysec``), started again on its data 3 s later."""
    await _kill_server(d, "redis")
    await d.hold(HOLD_S)
    d.notes["restart_s"] = round(await asyncio.to_thread(_restart_servers, d), 2)


SWITCHED_KIND = "fault.switched"
"""redis-lost: the kind a kill switch stops before the wipe (none of the load's jobs is of it)."""


async def _gate(d: Drill, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One admin request to the first gateway: its status and answer."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.request(method, d.pipe.gate_urls[0] + path, json=body) as r,
    ):
        return r.status, await r.json()


async def _switched(d: Drill, name: str) -> dict[str, bool]:
    """Whether switch ``name`` is in force in Redis, and in the loaded queue's list (what its claims read)."""
    async with d.engine() as engine:
        listed = await engine._client.hget(QueueKeys(d.pipe.queue).config, "switches")
        return {
            "in_force": name in [s.name for s in await engine.admin.switches()],
            "on_the_queue": name in [row["name"] for row in orjson.loads(listed or b"[]")],
        }


async def redis_lost(d: Drill) -> None:
    """Redis lost with its data (killed, data directory deleted, started empty 3 s later); the operator then
    applies the queue's settings again and runs ``jobq rebuild`` from before the run began: pending jobs
    come back from Kafka, finished ones (the events topic says which) do not run again. A kill switch set
    before the wipe (on a kind the load does not send) is in force after it, from Consul's copy."""
    switch = f"{d.run or 'run'}-stop-switched"
    status, answer = await _gate(
        d, "PUT", f"/v1/switches/{switch}", {"queue": d.pipe.queue, "kind": SWITCHED_KIND}
    )
    if status != 200:
        raise RuntimeError(f"the kill switch not set: {status} {answer}")
    d.evidence("the kill switch in force before the wipe", all((await _switched(d, switch)).values()))
    redis = d.server().server("redis")
    pid = redis.pid
    await asyncio.to_thread(d.server().wipe, "redis")
    wiped = time.time()
    d.redis_writes_lost()
    d.evidence("redis gone with its data", killed(pid) and not redis.data_dir.exists(), pid=pid)
    await d.hold(HOLD_S)
    d.notes["restart_s"] = round(await asyncio.to_thread(_restart_servers, d), 2)
    await d.pipe.configure_queue()
    d.notes.setdefault(REDIS_WIPED, []).append([wiped, time.time()])
    configured = await _mode(d)
    await _rebuild(d, since=d.started - 10)
    rebuilt = await _mode(d)
    ok = configured == rebuilt == "exclusive"
    d.evidence("the exclusive queue exclusive again", ok, configured=configured, rebuilt=rebuilt)
    after = await _switched(d, switch)
    d.evidence("the kill switch set before the wipe in force after it", all(after.values()), **after)
    status, _ = await _gate(d, "DELETE", f"/v1/switches/{switch}")
    d.evidence("the kill switch lifted after the rebuild", status == 200, status=status)


async def _mode(d: Drill) -> str:
    """The exclusive queue's mode as Redis holds it now."""
    async with d.engine() as engine:
        return (await engine.reads.queue_config(d.pipe.xqueue)).mode


async def _rebuild(d: Drill, since: float) -> None:
    """The operator's repair after Redis lost writes: ``jobq rebuild`` from ``since`` (epoch seconds)."""
    when = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    argv = [*python_m("jobq", "rebuild", "--from", when, "--topic", d.pipe.topic, "--json")]
    proc = await asyncio.create_subprocess_exec(
        *argv, env=d.pipe.spec.common(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"jobq rebuild failed ({proc.returncode}): {err.decode()[-2000:]}")
    report = orjson.loads(out)
    d.notes["rebuild"] = {k: v for k, v in report["topics"][0].items() if isinstance(v, int | dict)}
    d.notes["rebuild"]["configs"] = report.get("configs")


async def consul_kill(d: Drill) -> None:
    """kill -9 of the Consul agent (a dev agent: it comes back empty, every session and lock gone)."""
    await _kill_server(d, "consul")
    await d.hold(HOLD_S)
    d.notes["restart_s"] = round(await asyncio.to_thread(_restart_servers, d), 2)
    holder, _ = await _lock_holder(d)
    d.notes["lock_after"] = holder


# ---- disks full (the ``disk`` stack: each server's data on a small tmpfs) ------------------------------

DISK_HOLD_S = 8.0


def _fill(folder: Path) -> tuple[int, int | None]:
    """Write a ballast file into ``folder`` until its file system is full; the bytes written and the
    error number of the write that failed (``ENOSPC``: the disk is full)."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with (folder / "ballast").open("wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as exc:
                return written, exc.errno


async def _disk_full(d: Drill, server: str) -> None:
    folder = d.server().server(server).data_dir
    written, err = await asyncio.to_thread(_fill, folder)
    d.notes["ballast_mb"] = round(written / (1 << 20))
    d.evidence(f"{server}'s disk full: a write failed", no_space(err), errno=err)
    await d.hold(DISK_HOLD_S)
    d.notes["server_survived"] = alive(d.server().server(server).pid)
    await asyncio.to_thread((folder / "ballast").unlink)
    d.notes["restart_s"] = round(await asyncio.to_thread(_restart_servers, d), 2)  # if it gave up and exited


async def redis_disk_full(d: Drill) -> None:
    """Redis's disk full for 8 s: its AOF cannot be written, so it refuses writes; space freed, it goes on."""
    await _disk_full(d, "redis")


async def kafka_disk_full(d: Drill) -> None:
    """The broker's disk full for 8 s (Kafka takes a failed log directory offline; with one it stops);
    space freed, the broker is started again if it stopped."""
    await _disk_full(d, "kafka-1")


# ---- network: links through the fault proxy --------------------------------------------------------

NET_HOLD_S = 5.0
CUT_SEEN_S = 30.0
"""How long after a link came back what its processes logged still counts as their seeing the cut (a relay
whose Redis went away logs the failure when its client gives up, seconds after)."""


async def _cut(
    d: Drill, names: list[str], seconds: float | Callable[[], Awaitable[object]], who: str
) -> None:
    """Cut the links ``names`` for ``seconds`` (or until the awaitable it makes is done: the event the cut
    waits for); the evidence: each proxy refused connections meanwhile, and the processes ``who`` names (a
    role or one process) logged problems from the cut to ``CUT_SEEN_S`` after the heal (read once the path
    is quiet: a client may notice late)."""
    proxy = d.faults()
    d.notes["cut"] = names
    cut_at = time.time()
    for name in names:
        await asyncio.to_thread(proxy.cut, name)
    for name in names:
        d.evidence(f"{name} refused connections", await asyncio.to_thread(refused, d.proxy_ports[name]))
    await (d.hold(seconds) if isinstance(seconds, float | int) else seconds())
    for name in names:
        await asyncio.to_thread(proxy.restore, name)
    healed = time.time()
    if all(name.endswith("-redis") for name in names):
        # redis-py retries a broken connection on its own: a short cut may leave no line in any log, so the
        # proof is the proxy's — the connections in use that it broke
        for name in names:
            cut_off = severed(proxy.log.read_text(), name, cut_at, healed)
            d.evidence(f"{name} broke live connections", cut_off > 0, connections=cut_off)
        return
    until = time.time() + CUT_SEEN_S
    logs = d.pipe.folder / "logs"
    cut = [n for n in d.pipe.names(who.split("-")[0]) if n == who or "-" not in who]

    def look() -> None:  # every run's log of the cut processes (a restart's is ``<name>.<n>.log``)
        while True:  # the path may be quiet before a client gives up and says so (~12 s after a cut)
            files = [p for n in cut for pattern in (f"{n}.log", f"{n}.*.log") for p in logs.glob(pattern)]
            texts = [p.read_text() for p in files]
            seen = errors_logged(texts, cut_at, until)
            if seen or time.time() > until:
                break
            time.sleep(0.5)
        d.evidence(f"the cut {who} processes logged problems", seen > 0, lines=seen)

    d.afterwards.append(look)


async def relays_cut_from_redis(d: Drill) -> None:
    await _cut(d, d.links("relay", "redis"), NET_HOLD_S, "relay")


async def relays_cut_from_kafka(d: Drill) -> None:
    await _cut(d, d.links("relay", "kafka"), NET_HOLD_S, "relay")


async def gateways_cut_from_kafka(d: Drill) -> None:
    await _cut(d, d.links("gate", "kafka"), NET_HOLD_S, "gate")


SESSION_GONE_S = 60.0
"""How long a cut holder's session may take to expire (a TTL of 10 s: Consul drops it between 10 and 20 s
after its last renewal)."""


async def _session_gone(d: Drill, session: str) -> None:
    """Until Consul has dropped ``session`` (its TTL ran out: nobody renewed it); the evidence, with how
    long after the cut it went."""
    client = consul_client(ConsulSettings.model_validate({"addr": d.pipe.ep.consul_addr}))
    started = time.monotonic()
    try:
        while (await client.session.info(session))[1] is not None:
            if time.monotonic() - started > SESSION_GONE_S:
                raise TimeoutError(f"the cut holder's session outlived {SESSION_GONE_S:.0f} s")
            await asyncio.sleep(0.25)
    finally:
        await close_consul(client)
    took = round(time.monotonic() - started, 2)
    d.evidence("the cut holder's session expired", True, session=session, after_s=took)


async def holder_cut_from_consul(d: Drill) -> None:
    """The lock holder loses Consul (not Redis, not Kafka) until its session's TTL ran out and Consul
    dropped it: it must stop writing within its trust window; the other relay takes the lock (after the
    lock-delay), or the holder again once healed, with a new session."""
    holder, session = await _lock_holder(d)
    d.notes["holder"] = holder
    await _cut(d, d.links(holder, "consul"), lambda: _session_gone(d, session), holder)
    successor, new_session = await _lock_holder(d)
    d.notes["lock_after"] = successor
    d.notes["new_session"] = new_session != session


async def holder_isolated(d: Drill) -> None:
    """The lock holder's host partitioned from Consul and Redis at once (Kafka still reachable) until its
    session's TTL ran out and Consul dropped it: its batch writes fail and are held, it stops writing
    within its trust window (the held batch dropped, its offsets never committed); a new session takes the
    lock — the other relay's, or its own again once healed — and goes on from the committed offsets."""
    holder, session = await _lock_holder(d)
    d.notes["holder"] = holder
    cut = [*d.links(holder, "consul"), *d.links(holder, "redis")]
    await _cut(d, cut, lambda: _session_gone(d, session), holder)
    successor, new_session = await _lock_holder(d)
    d.notes["lock_after"] = successor
    d.evidence("a new session holds the lock", new_session != session, old=session, new=new_session)


async def relays_redis_slow(d: Drill) -> None:
    """Every relay-to-Redis round trip 100 ms slower each way for 10 s."""
    proxy = d.faults()
    (name,) = d.links("relay", "redis")
    await asyncio.to_thread(proxy.slow, name, 100)
    took = await asyncio.to_thread(roundtrip_ms, d.proxy_ports[name])
    d.evidence(f"{name} slowed", slowed(took), roundtrip_ms=round(took, 1))
    await d.hold(10.0)
    await asyncio.to_thread(proxy.restore, name)


# ---- Kafka on three brokers (RF 3, min.insync.replicas 2; brokers 1, 2 in az-a, 3 in az-b) -----------

KAFKA_HOLD_S = 5.0


def _leader(d: Drill, partition: int = 0, topic: str = "") -> str:
    """The stack's name of the broker leading ``partition`` of ``topic`` (default: the scenario's)."""
    from confluent_kafka.admin import AdminClient

    topic = topic or d.pipe.topic
    admin = AdminClient({"bootstrap.servers": d.pipe.ep.kafka_bootstrap, "log_level": 0})
    meta = admin.list_topics(topic, timeout=20)
    return f"kafka-{meta.topics[topic].partitions[partition].leader}"


def _lane_partition(d: Drill) -> tuple[str, int]:
    """The holding lane and its partition the exclusive queue's records go to (none waiting yet)."""
    from confluent_kafka.admin import AdminClient

    lane = held_topic(d.pipe.topic)
    admin = AdminClient({"bootstrap.servers": d.pipe.ep.kafka_bootstrap, "log_level": 0})
    return lane, lane_partition(
        d.pipe.xqueue, len(admin.list_topics(lane, timeout=20).topics[lane].partitions)
    )


def _in_sync(d: Drill) -> bool:
    """Every partition of the scenario's topic has all three replicas in sync again."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": d.pipe.ep.kafka_bootstrap, "log_level": 0})
    meta = admin.list_topics(d.pipe.topic, timeout=20)
    return all(len(p.isrs) == len(p.replicas) for p in meta.topics[d.pipe.topic].partitions.values())


async def _wait_in_sync(d: Drill, timeout_s: float = 180.0) -> float:
    started = time.monotonic()
    while not await asyncio.to_thread(_in_sync, d):
        if time.monotonic() - started > timeout_s:
            raise TimeoutError("the topic's replicas did not come back in sync")
        await asyncio.sleep(0.5)
    return round(time.monotonic() - started, 2)


async def _brokers_down(
    d: Drill, names: list[str], sig: signal.Signals, watched: tuple[str, int] = ("", 0)
) -> None:
    """``names`` down (``sig``) for the hold and started again; one broker: ``watched`` (topic — default
    the scenario's — and partition) is the partition it led, whose leader must move."""
    d.notes["brokers"] = names
    await asyncio.gather(*(_kill_server(d, n, sig) for n in names))
    back = asyncio.Event()
    # a leader gone: another broker leads its partition once the controller noticed (the broker session
    # timeout: often after the hold, while the broker starts again — watched until it is back)
    watch = asyncio.create_task(_leader_moved(d, names[0], back, watched)) if len(names) == 1 else None
    await d.hold(KAFKA_HOLD_S)
    d.notes["restart_s"] = round(await asyncio.to_thread(_restart_servers, d), 2)
    back.set()
    if watch is not None:
        await watch
    d.notes["in_sync_s"] = await _wait_in_sync(d)


async def _leader_moved(d: Drill, gone: str, back: asyncio.Event, watched: tuple[str, int]) -> None:
    """Watch the ``watched`` partition's leader move off ``gone`` until it moved or ``back`` is set; the
    evidence."""
    (topic, partition), now = watched, gone
    while not moved(gone, now) and not back.is_set():
        with contextlib.suppress(Exception):  # the metadata may be unreachable for a moment
            now = await asyncio.to_thread(_leader, d, partition, topic)
        await asyncio.sleep(0.25)
    d.evidence(f"partition {partition}'s leader moved", moved(gone, now), topic=topic, before=gone, after=now)


async def kafka_leader_kill(d: Drill) -> None:
    await _brokers_down(d, [await asyncio.to_thread(_leader, d)], signal.SIGKILL)


async def kafka_leader_kill_held(d: Drill) -> None:
    """kill -9 of the broker leading the holding lane's partition the exclusive queue waits in
    (``_held_through``), back 5 s later: the relay keeps the queue held, its backlog still in the lane."""

    async def fault(d: Drill) -> None:
        lane, partition = await asyncio.to_thread(_lane_partition, d)
        leader = await asyncio.to_thread(_leader, d, partition, lane)
        await _brokers_down(d, [leader], signal.SIGKILL, (lane, partition))
        back = time.time()
        kept, holder = await _still_held(d, back)
        d.evidence("the relay kept the queue held", kept >= back, holder=holder)

    await _held_through(d, fault)


async def kafka_leader_stop(d: Drill) -> None:
    await _brokers_down(d, [await asyncio.to_thread(_leader, d)], signal.SIGTERM)


async def kafka_zone_down(d: Drill) -> None:
    await _brokers_down(d, ["kafka-1", "kafka-2"], signal.SIGKILL)


async def kafka_all_down(d: Drill) -> None:
    await _brokers_down(d, ["kafka-1", "kafka-2", "kafka-3"], signal.SIGKILL)


async def kafka_rolling_restart(d: Drill) -> None:
    """Each broker in turn: a graceful stop, a start, and its replicas back in sync before the next."""
    for name in ("kafka-1", "kafka-2", "kafka-3"):
        await _kill_server(d, name, signal.SIGTERM)
        await asyncio.to_thread(_restart_servers, d)
        d.notes[f"{name}_in_sync_s"] = await _wait_in_sync(d)


def _assignment(d: Drill) -> dict[int, tuple[list[int], int]]:
    """Each partition of the scenario's topic: (its replicas in order, its leader)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": d.pipe.ep.kafka_bootstrap, "log_level": 0})
    parts = admin.list_topics(d.pipe.topic, timeout=20).topics[d.pipe.topic].partitions
    return {p: (list(m.replicas), m.leader) for p, m in parts.items()}


def _reassigned(d: Drill, plan: dict[int, list[int]]) -> dict[int, tuple[list[int], int]] | None:
    """One metadata answer's assignment (as :func:`_assignment`) when it shows every partition on exactly its
    planned replicas, all in sync, led by one of them; else None. The evidence is judged on this same
    answer: each KRaft broker answers from its own copy of the metadata log, and a second request may reach
    one that has not applied the last changes yet (it still names the old assignment or an old leader)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": d.pipe.ep.kafka_bootstrap, "log_level": 0})
    parts = admin.list_topics(d.pipe.topic, timeout=20).topics[d.pipe.topic].partitions
    done = all(
        list(parts[p].replicas) == r and set(parts[p].isrs) == set(r) and parts[p].leader in r
        for p, r in plan.items()
    )
    return {p: (list(m.replicas), m.leader) for p, m in parts.items()} if done else None


async def kafka_reassign(d: Drill) -> None:
    """Every partition of the job topic (RF 2 on three brokers) moved to another pair of brokers under
    load with Kafka's own ``ReassignPartitionsCommand``: the broker the partition lacked is added, its
    leader removed — the data copied to the newcomer, then the leadership moved while clients write."""
    before = await asyncio.to_thread(_assignment, d)
    brokers = {b for replicas, _ in before.values() for b in replicas} | {1, 2, 3}
    plan = {
        p: [next(b for b in sorted(brokers) if b not in replicas), *(b for b in replicas if b != leader)]
        for p, (replicas, leader) in before.items()
    }
    d.notes["reassignment"] = {str(p): [before[p][0], plan[p]] for p in plan}
    doc = {
        "version": 1,
        "partitions": [{"topic": d.pipe.topic, "partition": p, "replicas": r} for p, r in plan.items()],
    }
    plan_file = d.pipe.folder / "reassignment.json"
    plan_file.write_bytes(orjson.dumps(doc))
    started = time.monotonic()
    await asyncio.to_thread(reassign_partitions, d.pipe.ep.kafka_bootstrap, plan_file)
    while (after := await asyncio.to_thread(_reassigned, d, plan)) is None:
        if time.monotonic() - started > 120:
            raise TimeoutError("the reassignment did not complete in 120 s")
        await asyncio.sleep(0.25)
    d.notes["reassigned_s"] = round(time.monotonic() - started, 2)
    d.evidence(
        "every partition on its new replicas, its old leader gone from them, led by one of them",
        all(after[p][0] == r and before[p][1] not in r and after[p][1] in r for p, r in plan.items()),
        leaders={str(p): [before[p][1], after[p][1]] for p in plan},
    )


# ---- Redis Cluster: three masters with a replica each ------------------------------------------------


def _queue_master(d: Drill) -> str:
    """The stack's name of the master that holds the scenario queue's slot, as the first live node says."""
    import redis

    nodes = d.server().of_kind("redis-cluster")
    for node in nodes:
        if not alive(node.pid):
            continue
        client = redis.Redis(host="127.0.0.1", port=node.port, decode_responses=True, socket_timeout=5)
        try:
            slot = int(client.cluster("KEYSLOT", f"{{{d.pipe.queue}}}"))
            for start, end, master, *_ in client.cluster("SLOTS"):
                if int(start) <= slot <= int(end):
                    return next(n.name for n in nodes if n.port == int(master[1]))
        except redis.RedisError:
            continue  # a node on its way down or up: ask the next
        finally:
            client.close()
    raise RuntimeError("no live Redis Cluster node knows who serves the queue's slot")


def _wait_calls(d: Drill, name: str) -> int:
    """How many ``WAIT`` commands the Redis server ``name`` has answered (the relay's replica checks)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=d.server().server(name).port, socket_timeout=5)
    try:
        return int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
    finally:
        client.close()


async def redis_master_kill(d: Drill) -> None:
    """kill -9 of the master holding the queue; its replica takes over (node timeout 5 s); the old master
    comes back as a replica. No repair follows: replication is asynchronous, but the relay commits a
    batch's offsets only once a replica acknowledged its writes (``WAIT``), and writes a batch again when
    the master died first."""
    master = await asyncio.to_thread(_queue_master, d)
    d.notes["killed"] = master
    for _ in range(80):  # up to 20 s: the relay trusts a master's replica count for a few seconds
        if waits := await asyncio.to_thread(_wait_calls, d, master):
            break
        await asyncio.sleep(0.25)
    d.notes["waits_before_kill"] = waits
    if not waits:
        raise RuntimeError(f"the relay never waited for {master}'s replica: the drill would prove nothing")
    await _kill_server(d, master)
    started = time.monotonic()
    while (now := await asyncio.to_thread(_queue_master, d)) == master:
        if time.monotonic() - started > 60:
            raise TimeoutError("no replica took over the killed master's slots")
        await asyncio.sleep(0.25)
    d.notes["failover_s"] = round(time.monotonic() - started, 2)
    d.evidence("the queue's slot moved to another master", moved(master, now), before=master, after=now)
    d.notes["new_master"] = now
    d.notes["restart_s"] = round(await asyncio.to_thread(_restart_servers, d), 2)


UNCLEAN = {"unclean.leader.election.enable": "true"}


SCENARIOS: list[Scenario] = [
    # in runs of the same servers and settings: each run shares one running path (run.Pipelines)
    Scenario("kill-worker", "kill -9 of a worker pool, restarted 3 s later", worker_kill),
    Scenario(
        "worker-scale-in",
        "SIGTERM of each worker pool in turn under load, started again 1 s later",
        worker_scale_in,
        graceful=True,
    ),
    Scenario("kill-gateway", "kill -9 of a gateway, restarted 3 s later", gateway_kill),
    Scenario("kill-relay", "kill -9 of the relay holding the lock, restarted 3 s later", relay_kill),
    Scenario("kill-scheduler", "kill -9 of a scheduler, restarted 3 s later", scheduler_kill),
    Scenario(
        "kill-relay-held",
        "kill -9 of the lock holder while a queue waits in the holding lane (its neighbour flows), released",
        relay_kill_held,
    ),
    Scenario("poison", "poison jobs: raise, overrun, os._exit, 100 MB result", poison_jobs),
    Scenario("consul-session-lost", "the lock holder's Consul session destroyed", relay_session_destroyed),
    Scenario(
        "clock-skew",
        "a worker 5 min behind and the scheduler 5 min ahead (libfaketime)",
        clock_skew,
        roles=Roles(schedulers=1),
    ),
    Scenario(
        "redis-lost",
        "Redis lost with its data, started empty 3 s later, `jobq rebuild` from Kafka",
        redis_lost,
        "own",
    ),
    Scenario(
        "redis-lost-held",
        "Redis lost with its data and rebuilt while a queue waits in the holding lane, released",
        redis_lost_held,
        "own",
    ),
    Scenario("redis-kill", "kill -9 of Redis (AOF everysec), restarted 3 s later", redis_kill, "own"),
    Scenario(
        "consul-kill",
        "kill -9 of the Consul agent, restarted empty 3 s later",
        consul_kill,
        "own",
        consul_state_lost=True,
    ),
    Scenario(
        "net-relays-redis-cut",
        "both relays cut from Redis for 5 s",
        relays_cut_from_redis,
        "own",
        links=(("relay", "redis"),),
    ),
    Scenario(
        "net-relays-redis-slow",
        "relay-to-Redis link 100 ms slower each way for 10 s",
        relays_redis_slow,
        "own",
        links=(("relay", "redis"),),
    ),
    Scenario(
        "net-relays-kafka-cut",
        "both relays cut from Kafka for 5 s",
        relays_cut_from_kafka,
        "own",
        links=(("relay", "kafka"),),
    ),
    Scenario(
        "net-gateways-kafka-cut",
        "both gateways cut from Kafka for 5 s",
        gateways_cut_from_kafka,
        "own",
        links=(("gate", "kafka"),),
    ),
    Scenario(
        "net-holder-consul-cut",
        "the lock holder cut from Consul until its session expired",
        holder_cut_from_consul,
        "own",
        links=(("relay-1", "consul"), ("relay-2", "consul")),
    ),
    Scenario(
        "net-holder-isolated",
        "the lock holder cut from Consul and Redis at once until its session expired",
        holder_isolated,
        "own",
        links=tuple((relay, service) for relay in ("relay-1", "relay-2") for service in ("consul", "redis")),
    ),
    Scenario("redis-disk-full", "Redis's disk full for 8 s (its AOF cannot grow)", redis_disk_full, "disk"),
    Scenario("kafka-disk-full", "the broker's disk full for 8 s", kafka_disk_full, "disk"),
    Scenario(
        "redis-cluster-failover",
        "kill -9 of the queue's Redis Cluster master during graph fan-ins; its replica promoted",
        redis_master_kill,
        "cluster",
        graphs=True,
    ),
    Scenario(
        "kafka-leader-kill",
        "kill -9 of a partition leader, back 5 s later",
        kafka_leader_kill,
        "kafka3",
        replication=3,
    ),
    Scenario(
        "kafka-leader-kill-held",
        "kill -9 of the broker leading a held queue's lane partition, back 5 s later, released",
        kafka_leader_kill_held,
        "kafka3",
        replication=3,
    ),
    Scenario(
        "kafka-leader-stop",
        "graceful stop of a partition leader, back 5 s later",
        kafka_leader_stop,
        "kafka3",
        replication=3,
    ),
    Scenario(
        "kafka-zone-down",
        "kill -9 of both brokers of zone az-a, back 5 s later",
        kafka_zone_down,
        "kafka3",
        replication=3,
    ),
    Scenario(
        "kafka-all-down",
        "kill -9 of all three brokers, back 5 s later (unclean election off)",
        kafka_all_down,
        "kafka3",
        replication=3,
    ),
    Scenario(
        "kafka-rolling-restart",
        "each broker stopped gracefully and started in turn",
        kafka_rolling_restart,
        "kafka3",
        replication=3,
    ),
    Scenario(
        "kafka-reassign",
        "every partition's replicas moved to another broker pair under load (its leader removed)",
        kafka_reassign,
        "kafka3",
        replication=2,
    ),
    Scenario(
        "kafka-leader-kill-acks-leader",
        "kill -9 of a partition leader, acks=leader (Slack's trade)",
        kafka_leader_kill,
        "kafka3",
        acks="leader",
        loss_allowed=True,
        replication=3,
    ),
    Scenario(
        "kafka-all-down-unclean",
        "kill -9 of all three brokers, back 5 s later (unclean election on)",
        kafka_all_down,
        "kafka3",
        replication=3,
        topic_config=UNCLEAN,
    ),
]


def by_name(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"no fault scenario {name!r}; known: {', '.join(s.name for s in SCENARIOS)}")
