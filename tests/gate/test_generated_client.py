"""A client generated from the live gateway's ``/openapi.json`` by a third-party generator
(``openapi-python-client``, offline, into a temporary folder) runs an HTTP worker's loop against the real
gateway and relay: enqueue, claim, heartbeat, extend, complete, fail, release, GET — each answer parsed
into the generated model classes (never None, never a bare dict), and a stale write into the generated
error model."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from jqrelay.main import RelayService

PACKAGE = "jobq_generated_client"


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Callable[[bytes], ModuleType]]:
    """``generate(spec)``: the client package generated from the document ``spec``, imported."""

    def generate(spec: bytes) -> ModuleType:
        (tmp_path / "openapi.json").write_bytes(spec)
        (tmp_path / "config.yaml").write_text("post_hooks: []\n")  # no formatting: nothing else to run
        out = subprocess.run(
            [
                str(Path(sys.executable).with_name("openapi-python-client")),
                "generate",
                "--path",
                str(tmp_path / "openapi.json"),
                "--config",
                str(tmp_path / "config.yaml"),
                "--meta",
                "none",
                "--output-path",
                str(tmp_path / PACKAGE),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        sys.path.insert(0, str(tmp_path))
        return importlib.import_module(PACKAGE)

    yield generate
    sys.path[:] = [p for p in sys.path if p != str(tmp_path)]
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def api(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.{name}")


async def test_a_generated_client_runs_an_http_workers_loop_with_typed_answers(
    gw: Any, token: str, generated: Callable[[bytes], ModuleType], make_relay: Callable[..., RelayService]
) -> None:
    async with gw.http.get(gw.url + "/openapi.json") as resp:
        spec = await resp.read()
    client_pkg = generated(spec)
    m = importlib.import_module(f"{PACKAGE}.models")
    enqueue, get_job = api("jobs.enqueue"), api("jobs.get_job")
    claim, extend, complete, fail = (api(f"claims.{n}") for n in ("claim", "extend", "complete", "fail"))
    release, heartbeat = api("claims.release"), api("claims.heartbeat")
    q = gw.queue
    async with (
        make_relay(gw.topic),
        client_pkg.AuthenticatedClient(base_url=gw.url, token=token, raise_on_unexpected_status=True) as c,
    ):
        health = await api("probes.healthz").asyncio(client=c)
        assert isinstance(health, m.Health)
        assert health.status == "ok"

        batch = m.JobBatch(jobs=[m.JobIn(kind="mail", args={"n": i}) for i in (0, 1, 3)])
        accepted = await enqueue.asyncio(q, client=c, body=batch)
        assert isinstance(accepted, m.Accepted), accepted
        assert len(accepted.ids) == 3
        assert all(isinstance(d, m.Delivered) for d in accepted.jobs)
        meta = m.JobInMetaType0.from_dict({"tenant": "a"})
        one = await enqueue.asyncio(q, client=c, body=m.JobIn(kind="mail", args={"n": 2}, meta=meta))
        assert isinstance(one, m.Accepted)
        assert isinstance(one.jobs[0].offset, int)

        held: list[Any] = []
        while len(held) < 4:  # the relay brings them; the long-poll answers as soon as one is there
            got = await claim.asyncio(q, client=c, body=m.ClaimBody(n=4, wait_ms=10_000, worker="gen-1"))
            assert isinstance(got, m.Claimed), got
            held += got.jobs
        assert all(isinstance(j, m.ClaimedJob) for j in held)
        by_n = {j.args["n"]: j for j in held}
        assert isinstance(by_n[2].meta, m.ClaimedJobMeta)
        assert by_n[2].meta["tenant"] == "a"
        assert all(j.attempt == 1 and isinstance(j.lease_deadline_ms, int) for j in held)

        first, second, third, fourth = by_n[0], by_n[1], by_n[2], by_n[3]
        beat = m.HeartbeatBody(jobs=[m.HeldJob(id=j.id, attempt=j.attempt, token=j.token) for j in held])
        alive = await heartbeat.asyncio(q, client=c, body=beat)
        assert isinstance(alive, m.HeartbeatReply), alive
        assert alive.held == 4
        assert all(isinstance(i, m.HeartbeatItem) and i.held for i in alive.jobs)
        owner = {"attempt": first.attempt, "token": first.token}
        extended = await extend.asyncio(q, first.id, client=c, body=m.ExtendBody(**owner, lease_ms=60_000))
        assert isinstance(extended, m.LeaseExtended)
        assert extended.lease_deadline_ms >= first.lease_deadline_ms

        done = await complete.asyncio(q, first.id, client=c, body=m.CompleteBody(**owner, result={"ok": 1}))
        assert isinstance(done, m.Completed)
        assert done.state == "completed"

        body = m.FailBody(attempt=second.attempt, token=second.token, error="boom", permanent=True)
        failed = await fail.asyncio(q, second.id, client=c, body=body)
        assert isinstance(failed, m.Failed)
        assert failed.outcome == "errored"
        body = m.FailBody(attempt=third.attempt, token=third.token, error="again", retry_in_ms=60_000)
        retried = await fail.asyncio(q, third.id, client=c, body=body)
        assert isinstance(retried, m.Failed)
        assert retried.outcome == "retry"

        body = m.ReleaseBody(attempt=fourth.attempt, token=fourth.token, started=False)
        given_back = await release.asyncio(q, fourth.id, client=c, body=body)
        assert isinstance(given_back, m.ReleaseReply), given_back
        assert given_back.outcome == "released"
        back = await get_job.asyncio(q, fourth.id, client=c)
        assert isinstance(back, m.Job)
        assert (back.state, back.attempt) == ("pending", 0), "pending again, its attempt refunded"

        job = await get_job.asyncio(q, first.id, client=c)
        assert isinstance(job, m.Job), job
        assert (job.state, job.attempt, orjson.loads(job.result)) == ("completed", 1, {"ok": 1})
        assert isinstance(job.meta, m.JobMetaType0 | None)
        assert job.worker == "gen-1", "the claim named its worker"
        dead = await get_job.asyncio(q, second.id, client=c)
        assert isinstance(dead, m.Job)
        assert (dead.state, dead.last_error is not None) == ("errored", True)
        later = await get_job.asyncio(q, third.id, client=c)
        assert isinstance(later, m.Job), later
        assert later.state in ("delayed", "pending"), later

        stale = await complete.asyncio(
            q, first.id, client=c, body=m.CompleteBody(attempt=2, token=first.token)
        )
        assert isinstance(stale, m.ErrorBody), stale
        assert isinstance(stale.error, m.ErrorDetail)
        assert stale.error.code == "lease_stale"
        missing = await get_job.asyncio(q, "never-there", client=c)
        assert isinstance(missing, m.ErrorBody)
        assert missing.error.code == "job_not_found"
