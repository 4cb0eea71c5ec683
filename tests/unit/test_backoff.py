"""The one retry-delay policy: the ceiling honours base, factor and cap; full jitter draws from [0, ceiling]
(factor included: it used to be ignored with jitter on); without jitter the delay is exactly the ceiling."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jqcore.backoff import Backoff

policies = st.builds(
    Backoff,
    base_s=st.floats(0, 100),
    factor=st.floats(1, 1e6),
    cap_s=st.floats(0, 86_400),
    jitter=st.booleans(),
)
attempts = st.integers(1, 10_000)


@given(policies, attempts)
def test_the_ceiling_starts_at_base_and_grows_by_factor_up_to_the_cap(policy: Backoff, attempt: int) -> None:
    assert policy.ceiling_s(1) == min(policy.cap_s, policy.base_s)
    grown = min(policy.cap_s, policy.ceiling_s(attempt) * policy.factor)
    assert policy.ceiling_s(attempt + 1) == pytest.approx(grown, rel=1e-9)


@given(policies, attempts, st.integers(0, 2**32))
def test_the_delay_never_exceeds_the_ceiling_or_the_cap(policy: Backoff, attempt: int, seed: int) -> None:
    delay = policy.delay_ms(attempt, random.Random(seed))
    assert 0 <= delay <= policy.ceiling_s(attempt) * 1000 <= policy.cap_s * 1000


@given(policies.filter(lambda p: not p.jitter), attempts)
def test_without_jitter_the_delay_is_exactly_the_ceiling(policy: Backoff, attempt: int) -> None:
    assert policy.delay_ms(attempt) == int(policy.ceiling_s(attempt) * 1000)


@pytest.mark.parametrize(("factor", "attempt"), [(3.0, 2), (5.0, 3), (10.0, 4), (1.5, 8)])
def test_full_jitter_honours_the_factor(factor: float, attempt: int) -> None:
    """The bug this replaced: with jitter on, the factor was ignored (always 2). The draws spread over the
    whole ``[0, base * factor ** (attempt - 1)]``, from near 0 to near that ceiling."""
    policy = Backoff(base_s=1.0, factor=factor, cap_s=1e9, jitter=True)
    ceiling_ms = factor ** (attempt - 1) * 1000
    rng = random.Random(attempt)
    delays = [policy.delay_ms(attempt, rng) for _ in range(400)]
    assert all(0 <= d <= ceiling_ms for d in delays)
    assert max(delays) > 0.9 * ceiling_ms  # this factor's ceiling, not factor 2's
    assert min(delays) < 0.1 * ceiling_ms  # full jitter: from 0, not from half the ceiling


@pytest.mark.parametrize(
    ("attempt", "expected_ms"),
    [(0, 500), (1, 500), (2, 1500), (3, 4500), (4, 13_500), (5, 40_500), (6, 60_000), (10**6, 60_000)],
)
def test_without_jitter_the_delay_is_the_capped_exponential(attempt: int, expected_ms: int) -> None:
    assert Backoff(base_s=0.5, factor=3.0, cap_s=60.0, jitter=False).delay_ms(attempt) == expected_ms


def test_the_cap_holds_with_jitter_for_huge_attempts() -> None:
    policy = Backoff(base_s=1.0, factor=10.0, cap_s=30.0)
    assert all(0 <= policy.delay_ms(10**6) <= 30_000 for _ in range(100))


@pytest.mark.parametrize(
    "kwargs", [{"factor": 0.5}, {"base_s": -1.0}, {"cap_s": -1.0}, {"cap_s": math.inf}, {"factor": math.nan}]
)
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="Backoff needs"):
        Backoff(**kwargs)
