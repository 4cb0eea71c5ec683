"""Seeded multi-fault runs: one long scenario whose faults are drawn from the catalogue by a seed.

:func:`plan` turns ``(seed, minutes)`` into the same list of steps every time — which fault, after how many
seconds of quiet load — so a failing seed reproduces its sequence of faults (the system's own timing within
it is not replayed). :func:`chaos_scenario` makes a :class:`~loadtest.faults.run.Scenario` that runs the
plan under load: each step waits its gap, injects and heals its fault (each fault records its own evidence,
so the ``fault-took-effect`` verdict covers every step), then waits until jobs flow again before the next.
The verdict is the checker v2's over the whole run: every invariant, every fault.

The catalogue is the faults that run on one single-node stack whose relays reach Redis and Kafka through the
fault proxy (kills and restarts of every process and of Redis, a destroyed lock session, cut and slowed
links). Faults that need three brokers, a Redis Cluster, tmpfs disks, a rebuild or a wiped Consul stay
single scenarios.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from loadtest.faults.run import Drill, Fault, Scenario
from loadtest.faults.scenarios import (
    gateway_kill,
    redis_kill,
    relay_kill,
    relay_session_destroyed,
    relays_cut_from_kafka,
    relays_cut_from_redis,
    relays_redis_slow,
    scheduler_kill,
    worker_kill,
)

__all__ = ["CATALOGUE", "Step", "chaos_scenario", "daily_seed", "plan"]

CATALOGUE: dict[str, Fault] = {
    "kill-worker": worker_kill,
    "kill-gateway": gateway_kill,
    "kill-relay": relay_kill,
    "kill-scheduler": scheduler_kill,
    "consul-session-lost": relay_session_destroyed,
    "redis-kill": redis_kill,
    "net-relays-redis-cut": relays_cut_from_redis,
    "net-relays-kafka-cut": relays_cut_from_kafka,
    "net-relays-redis-slow": relays_redis_slow,
}
"""The faults a seeded run draws from (each injects, holds and heals, and records its evidence)."""

GAP_S = (3.0, 15.0)
"""Quiet load before each fault: drawn uniformly from this range."""
FAULT_S = 12.0
"""What :func:`plan` budgets per fault (its hold, the restart, the flow coming back) to fill ``minutes``."""
FLOWING = 50
"""Jobs sent after a heal that must have gone through before the next fault (the path works again)."""


@dataclass(frozen=True)
class Step:
    fault: str
    gap_s: float
    """Seconds of quiet load before the fault."""


def plan(seed: int, minutes: float, catalogue: Sequence[str] = tuple(CATALOGUE)) -> list[Step]:
    """The steps of a run of about ``minutes``: the same for the same seed, minutes and catalogue. At least
    one step; two in a row are never the same fault."""
    rng = random.Random(seed)
    steps: list[Step] = []
    budget = minutes * 60.0
    while not steps or budget > 0:
        choices = [f for f in catalogue if not steps or f != steps[-1].fault]
        step = Step(rng.choice(choices), round(rng.uniform(*GAP_S), 1))
        steps.append(step)
        budget -= step.gap_s + FAULT_S
    return steps


def daily_seed(today: datetime | None = None) -> int:
    """A seed that changes every day (UTC): ``YYYYMMDD``, printed by the runs that use it."""
    return int((today or datetime.now(UTC)).strftime("%Y%m%d"))


def chaos_scenario(seed: int, minutes: float) -> Scenario:
    """The seeded run as a scenario on a single-node stack with the relays' links through the fault proxy."""
    steps = plan(seed, minutes)

    async def run(d: Drill) -> None:
        done: list[dict[str, object]] = []
        d.notes["chaos"] = {"seed": seed, "minutes": minutes, "steps": done}
        for step in steps:
            await d.hold(step.gap_s)
            began = time.monotonic()
            await CATALOGUE[step.fault](d)
            healed = time.monotonic()
            await d.flowing(FLOWING, timeout_s=180)
            done.append(
                {
                    "fault": step.fault,
                    "gap_s": step.gap_s,
                    "fault_s": round(healed - began, 1),
                    "flowing_again_s": round(time.monotonic() - healed, 1),
                }
            )

    names = ", ".join(s.fault for s in steps)
    return Scenario(
        f"chaos-{seed}",
        f"seed {seed}, {len(steps)} faults over ~{minutes:g} min: {names}",
        run,
        "own",
        links=(("relay", "redis"), ("relay", "kafka")),
    )
