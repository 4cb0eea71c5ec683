"""The overview's live panel renders whatever the canaries recorded (pure rendering, no servers)."""

from __future__ import annotations

from jqweb.render import env


def test_a_late_canary_without_stage_times_renders() -> None:
    """A canary found late records ``{"ok": false, "problem": ..., "at": ...}`` and no ``ms``: the panel
    answered 500 exactly when an operator came to look at a failing canary."""
    snapshot = {
        "redis": {
            "canary": {
                "jobs/0": {"ok": True, "ms": {"gate": 3, "relay": 10, "worker": 2, "total": 20}, "at": 1},
                "jobs/1": {"ok": False, "problem": "late: not in Redis (not relayed)", "at": 2},
            },
            "memory": {"used": 1 << 20, "max": 0, "ratio": 0.0},
            "gateways": [],
            "workers": [],
            "dashboards": [],
            "schedulers": [],
            "queues": [],
        },
        "kafka": [],
        "locks": [],
        "cron": [],
    }
    html = env.get_template("overview_live.html").render(
        alerts=[], snapshot=snapshot, now=0.0, now_ms=0, base="", me=None, refresh_s=5, path="/", path_qs="/"
    )
    assert "late: not in Redis" in html
    assert '<td class="num">20</td>' in html
