"""``jobq canary --once`` (the Helm chart's ``helm test``) prints one line a partition: the round itself runs
on the real pipeline (``tests/e2e/test_pipeline.py``); here, the line each result becomes."""

from __future__ import annotations

from canary.main import _line


def test_each_partitions_result_is_one_line() -> None:
    ok = {"ok": True, "ms": {"gate": 3, "relay": 10, "worker": 2, "total": 20}, "at": 1}
    assert _line("jobs", 0, ok).startswith("jobs[0] ok: gate ")
    late = {"ok": False, "problem": "late: in Redis, pending", "at": 2}
    assert _line("jobs", 1, late) == "jobs[1] FAILED: late: in Redis, pending"
    assert (
        _line("jobs", 2, {"ok": False, "problem": "gateway: OSError", "at": 3})
        == "jobs[2] FAILED: gateway: OSError"
    )
