"""Per-queue memory budgets (issue 35, isolation): a queue over its budget holds only the batches that
carry its jobs; another topic of the same relay process keeps flowing; raising the budget lets it go."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jqcore import metrics
from jqcore.envelope import encode, new_envelope, record_key
from jqengine import Engine, QueueConfig
from jqrelay.elector import Role
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record

Produce = Callable[..., Any]
Pending = Callable[[str], Any]

BUDGET = 24_000
"""Bytes: about 15 jobs of 1 KB args (a job hash is ~1.3 KB in Redis), so the third batch of 10 is held."""


async def test_a_queue_over_its_memory_budget_is_held_while_another_topic_flows(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
    producer: AsyncProducer,
    pending: Pending,
) -> None:
    noisy, quiet = make_topic("noisy", partitions=1), make_topic("quiet", partitions=1)
    big, small = f"{prefix}.big", f"{prefix}.small"
    await engine.admin.configure_queue(big, QueueConfig(memory_budget=BUDGET))
    envs = [new_envelope(big, "k", {"i": i, "pad": "x" * 1000}) for i in range(100)]
    await producer.produce_many([Record(noisy, encode(e), record_key(e)) for e in envs])
    relay = make_relay(noisy, topics=[noisy, quiet], batch=10)
    async with relay:
        assert relay.budgets is not None
        relay.budgets.sample_s = 0.05  # a fresh estimate before every batch: the test waits on signals
        await relay.budget_signals.over.wait_for(lambda v: v == (big, True), timeout_s=60)
        held = await pending(big)
        assert 10 <= held < 100, f"the batch that crossed the budget was written, the rest waits: {held}"
        assert metrics.RELAY_QUEUE_OVER.labels(big)._value.get() == 1
        assert metrics.RELAY_QUEUE_BUDGET.labels(big)._value.get() == BUDGET
        assert metrics.RELAY_HELD.labels(noisy, "queue_memory")._value.get() == 1

        # the other topic of the same process flows meanwhile, and its queue has no budget of its own
        # (the session's Redis has no maxmemory, so no default share applies)
        await produce_jobs(quiet, small, 30)
        quiet_relay = next(r for r in relay.relays if r.topic == quiet)
        await quiet_relay.elector.wait_role(Role.LEADER, timeout_s=60)
        await quiet_relay.signals.batch.wait_for(lambda c: c.get("written", 0) >= 30, timeout_s=60)
        assert await pending(small) == 30
        assert await pending(big) == held, "nothing more of the queue over its budget was written"

        # a budget raised at run time lets the held jobs in, every one once
        config = await engine.reads.queue_config(big)
        await engine.admin.configure_queue(big, dataclasses.replace(config, memory_budget=50 * BUDGET))
        await relay.budget_signals.over.wait_for(lambda v: v == (big, False), timeout_s=60)
        noisy_relay = next(r for r in relay.relays if r.topic == noisy)
        await noisy_relay.signals.batch.wait_for(lambda c: c.get("written", 0) >= 100, timeout_s=60)
        assert await pending(big) == 100
        assert metrics.RELAY_QUEUE_OVER.labels(big)._value.get() == 0
        assert metrics.RELAY_HELD.labels(noisy, "queue_memory")._value.get() == 0
