"""Retry delays of a handler's failures all come from the kind's one ``Backoff`` policy (no servers)."""

from __future__ import annotations

from concurrent.futures import Executor

import pytest

from jobq import Backoff, Registry
from jqcore.envelope import new_envelope
from jqcore.errors import Retry
from jqengine import ClaimedJob
from worker.execute import run_handler

EXACT = Backoff(base_s=0.5, factor=3.0, cap_s=60.0, jitter=False)
"""Without jitter the third attempt's delay is exactly 0.5 s * 3**2 = 4.5 s."""


def _no_executor(mode: str) -> Executor:
    raise AssertionError(f"async handlers need no {mode} executor")


async def _outcome_of(error: BaseException, attempt: int = 3) -> tuple[str, int | None]:
    registry = Registry()

    @registry.job("k", backoff=EXACT)
    async def handler() -> None:
        raise error

    job = ClaimedJob(new_envelope("q", "k", None, at_ms=1), attempt, "tok", 0)
    outcome = await run_handler(registry, job, _no_executor)
    return outcome.label, outcome.delay_ms


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (Retry(), ("retried", 4500)),
        (Retry(1.25), ("retried", 1250)),
        (Retry(0), ("retried", 0)),  # at once: an explicit 0 is not "no delay given"
        (RuntimeError("boom"), ("failed", 4500)),
    ],
)
async def test_failures_without_a_delay_take_the_kinds_backoff(
    error: BaseException, expected: tuple[str, int]
) -> None:
    assert await _outcome_of(error) == expected
