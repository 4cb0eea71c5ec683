"""``jobq canary --once`` (the Helm chart's ``helm test``): one round through every partition, waited for;
each partition's heartbeat either ran in time or is flagged — never a wait without end."""

from __future__ import annotations

from typing import Any

from canary.main import _line
from canary.monitor import Canary
from jqcore.clock import now_ms


class FakeGateway:
    """Heartbeats to partition 0 complete; partition 1's stay pending; partition 2's enqueue fails."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}

    async def request(self, method: str, path: str) -> dict[str, Any]:
        return {"ready": True}

    async def enqueue_one(
        self, queue: str, kind: str, args: Any, *, partition: int, canary: bool
    ) -> dict[str, Any]:
        if partition == 2:
            raise OSError("connection refused")
        job_id = f"hb-{partition}"
        self.sent[job_id] = partition
        return {"id": job_id}

    async def get_job(self, queue: str, job_id: str) -> dict[str, Any]:
        if self.sent[job_id] == 0:
            t = now_ms()
            return {"state": "completed", "enqueued_at": t, "started_at": t, "finished_at": t}
        return {"state": "pending"}


class FakeRedis:
    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}

    async def hset(self, key: str, field: str, value: bytes) -> None:
        self.kept[field] = value


async def test_one_round_answers_for_every_partition() -> None:
    redis = FakeRedis()
    canary = Canary(FakeGateway(), redis, {"jobs": [0, 1, 2]}, late_after_s=0.5)  # type: ignore[arg-type]
    health = await canary.one_round(gateway_wait_s=1)
    assert health[("jobs", 0)]["ok"]
    assert health[("jobs", 1)] == {
        "ok": False,
        "problem": "late: in Redis, pending",
        "at": health[("jobs", 1)]["at"],
    }
    assert health[("jobs", 2)]["problem"] == "gateway: OSError"
    assert set(redis.kept) == {"jobs/0", "jobs/1", "jobs/2"}  # recorded as a running canary's round is
    assert not canary.outstanding
    assert _line("jobs", 0, health[("jobs", 0)]).startswith("jobs[0] ok: gate ")
    assert _line("jobs", 1, health[("jobs", 1)]) == "jobs[1] FAILED: late: in Redis, pending"
