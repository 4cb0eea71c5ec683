"""``jobq status`` laid out for the width it prints at: every header and value whole (no ``…``) at 80
columns (a default terminal, or piped) and at 120, each queue's numbers shown. The rendering is a function
of the status document alone: no server is needed."""

from __future__ import annotations

import io
import re
import time
from typing import Any

import pytest
from rich.console import Console

from jobq.status_render import QUEUE_COLS, Col, fit, render

NOW_MS = int(time.time() * 1000)


def queue(name: str, base: int) -> dict[str, Any]:
    """A queue whose every count is distinct (``base`` + its column's index)."""
    return {
        "queue": name,
        "pending": base + 1,
        "delayed": base + 2,
        "far": base + 3,
        "running": base + 4,
        "blocked": base + 5,
        "errored": base + 6,
        "finished": base + 7,
        "handed_back": base + 8,
        "duplicates": base + 9,
        "oldest_pending_age_ms": (base + 10) * 1000,
        "past_due": base + 11,
        "events_backlog": base + 12,
        "events_cap": 100_000,
        "events_dropped": base + 13,
    }


QUEUES = [queue("emails", 1000), queue("billing.invoices", 52000), queue("q", 300), queue("[red]x", 9)]
DOC: dict[str, Any] = {
    "kafka": [
        {
            "topic": "jobq.jobs",
            "partition": p,
            "end": 81_234 + p,
            "committed": 81_200 + p,
            "lag": 34,
            "lag_s": 1.5,
        }
        for p in range(3)
    ]
    + [{"topic": "jobq.jobs.retry", "partition": None, "problem": "topic missing"}],
    "locks": [{"topic": "jobq.jobs", "holder": "relay-7f3c@host-a:4242", "since_s": 3600.2, "fence": 91}],
    "redis": {
        "queues": QUEUES,
        "canary": {
            "jobq.jobs/0": {
                "ok": True,
                "ms": {"total": 41, "gate": 9, "relay": 17, "worker": 15},
                "at": NOW_MS,
            },
            "jobq.jobs/1": {"ok": False, "problem": "no heartbeat through the relay for 151 s", "at": NOW_MS},
        },
        "gateways": ["g1"],
        "workers": ["w1", "w2"],
        "dashboards": [],
        "schedulers": {"default": {"host-a:77": "every queue"}},
        "claimers": [  # rows of jqweb.overview.claimer_rows: flagged ones are listed, the others not
            {
                "role": "worker",
                "name": "host-b:4242:emails",
                "alive": True,
                "beat_age_s": 2.1,
                "busy": 1,
                "slots": 8,
                "filtered": False,
                "idle_s": {"emails": 731.4},
                "silent": ["emails"],
            },
            {
                "role": "http-worker",
                "name": "billing-go:pod-7f9c",
                "alive": False,
                "beat_age_s": 95.0,
                "busy": None,
                "slots": None,
                "filtered": False,
                "idle_s": {"q": 97.0},
                "silent": [],
            },
            {
                "role": "worker",
                "name": "host-c:99:emails",
                "alive": True,
                "beat_age_s": 1.0,
                "busy": 0,
                "slots": 8,
                "filtered": False,
                "idle_s": {"emails": 0.4},
                "silent": [],
            },
        ],
        "held": [  # rows of jqweb.overview.held_rows
            {
                "topic": "jobq.jobs",
                "queue": "reports.nightly",
                "reason": "paused",
                "records": 50_000,
                "oldest_s": 812.4,
                "drained_per_s": 0.0,
            }
        ],
        "switches": [
            {
                "name": "stop-bad-kind",
                "action": "park",
                "queue": "emails",
                "kind": "send",
                "meta": {},
                "by": "ops",
            }
        ],
    },
    "cron": [
        {
            "name": "nightly-report",
            "schedule": "0 3 * * * (UTC)",
            "queue": "emails",
            "paused": False,
            "last_slot_ms": NOW_MS - 3_600_000,
            "next_slot_ms": NOW_MS + 3_600_000,
            "fires": 17,
            "dropped": 2,
        }
    ],
    "history": {"path": "/data/history", "present": True, "jobs": 123_456, "latest_event_at": NOW_MS},
}


def printed(doc: dict[str, Any], width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(render(doc, width))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


@pytest.mark.parametrize("width", [80, 120, 200])
def test_status_is_whole_at_any_width(width: int) -> None:
    out = printed(DOC, width)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= width
    tokens = set(re.findall(r"\d+(?:\.\d+)?", out))
    for q in QUEUES:
        assert q["queue"] in out, q["queue"]
        numbers = [
            v for k, v in q.items() if isinstance(v, int) and k not in ("oldest_pending_age_ms", "events_cap")
        ]
        missing = [n for n in numbers if str(n) not in tokens]
        assert not missing, f"{q['queue']}: {missing} not shown at {width} columns\n{out}"
        assert f"{q['oldest_pending_age_ms'] / 1000:.1f}" in tokens
    for header in [c.name for c in QUEUE_COLS]:  # each one whole, or its abbreviation and the legend's entry
        short = next(c.short for c in QUEUE_COLS if c.name == header)
        assert header in out or (short is not None and f"{short} = {header}" in out), (header, width)
    for value in ("relay-7f3c@host-a:4242", "no heartbeat through the relay for 151 s", "nightly-report"):
        assert value in out.replace("\n", " ") or value in out, value
    assert "jobq.jobs.retry: topic missing" in out
    assert "123456 jobs" in out
    flat = " ".join(out.split())
    for value in ("host-b:4242:emails", "731", "1/8", "billing-go:pod-7f9c", "95"):
        assert value in flat, (value, width)
    assert "host-c:99" not in flat, "a worker claiming is not flagged"
    for value in ("reports.nightly", "paused", "50000", "812.4"):  # a held queue, why, its lane
        assert value in flat, (value, width)


def test_the_layout_narrows_from_full_headers_to_abbreviations_to_split_tables_to_a_block_per_row() -> None:
    cols = [Col("queue", left=True), Col("pending", "pend"), Col("oldest pending s", "age s")]
    rows = [["emails", "12", "3.5"], ["sms", "7", "0.2"]]

    def at(width: int) -> str:
        console = Console(width=width, file=io.StringIO(), color_system=None)
        console.print(fit("Queues", cols, rows, width))
        out = console.file.getvalue()  # type: ignore[attr-defined]
        assert isinstance(out, str)
        assert "…" not in out
        return out

    full, short, split, vertical = at(80), at(30), at(24), at(16)
    assert "oldest pending s" in full
    assert "=" not in full
    assert "┃ queue  ┃ pend ┃ age s ┃" in short
    assert "age s = oldest pending s" in short
    assert "┃ queue  ┃ pend ┃" in split
    assert "┃ queue  ┃ age s ┃" in split
    assert "pend = pending" in split
    assert vertical.splitlines()[1:3] == ["queue emails", "  pending 12"]
    assert "oldest pending" in vertical
    assert "queue sms" in vertical
    assert "─" not in vertical
