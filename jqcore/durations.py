"""Durations as people write and read them: ``30s``, ``5m``, ``24h``, ``7d``, ``1h30m``, ``500ms``, ``1.5h``.

The one parser and formatter of jobq's durations (the dashboard's forms and pages, ``jobq history
--since``, ``jobq replay --from -15m``). :func:`parse_ms` reads a sum of ``<number><unit>`` terms (units
``ms``, ``s``, ``m``, ``h``, ``d``, ``w``; spaces allowed between terms), and where a field always took
milliseconds, a plain integer too. :func:`format_ms` writes a value back exactly (so a form shows a value
that reads back unchanged); :func:`format_age` writes an approximate one (two units at most) for ages and
run times.

No library: the well-kept parsers (pytimeparse) read seconds, take ``4:13`` as minutes and seconds, and
have no ``ms`` unit nor a formatter; jobq wants one strict grammar that round-trips.
"""

from __future__ import annotations

import re

__all__ = ["UNITS_MS", "format_age", "format_ms", "parse_ms"]

UNITS_MS = {"w": 604_800_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
"""Each unit in milliseconds (largest first: the order :func:`format_ms` writes them in)."""
_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_EXAMPLES = "e.g. 30s, 5m, 24h, 7d, 1h30m"


def parse_ms(text: str, *, plain_ms: bool = False) -> int:
    """``text`` in milliseconds (rounded to whole ones); ``plain_ms``: a bare integer is milliseconds
    (a field that always took them). ValueError naming what is wrong."""
    given = text.strip()
    if not given:
        raise ValueError(f"a duration is a number and a unit ({_EXAMPLES}), not nothing")
    if given.isdigit():
        if plain_ms:
            return int(given)
        raise ValueError(f"{given!r} has no unit: write {given}s, {given}m, ... ({_EXAMPLES})")
    total, at = 0.0, 0
    while at < len(given):
        m = _TERM.match(given, at)
        if m is None:
            raise ValueError(f"{text.strip()[:40]!r} is no duration: write {_EXAMPLES}")
        total += float(m.group(1)) * UNITS_MS[m.group(2).lower()]
        at = m.end()
    return round(total)


def format_ms(ms: int | None) -> str:
    """``ms`` exactly, largest units first: 86400000 → ``1d``, 5400000 → ``1h30m``, 1500 → ``1s500ms``,
    0 → ``0s``; None → ``""``."""
    if ms is None:
        return ""
    if ms == 0:
        return "0s"
    sign, left, parts = "-" if ms < 0 else "", abs(int(ms)), []
    for unit, size in UNITS_MS.items():
        if unit == "w":  # read, never written: "7d", "14d" are what people write for retentions
            continue
        n, left = divmod(left, size)
        if n:
            parts.append(f"{n}{unit}")
    return sign + "".join(parts)


def format_age(ms: float | None) -> str:
    """``ms`` roughly, for a glance: ``250ms``, ``4.2s``, ``3m12s``, ``5h4m``, ``3d2h`` (None → ``""``)."""
    if ms is None:
        return ""
    sign, left = "-" if ms < 0 else "", abs(float(ms))
    if left < 1000:
        return f"{sign}{left:.0f}ms"
    if left < 10_000:
        return f"{sign}{left / 1000:.1f}s".replace(".0s", "s")
    whole = round(left / 1000) * 1000
    for big, small in (("d", "h"), ("h", "m"), ("m", "s")):
        if whole >= UNITS_MS[big]:
            n, rest = divmod(whole, UNITS_MS[big])
            k = rest // UNITS_MS[small]
            return f"{sign}{n}{big}" + (f"{k}{small}" if k else "")
    return f"{sign}{whole // 1000}s"
