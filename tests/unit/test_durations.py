"""Durations as people write and read them (``jqcore.durations``): the one parser and formatter."""

from __future__ import annotations

import pytest

from jqcore.durations import format_age, format_ms, parse_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("30s", 30_000),
        ("24h", 86_400_000),
        ("7d", 604_800_000),
        ("1h30m", 5_400_000),
        ("1h 30m", 5_400_000),
        ("1.5h", 5_400_000),
        ("500ms", 500),
        ("1s500ms", 1500),
        ("2w", 1_209_600_000),
        (" 5M ", 300_000),
    ],
)
def test_durations_are_read(text: str, ms: int) -> None:
    assert parse_ms(text) == ms


@pytest.mark.parametrize("text", ["", "30", "x", "30x", "1h 3", "-5s", "1,5h", "s"])
def test_what_is_no_duration_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match="30s, 5m, 24h"):
        parse_ms(text)


def test_a_field_that_took_ms_still_takes_them() -> None:
    assert parse_ms("30000", plain_ms=True) == 30_000
    assert parse_ms("30s", plain_ms=True) == 30_000


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (30_000, "30s"),
        (86_400_000, "1d"),
        (604_800_000, "7d"),
        (5_400_000, "1h30m"),
        (1500, "1s500ms"),
        (250, "250ms"),
        (None, ""),
    ],
)
def test_durations_are_written_exactly_and_read_back(ms: int | None, text: str) -> None:
    assert format_ms(ms) == text
    if ms is not None:
        assert parse_ms(text) == ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [(5, "5ms"), (1500, "1.5s"), (4000, "4s"), (65_000, "1m5s"), (11_040_000, "3h4m"), (266_400_000, "3d2h")],
)
def test_ages_are_written_roughly(ms: float, text: str) -> None:
    assert format_age(ms) == text
