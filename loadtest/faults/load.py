"""The fault suite's client: an open-loop load of single-job enqueues, every request logged.

Job *i* (id ``<run>-<i>``) is due at ``t0 + i / rate`` and sent then, whatever earlier requests are doing.
It goes to the gateways in turn; like a careful client it tries again on another gateway, with the same job
id, when the answer is not a 2xx or did not come (at most ``tries`` times, ``retry_after_s`` apart) — so
a gateway that dies costs availability, not acknowledged jobs. Every tenth job is delayed by 1.5 s, so the
scheduler's timers are on the path too; every fiftieth (a delayed one) is canceled as soon as it was acked
(tried like an enqueue), so "a canceled job never starts" is judged too; every fifth goes to the exclusive
queue beside the load's, on one of ``EXCL_KEYS`` keys in turn (one at a time per key, in order); the rest
carry an earliest-deadline-first priority ``PRIORITY_SPREAD_MS`` before, at or after their send time (so a
backlog a fault builds is claimed out of arrival order, and "no ready job of an earlier deadline passed
over" is judged); every ``REFUSED_EVERY``-th is invalid (a 400: its job must never run); every
``RATED_EVERY``-th is tenant ``rated``'s, whose starts the load queue limits to
:attr:`Load.fair_rates` (a fair queue on ``meta.tenant``). With
``graphs``, every twenty-fifth is a task graph instead (``POST /v1/graphs``, id ``<run>-<i>``): ``FANOUT``
nodes and a ``join`` node whose parents they all are (a fan-in; the last parent works ``SLOW_PARENT_S``, so
at any moment several fan-ins are half done); each node's job is logged as a request of its own (id
``<graph>:<node>``, the graph's answer), so a node that never runs is a lost job. Every ``FAIL_EVERY``-th
graph's first parent gives up for good (``fault.abandon``: it cancels itself): its ``join`` must be skipped,
never run — logged in ``skipped``, not as a request. Every ``CONTROL_EVERY_S`` the load puts a kill switch
(on the load queue's ``meta.sw`` jobs, every ``SWITCHED_EVERY``-th) and a pause of the exclusive queue in
force for ``CONTROL_HOLD_S`` (``controls``: what was in force when, for "no claim hands out a covered job").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from jqcore.graphs.spec import node_job_id
from loadtest.faults.history import Cancel, Control, Request

__all__ = ["GRAPH_SHAPE", "SLOW_PARENT", "SLOW_PARENT_S", "Load"]

Call = tuple[str, str, object]
"""A request of the load: method, path under ``/v1/``, JSON body."""

DELAY_EVERY = 10
DELAY_MS = 1500
CANCEL_EVERY = 50
EXCL_EVERY = 5
EXCL_KEYS = 8
REFUSED_EVERY = 100
PRIORITY_SPREAD_MS = 500
GRAPH_EVERY = 25
FANOUT = 4
JOIN = "join"
GRAPH_SHAPE: dict[str, tuple[str, ...]] = {
    **{f"p{n}": () for n in range(1, FANOUT + 1)},
    JOIN: tuple(f"p{n}" for n in range(1, FANOUT + 1)),
}
"""The load's graphs: node → its parents (what the checker judges them by)."""
RATED_EVERY = 20
RATED_TENANT = "rated"
RATED_HEADROOM = 4.0
"""The rated tenant's start rate is this many times what the load offers it: a fault's backlog drains at
the rate (the limit binds), steady flow never waits for it."""
SWITCHED_EVERY = 20
CONTROL_EVERY_S = 2.0
"""How often the load puts its controls in force: the kill switch and the exclusive queue's pause."""
CONTROL_HOLD_S = 1.0
FAIL_EVERY = 4
"""Every fourth graph has a failing parent (the rest keep fan-ins open for the faults to meet)."""
SLOW_PARENT = f"p{FANOUT}"
SLOW_PARENT_S = 1.0
"""The last parent's work: about 4 fan-ins are half done at any moment at 100 requests/s (every scenario's
quiet end waits for the last graph's, so longer costs the suite time)."""


@dataclass
class Load:
    urls: list[str]
    queue: str
    token: str
    xqueue: str
    run: str
    rate: float = 100.0
    graphs: bool = False
    tries: int = 3
    retry_after_s: float = 0.5
    timeout_s: float = 15.0
    requests: list[Request] = field(default_factory=list)
    cancels: list[Cancel] = field(default_factory=list)
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    """(graph, generation, node) of every node a failing parent must skip (its job must never run)."""
    controls: list[Control] = field(default_factory=list)
    lift_within_s: float = 300.0
    """How long a control's lift is tried (a fault may make the gateways refuse it for a while)."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._generate())

    async def stop(self) -> list[Request]:
        """Send nothing more; wait for the answers of what was sent."""
        self._stop.set()
        if self._task is not None:
            await self._task
        return self.requests

    @property
    def fair_rates(self) -> dict[str, float]:
        """The load queue's per-tenant start rates (jobs/s) the load is sent under."""
        return self.rates(self.rate)

    @staticmethod
    def rates(rate: float) -> dict[str, float]:
        """The per-tenant start rates a load of ``rate`` requests/s is sent under (the queue is set up with
        them before the load starts)."""
        return {RATED_TENANT: rate / RATED_EVERY * RATED_HEADROOM}

    def acked_since(self, t: float) -> int:
        return sum(1 for r in self.requests if r.acked and r.sent >= t)

    async def _generate(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        connector = aiohttp.TCPConnector(limit=256)
        pending: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(headers=headers, timeout=timeout, connector=connector) as http:
            loop = asyncio.get_running_loop()
            controls = loop.create_task(self._controls(http))
            t0 = loop.time()
            i = 0
            while not self._stop.is_set():
                due = t0 + i / self.rate
                if (wait := due - loop.time()) > 0:
                    try:
                        await asyncio.wait_for(self._stop.wait(), wait)
                        break
                    except TimeoutError:
                        pass
                task = loop.create_task(self._one(http, i))
                pending.add(task)
                task.add_done_callback(pending.discard)
                i += 1
            if pending:
                await asyncio.gather(*pending)
            await controls

    async def _send(
        self, http: aiohttp.ClientSession, i: int, method: str, path: str, body: object = None
    ) -> tuple[int, int, bytes]:
        """(status, tries, answer) of a request to ``path`` (under ``/v1/``) tried on the gateways in turn
        (status 0: no answer)."""
        status, answer, tries = 0, b"", 0
        for attempt in range(self.tries):
            tries += 1
            url = self.urls[(i + attempt) % len(self.urls)]
            try:
                async with http.request(method, f"{url}/v1/{path}", json=body) as resp:
                    status = resp.status
                    answer = await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            if 200 <= status < 300:
                break
            if 400 <= status < 500 and status != 429:
                break  # the request itself is wrong: no other gateway will take it
            await asyncio.sleep(self.retry_after_s)
        return status, tries, answer

    async def _controls(self, http: aiohttp.ClientSession) -> None:
        """Every ``CONTROL_EVERY_S`` until the load stops, both controls held for ``CONTROL_HOLD_S``: the
        kill switch (park the load queue's ``meta.sw`` jobs) and the exclusive queue's pause."""
        switch = f"{self.run}-sw"
        controls: list[tuple[str, str, Call, Call]] = [
            (
                "switch",
                self.queue,
                ("PUT", f"switches/{switch}", {"queue": self.queue, "meta": {"sw": "1"}}),
                ("DELETE", f"switches/{switch}", None),
            ),
            (
                "pause",
                self.xqueue,
                ("PATCH", f"queues/{self.xqueue}", {"paused": True}),
                ("PATCH", f"queues/{self.xqueue}", {"paused": False}),
            ),
        ]
        n = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), CONTROL_EVERY_S - CONTROL_HOLD_S)
                return
            await asyncio.gather(*(self._hold(http, n, *c) for c in controls))
            n += 1

    async def _hold(
        self, http: aiohttp.ClientSession, n: int, what: str, queue: str, on: Call, off: Call
    ) -> None:
        status, _, _ = await self._send(http, n, *on)
        since = time.time()
        await asyncio.sleep(CONTROL_HOLD_S)
        until = await self._lift(http, n, *off)
        if 200 <= status < 300:
            self.controls.append(Control(what, queue, since, until))

    async def _lift(self, http: aiohttp.ClientSession, n: int, method: str, path: str, body: object) -> float:
        """Lift a control (tried until a gateway answers it, even if putting it in force seemed to fail: it
        may be in force); the send time of the first try (it may be what lifted it)."""
        first = time.time()
        deadline = time.monotonic() + self.lift_within_s
        while True:
            status, _, _ = await self._send(http, n, method, path, body)
            if 200 <= status < 300 or status == 404 or time.monotonic() > deadline:
                return first
            n += 1

    async def _one(self, http: aiohttp.ClientSession, i: int) -> None:
        job_id = f"{self.run}-{i}"
        if self.graphs and i % GRAPH_EVERY == 4:
            await self._graph(http, i, job_id)
            return
        body: dict[str, object] = {"id": job_id, "kind": "fault.record"}
        queue, excl, tenant, switched = self.queue, "", "", False
        if i % DELAY_EVERY == 0:
            body["delay_ms"] = DELAY_MS
        elif i % EXCL_EVERY == 2:  # the Kafka record's key is the envelope's excl: one key, one partition
            queue, excl = self.xqueue, f"k{(i // EXCL_EVERY) % EXCL_KEYS}"
            body["excl"], body["meta"] = excl, {"excl": excl}
        elif i % REFUSED_EVERY == 53:  # a request no gateway may take (400): its job must never run
            body["delay_ms"] = -1
        else:  # a deadline (EDF): half a second sooner than its accept time, at it, or half a second later
            body["priority"] = int(time.time() * 1000) + (i % 3 - 1) * PRIORITY_SPREAD_MS
            if i % RATED_EVERY == 9:
                tenant = RATED_TENANT
                body["meta"] = {"tenant": tenant}
            elif i % SWITCHED_EVERY == 19:
                switched, body["meta"] = True, {"sw": "1"}
        sent = time.time()
        status, tries, _ = await self._send(http, i, "POST", f"queues/{queue}/jobs", body)
        delay_s = DELAY_MS / 1000 if "delay_ms" in body else 0.0
        acked = 200 <= status < 300
        priority = body.get("priority")
        self.requests.append(
            Request(
                job_id,
                sent,
                time.time(),
                acked,
                status,
                delay_s,
                tries,
                priority=priority if isinstance(priority, int) else None,
                tenant=tenant,
                switched=switched,
                excl=excl,
                queue=queue,
            )
        )
        if acked and i % CANCEL_EVERY == 0:
            sent = time.time()
            status, _, answer = await self._send(http, i, "DELETE", f"queues/{queue}/jobs/{job_id}")
            outcome = str(orjson.loads(answer).get("outcome", "")) if 200 <= status < 300 else ""
            self.cancels.append(Cancel(job_id, sent, time.time(), outcome))

    async def _graph(self, http: aiohttp.ClientSession, i: int, graph: str) -> None:
        slow, failing = SLOW_PARENT, "p1" if (i // GRAPH_EVERY) % FAIL_EVERY == 1 else ""
        nodes = [
            {
                "name": name,
                "kind": "fault.record",
                **({"parents": list(mine)} if mine else {}),
                **({"args": {"work_s": SLOW_PARENT_S}} if name == slow else {}),
                **({"kind": "fault.abandon"} if name == failing else {}),
            }
            for name, mine in GRAPH_SHAPE.items()
        ]
        sent = time.time()
        body = {"id": graph, "queue": self.queue, "nodes": nodes}
        status, tries, _ = await self._send(http, i, "POST", "graphs", body)
        answered, acked = time.time(), 200 <= status < 300
        for node in GRAPH_SHAPE:
            if failing and node == JOIN:  # created or not, it must never run
                self.skipped.append((graph, 0, node))
                continue
            self.requests.append(
                Request(node_job_id(graph, node), sent, answered, acked, status, 0.0, tries, queue=self.queue)
            )
