"""complete_many: one round trip for many completions, each still checked on its own."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqengine import Code, Engine


async def test_completes_each_job_and_reports_stale_and_missing_ones(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    await engine.enqueue_batch([job(q) for _ in range(5)])
    claimed = await engine.jobs.claim(q, 5, lease_ms=30_000)
    owners = [(c.id, c.attempt, c.token) for c in claimed]
    forged = (owners[4][0], owners[4][1], "forged")
    codes = await engine.jobs.complete_many(
        q, [*((o, b'"ok"') for o in owners[:4]), (forged, None), (("nope", 1, "x"), None)]
    )
    assert codes[4:] == [Code.STALE, Code.MISSING]
    assert all(c not in (Code.STALE, Code.MISSING) for c in codes[:4])
    states = [(await engine.reads.get_job(q, o[0])) for o in owners]
    assert [s.state for s in states if s] == ["completed"] * 4 + ["running"]
    assert states[0] is not None
    assert states[0].result == '"ok"'


async def test_a_flushed_library_is_loaded_again_and_each_job_completed_once(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    await engine.enqueue_batch([job(q) for _ in range(3)])
    claimed = await engine.jobs.claim(q, 3, lease_ms=30_000)
    await engine._client.function_flush()  # as after a Redis restart without it: "Function not found"
    owners = [(c.id, c.attempt, c.token) for c in claimed]
    codes = await engine.jobs.complete_many(q, [(o, None) for o in owners])
    assert all(c not in (Code.STALE, Code.MISSING) for c in codes)
    states = [await engine.reads.get_job(q, o[0]) for o in owners]
    assert [s.state for s in states if s] == ["completed"] * 3
    depth = await engine.reads.depth(q)
    assert (depth.finished, depth.running) == (3, 0)
