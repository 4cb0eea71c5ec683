"""``jobq dead ls|retry|purge`` against the real stack: dead letters grouped by their error's digest (the
digest the failure's lifecycle events carry, ``jqcore.events.failure`` = ``_lib.lua``'s ``failure()``),
filtered by queue, kind, error text, digest and age, retried or purged after naming the count — each run
with a token that may and one that may not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jqcore.envelope import new_envelope
from jqcore.events import failure, parse
from jqengine import Engine
from tests.cli.conftest import TEAMA, VIEWER, Ops, refused

TIMEOUT = (
    'Traceback (most recent call last):\n  File "app.py", line 3, in fetch\nTimeoutError: upstream slow\n'
)
MISSING = "KeyError: 'customer'"


async def kill(engine: Engine, queue: str, errors: list[tuple[str, str]]) -> list[str]:
    """Jobs of (kind, error) that fail for good at their first attempt: dead letters."""
    envs = [new_envelope(queue, kind, {"n": n}) for n, (kind, _) in enumerate(errors)]
    await engine.enqueue_batch(envs)
    by_id = {e.id: error for e, (_, error) in zip(envs, errors, strict=True)}
    claimed = await engine.jobs.claim(queue, len(envs))
    assert len(claimed) == len(envs)
    for c in claimed:
        assert (
            await engine.jobs.fail(queue, (c.id, c.attempt, c.token), by_id[c.id], permanent=True)
            == "errored"
        )
    return [e.id for e in envs]


def doc(result: Any) -> Any:
    assert result.exit_code == 0, (result.exit_code, result.output)
    return orjson.loads(result.stdout)


@pytest.mark.parametrize(
    "text",
    [TIMEOUT, MISSING, "plain words, no class", "Retry", "  \n\tValueError:   spaced  \n\n", "", "é: x"],
)
async def test_the_python_digest_is_the_one_the_failure_events_carry(
    engine: Engine, prefix: str, text: str
) -> None:
    q = f"{prefix}.digest"
    (job_id,) = await kill(engine, q, [("k", text)])
    (event,) = [
        parse(e.value) for e in await engine.events.read(q) if e.job_id == job_id and b'"errored"' in e.value
    ]
    assert (event.error, event.digest, event.message) == tuple(failure(text)), text


async def test_ls_groups_by_error_and_retry_and_purge_take_exactly_the_filtered_jobs(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    q, other = ops.queue, f"{ops.prefix}.a.other"
    slow = await kill(ops.engine, q, [("fetch", TIMEOUT)] * 3)
    missing = await kill(ops.engine, q, [("bill", MISSING)] * 2)
    elsewhere = await kill(ops.engine, other, [("fetch", TIMEOUT)])
    timeout_digest = failure(TIMEOUT).digest

    listed = doc(await ops.jobq("dead", "ls", "--queue", f"{ops.prefix}*", "--json", token=VIEWER))
    assert listed["total"] == 6
    groups = [(g["queue"], g["kind"], g["digest"], g["count"], g["error"]) for g in listed["groups"]]
    assert groups == [
        (q, "fetch", timeout_digest, 3, "TimeoutError: upstream slow"),
        (q, "bill", failure(MISSING).digest, 2, "KeyError: 'customer'"),
        (other, "fetch", timeout_digest, 1, "TimeoutError: upstream slow"),
    ]
    assert sorted(listed["groups"][0]["ids"]) == sorted(slow)
    table = await ops.jobq("dead", "ls", "--queue", q)
    assert table.exit_code == 0, table.output
    assert timeout_digest in table.stdout
    assert "TimeoutError: upstream slow" in table.stdout
    per_job = doc(await ops.jobq("dead", "ls", "--queue", q, "--error", "CUSTOMER", "--jobs", "--json"))
    assert sorted(j["id"] for j in per_job["jobs"]) == sorted(missing)
    by_digest = doc(
        await ops.jobq("dead", "ls", "-q", f"{ops.prefix}*", "--digest", timeout_digest[:6], "--json")
    )
    assert by_digest["total"] == 4
    assert doc(await ops.jobq("dead", "ls", "-q", q, "--since", "1h", "--json"))["total"] == 5
    assert doc(await ops.jobq("dead", "ls", "-q", q, "--kind", "bill", "--json"))["total"] == 2
    both = await ops.jobq("dead", "ls", "--error", "x", "--digest", "y")
    assert both.exit_code == 2
    assert "not both" in both.output

    asked = await ops.jobq("dead", "retry", "-q", f"{ops.prefix}*", "--digest", timeout_digest)
    line = refused(asked, "confirmation_required")
    assert f"retry 4 dead job(s) (queue {ops.prefix}* and digest {timeout_digest})?" in line
    refused(await ops.jobq("dead", "retry", "-q", q, "--yes", token=VIEWER), "scope_missing")
    refused(await ops.jobq("dead", "retry", "-q", q, "--yes", token=TEAMA), "queue_forbidden")
    retried = await ops.jobq("dead", "retry", "-q", q, "--digest", timeout_digest, "--yes")
    own = [line for line in retried.stdout.splitlines() if line.startswith("retried")]  # not the relay's logs
    assert (retried.exit_code, own) == (0, ["retried 3 of 3 dead job(s)"]), retried.output
    assert sorted((await ops.engine.reads.list_ids(q, "pending", 0, 10))[0]) == sorted(slow)
    assert (await ops.engine.reads.dead_counts([q, other])) == {q: 2, other: 1}, "only the filtered ones"

    monkeypatch.setattr("jobq.commands.remote._interactive", lambda: True)
    no = await ops.jobq("dead", "purge", "-q", q, stdin="n\n")
    assert no.exit_code == 1
    assert "delete 2 dead job(s) (queue " in no.stderr
    purged = await ops.jobq("dead", "purge", "-q", f"{ops.prefix}.a.*", "--json", stdin="y\n", token=TEAMA)
    assert purged.exit_code == 0, purged.output
    answer = orjson.loads(purged.stdout.splitlines()[-1])  # (the test's terminal echoes the "y" to stdout)
    assert answer == {"asked": 1, "purged": 1, "by_queue": {other: 1}}
    assert await ops.engine.reads.get_job(other, elsewhere[0]) is None
    assert doc(await ops.jobq("dead", "purge", "-q", q, "--yes", "--json"))["purged"] == 2
    assert doc(await ops.jobq("dead", "ls", "-q", f"{ops.prefix}*", "--json"))["total"] == 0
    assert "no dead letter" in (await ops.jobq("dead", "retry", "-q", q)).stdout
