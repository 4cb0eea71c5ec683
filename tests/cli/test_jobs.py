"""``jobq enqueue`` and ``jobq job show|wait|retry|cancel|replay`` against the real stack (gateway, Kafka,
relay, Redis, a worker pool), each run with a token that may and one that may not."""

from __future__ import annotations

from typing import Any

import orjson

from tests.cli.conftest import OPS, TEAMA, VIEWER, Ops, refused
from worker.pool import Pool, PoolConfig
from worker.registry import Registry


def pool(ops: Ops) -> Pool:
    reg = Registry()

    @reg.job("add", queue=ops.queue)
    async def add(a: int, b: int) -> int:
        return a + b

    @reg.job("boom", queue=ops.queue, max_attempts=1)
    async def boom(why: str) -> None:
        raise ValueError(f"bad input: {why}")

    return Pool(reg, ops.engine, PoolConfig([ops.queue], concurrency=2, idle_wait_s=0.5), redis=ops.redis)


def doc(result: Any) -> Any:
    """The command's JSON document (the in-process pool's log lines may share the captured stdout)."""
    assert result.exit_code in (0, 1, 3), (result.exit_code, result.output)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return orjson.loads(line)


def said(result: Any, start: str) -> list[str]:
    """The command's own lines starting with ``start`` (not the pool's log lines)."""
    return [line for line in result.stdout.splitlines() if line.startswith(start)]


async def test_enqueue_waits_for_a_result_and_job_shows_wait_retry_and_replay(ops: Ops) -> None:
    q = ops.queue
    async with pool(ops):
        done = await ops.jobq("enqueue", q, "add", '{"a": 1, "b": 2}', "--wait", "--timeout", "30s", "--json")
        assert done.exit_code == 0, done.output
        answer = doc(done)
        assert (answer["state"], answer["result"], answer["error"]) == ("completed", 3, None)
        ref = answer["ref"]
        assert ref.startswith(f"{q}/")

        shown = await ops.jobq("job", "show", ref)
        assert shown.exit_code == 0, shown.output
        assert "completed" in shown.stdout
        assert "result" in shown.stdout
        assert '{"a":1,"b":2}' in shown.stdout
        assert doc(await ops.jobq("job", "show", ref, "--json"))["result"] == "3"

        failed = await ops.jobq("enqueue", q, "boom", '{"why": "no"}', "--wait", "--meta", "tenant=acme")
        assert failed.exit_code == 1, failed.output
        dead_ref, outcome = said(failed, f"{q}/")
        assert outcome == f"{dead_ref}: errored: ValueError: bad input: no"
        shown = await ops.jobq("job", "show", dead_ref)
        assert "errored" in shown.stdout
        assert "ValueError: bad input: no" in shown.stdout  # the attempt's error, and the last error in full
        assert '{"tenant":"acme"}' in shown.stdout

        not_dead = await ops.jobq("job", "retry", ref)
        line = refused(not_dead, "job_not_dead")
        assert f"job {ref} is completed" in line
        assert "jobq job replay" in line
        retried = await ops.jobq("job", "retry", dead_ref)
        assert (retried.exit_code, said(retried, "retried")) == (0, ["retried 1 of 1 job(s)"]), retried.output
        again = await ops.jobq("job", "wait", dead_ref, "--timeout", "30s", "--json")
        assert (again.exit_code, doc(again)["state"]) == (1, "errored"), "retried, and it failed again"

        replayed = await ops.jobq("job", "replay", ref)
        assert replayed.exit_code == 0, replayed.output
        (new_ref,) = said(replayed, f"{q}/")
        assert new_ref.startswith(f"{q}/")
        assert new_ref != ref
        waited = await ops.jobq("job", "wait", new_ref, "--timeout", "30s")
        assert (waited.exit_code, said(waited, new_ref)) == (0, [f"{new_ref}: completed → 3"])


async def test_delayed_jobs_wait_times_out_and_cancel_asks_before_many(ops: Ops) -> None:
    q = ops.queue
    refs = []
    for n in range(3):
        made = await ops.jobq("enqueue", q, "add", f"[{n}, 1]", "--delay", "1h", "--priority", "5")
        assert made.exit_code == 0, made.output
        refs += said(made, f"{q}/")
    await ops.relayed(3)
    shown = doc(await ops.jobq("job", "show", refs[0], "--json"))
    assert shown["state"] == "delayed"
    assert shown["run_at"] - shown["enqueued_at"] >= 3_590_000

    late = await ops.jobq("job", "wait", refs[0], "--timeout", "1s")
    assert late.exit_code == 3, late.output
    assert "not ended after 1s" in late.stderr

    asked = await ops.jobq("job", "cancel", *refs[1:])
    line = refused(asked, "confirmation_required")
    assert "cancel 2 jobs?" in line
    assert "--yes" in line
    assert doc(await ops.jobq("job", "show", refs[1], "--json"))["state"] == "delayed", "nothing was done"
    canceled = await ops.jobq("job", "cancel", *refs[1:], "--yes", "--json")
    assert doc(canceled)["canceled"] == 2
    one = await ops.jobq("job", "cancel", refs[0], "--reason", "not needed")  # one job: no question
    assert (one.exit_code, said(one, refs[0])) == (0, [f"{refs[0]}: canceled"]), one.output
    again = await ops.jobq("job", "cancel", refs[0])
    assert said(again, refs[0]) == [f"{refs[0]}: already_canceled"]
    ended = await ops.jobq("job", "wait", refs[0], "--json")
    assert ended.exit_code == 1
    assert (doc(ended)["state"], doc(ended)["error"]) == ("canceled", "not needed")


async def test_a_token_that_may_not_is_refused_in_one_line(ops: Ops) -> None:
    q = ops.queue
    line = refused(await ops.jobq("enqueue", q, "add", "[1, 2]", token=VIEWER), "scope_missing")
    assert line.startswith("error (scope_missing): the gateway refused the token (HTTP 403): ")
    assert "'viewer' lacks the 'enqueue' scope" in line
    line = refused(await ops.jobq("enqueue", q, "add", "[1, 2]", token=TEAMA), "queue_forbidden")
    assert f"may not use queue {q!r}" in line
    made = await ops.jobq("enqueue", q, "add", "[1, 2]", "--json", token=OPS)
    ref = doc(made)["ref"]
    await ops.relayed(1)
    assert doc(await ops.jobq("job", "show", ref, "--json", token=VIEWER))["state"] == "pending"
    refused(await ops.jobq("job", "cancel", ref, token=VIEWER), "scope_missing")
    refused(await ops.jobq("job", "show", ref, token=TEAMA), "queue_forbidden")
    refused(await ops.jobq("job", "show", ref, token="not-a-token-0123456789"), "token_invalid")
    missing = refused(await ops.jobq("job", "show", f"{q}/nope"), "job_not_found")
    assert f"no job {q}/nope" in missing
    unset = await ops.jobq("job", "show", ref, JOBQ_TOKEN="")
    refused(unset, "client_unconfigured")
    bad = await ops.jobq("job", "show", "no-slash")
    assert bad.exit_code == 2
    assert "<queue>/<id>" in bad.output
