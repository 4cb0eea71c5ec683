"""Claims and depth by any number of declared ``meta`` pairs (Timestone's filters): a claim reads the
smallest pair index and sweeps on from its filter's cursor, so a match deep in every index is served
within a bounded number of claims; depth by several pairs is exact (ZINTERCARD)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Sequence
from itertools import product

import pytest

from jqcore.envelope import Envelope
from jqengine import Engine, FilterInvalid, QueueConfig
from jqengine.keys import QueueKeys

Job = Callable[..., Envelope]

SWEEP_READS = 1024
"""Index entries a short filtered claim moves its sweep on by, at least (claim.lua)."""


async def _enqueue(engine: Engine, jobs: Sequence[Envelope], t0: int, chunk: int = 1000) -> None:
    for i in range(0, len(jobs), chunk):
        await engine.enqueue_batch(jobs[i : i + chunk], now_ms=t0)


async def _claims_until(engine: Engine, q: str, want: set[str], filter: dict[str, str], t0: int) -> int:
    """Claim with ``filter`` until every id of ``want`` is served: the claims it took."""
    got: list[str] = []
    for calls in range(1, 9):
        claimed = [c.id for c in await engine.jobs.claim(q, len(want), filter=filter, now_ms=t0)]
        assert set(claimed) <= want, "only jobs with every pair"
        assert claimed == sorted(claimed), "a claim's jobs in priority order"
        got += claimed
        if set(got) == want:
            return calls
    raise AssertionError(f"{len(want) - len(set(got))} of {len(want)} matches never served in 8 claims")


async def test_a_two_pair_claim_reaches_matches_behind_ten_thousand_entries(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """The matches sit behind 10,000 non-matching entries of the first pair's index and 4,000 of the
    second's: the old claim (first pair's head, 4n+32 entries, from the top every time) never saw them."""
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region", "tier"), events_cap=0))
    jobs = [job(q, id=f"eb{i}", priority=i, meta={"region": "eu", "tier": "b"}) for i in range(10_000)]
    jobs += [job(q, id=f"ua{i}", priority=i, meta={"region": "us", "tier": "a"}) for i in range(4_000)]
    jobs += [job(q, id=f"ea{i}", priority=20_000 + i, meta={"region": "eu", "tier": "a"}) for i in range(3)]
    await _enqueue(engine, jobs, t0)
    want = {"ea0", "ea1", "ea2"}
    filter = {"region": "eu", "tier": "a"}
    assert (await engine.reads.depth(q, filter)).by_filter == 3

    calls = await _claims_until(engine, q, want, filter, t0)
    # the smaller index (tier=a: 4,003 entries) is swept, at least SWEEP_READS entries a short claim
    assert calls <= math.ceil(4_003 / SWEEP_READS) + 1
    assert (await engine.reads.depth(q, filter)).by_filter == 0
    assert (await engine.reads.depth(q)).pending == 14_000, "the others stay pending, untouched"


async def test_the_sweep_keeps_priority_and_survives_its_cursor_entry_leaving(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region", "tier"), events_cap=0))
    jobs = [job(q, id=f"eb{i}", priority=i, meta={"region": "eu", "tier": "b"}) for i in range(2_000)]
    jobs += [job(q, id=f"ua{i}", priority=i, meta={"region": "us", "tier": "a"}) for i in range(2_000)]
    jobs += [job(q, id=f"ea{i}", priority=9_000 + i, meta={"region": "eu", "tier": "a"}) for i in range(2)]
    await _enqueue(engine, jobs, t0)
    filter = {"region": "eu", "tier": "a"}

    # a short claim reads the head window (164 entries) and a sweep step on from it (1,060 entries)
    assert await engine.jobs.claim(q, 1, filter=filter, now_ms=t0) == []
    cursor = QueueKeys(q).named("prefix") + "fcur:" + hashlib.sha1(b"region=eu\ntier=a").hexdigest()
    raw = await engine._client.get(cursor)
    assert raw is not None, "a short claim leaves its cursor"
    score, left = raw.decode().split(" ", 1)
    assert (float(score), left) == (1_223, "eb1223")

    # a better match arriving mid-sweep is served first: every claim reads the index's head first
    await engine.enqueue_batch(
        [job(q, id="urgent", priority=-1, meta={"region": "eu", "tier": "a"})], now_ms=t0
    )
    assert [c.id for c in await engine.jobs.claim(q, 1, filter=filter, now_ms=t0)] == ["urgent"]

    # the cursor's entry leaves the index (canceled): the sweep goes on from its place, (score, id), not
    # from the head window's end (from there one step would not reach the matches)
    assert (await engine.admin.cancel(q, left, now_ms=t0)).outcome == "canceled"
    got = [c.id for c in await engine.jobs.claim(q, 2, filter=filter, now_ms=t0)]
    assert got == ["ea0", "ea1"], "the next sweep step reaches both, in priority order"
    assert await engine._client.get(cursor) == b"1999 eb1999", "the last entry read that stayed"

    # at the index's end the sweep starts over after the head window: a match that arrived behind the
    # cursor is the next short claim's
    await engine.enqueue_batch([job(q, id="mid", priority=1_000, meta=filter)], now_ms=t0)
    assert [c.id for c in await engine.jobs.claim(q, 1, filter=filter, now_ms=t0)] == ["mid"]


@pytest.mark.parametrize("fair", [False, True])
async def test_a_three_pair_claim_takes_only_jobs_with_every_pair_in_priority_order(
    engine: Engine, q: str, job: Job, t0: int, fair: bool
) -> None:
    """On a fair queue too: a filtered claim keeps priority order (the ring deals unfiltered claims)."""
    config = QueueConfig(filter_keys=("region", "tier", "plan"), fair_key="region" if fair else None)
    await engine.admin.configure_queue(q, config)
    jobs = [
        job(q, id=f"{r}{t}{p}", priority=prio, meta={"region": r, "tier": t, "plan": p})
        for prio, (r, t, p) in enumerate(product("eu", "ab", "xy"))
    ]
    await engine.enqueue_batch(list(reversed(jobs)), now_ms=t0)
    got = await engine.jobs.claim(q, 5, filter={"region": "e", "tier": "a", "plan": "x"}, now_ms=t0)
    assert [c.id for c in got] == ["eax"]
    got = await engine.jobs.claim(q, 5, filter={"region": "u", "plan": "y"}, now_ms=t0)
    assert [c.id for c in got] == ["uay", "uby"]


async def test_depth_by_one_two_and_three_pairs_is_exact(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region", "tier", "plan")))
    metas = [
        {"region": r, "tier": t, "plan": p}
        for i, (r, t, p) in enumerate(product(("eu", "us", "ap"), ("a", "b"), ("x", "y", "z")))
        for _ in range(i % 3 + 1)
    ]
    jobs = [job(q, id=f"j{i}", meta=m) for i, m in enumerate(metas)]
    jobs.append(job(q, id="later", delay_ms=60_000, meta=metas[0]))  # delayed: not pending, not counted
    await engine.enqueue_batch(jobs, now_ms=t0)

    def expect(filter: dict[str, str], gone: Collection[str] = ()) -> int:
        return sum(
            1
            for i, m in enumerate(metas)
            if f"j{i}" not in gone and all(m[k] == v for k, v in filter.items())
        )

    filters: list[dict[str, str]] = [
        {"region": "eu"},
        {"region": "eu", "tier": "b"},
        {"tier": "a", "plan": "z"},
        {"region": "us", "tier": "a", "plan": "y"},
        {"region": "ap", "tier": "b", "plan": "x"},
        {"region": "mars", "tier": "a"},
    ]
    for f in filters:
        assert (await engine.reads.depth(q, f)).by_filter == expect(f), f
    claimed = {c.id for c in await engine.jobs.claim(q, 4, filter={"region": "eu", "tier": "b"}, now_ms=t0)}
    assert len(claimed) == 4
    for f in filters:
        assert (await engine.reads.depth(q, f)).by_filter == expect(f, claimed), f"{f} after a claim"
    assert (await engine.reads.depth(q)).by_filter is None


async def test_bad_filters_keep_their_codes(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region", "tier")))
    await engine.enqueue_batch([job(q, id="a", meta={"region": "eu", "tier": "a", "plan": "x"})], now_ms=t0)
    for bad in ({"plan": "x"}, {"region": "eu", "tier": "a", "plan": "x"}):
        with pytest.raises(FilterInvalid, match="plan") as info:
            await engine.reads.depth(q, bad)
        assert info.value.code == "filter_key_not_indexed"
        with pytest.raises(FilterInvalid, match="plan"):
            await engine.jobs.claim(q, 1, filter=bad, now_ms=t0)
    assert [c.id for c in await engine.jobs.claim(q, 1, filter={"tier": "a", "region": "eu"}, now_ms=t0)] == [
        "a"
    ]
