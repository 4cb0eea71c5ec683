"""Configuration as code against the real stack: ``jobq export`` of a configured stack applied back is a
plan without a change; a file applied to an empty stack recreates its queues, job types, schedules,
switches and rate limits exactly (``export`` before and after compared); a plan is field by field,
``--prune`` removes only its scope's schedules and switches, and every change goes through the gateway with
the token given (refused as over HTTP, audited). The gateway here keeps its queues in a Redis database of
their own (:data:`DB`, emptied first): job types' every-queue options reach every queue of that database
only."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import consul
import orjson
import pytest
import redis.asyncio as aioredis
from click.testing import Result

from jqcore.routing import Route, RoutingSettings
from jqcore.settings.pipeline import CronSettings
from jqengine import Engine
from jqruntime.stores import audit
from jqstack.manager import Endpoints
from kafkagate.main import GateService
from tests.cli.conftest import OPS, ROOT, TEAMA, VIEWER, Ops, refused, tokens_file
from worker.registry import Registry

DB = 11
"""This module's own Redis database: it is emptied, the others are not."""


@pytest.fixture
async def own(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    endpoints: Endpoints,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
) -> AsyncIterator[Own]:
    url = (endpoints.redis_url or "").rsplit("/", 1)[0] + f"/{DB}"
    client = aioredis.Redis.from_url(url)
    await client.flushdb()
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_file(prefix))
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    topic = make_topic("jobs", partitions=1)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    async with make_gate(routing, redis_url=url, tokens=[]) as gate:
        own = Own(gate, None, topic, f"{prefix}.q", prefix, Engine(client), client)  # type: ignore[arg-type]
        own.make_gate = lambda: make_gate(routing, redis_url=url, tokens=[])
        yield own
    await client.aclose()


@dataclass
class Own(Ops):
    make_gate: Callable[[], GateService] = lambda: None  # type: ignore[assignment,return-value]
    """Another gateway on this module's database (one that never saw what was before)."""


async def configure(ops: Ops) -> None:
    """A stack as operators leave it: queues set up and paused, job types' options for every queue and
    per queue (one pushed to a URL), schedules (one paused, one with a null in its args), a switch."""
    p = ops.prefix
    calls: list[tuple[str, str, Any]] = [
        ("PUT", f"/v1/queues/{p}.q1", {"mode": "exclusive", "excl_key": "tenant", "lease_ms": 60_000}),
        (
            "PUT",
            f"/v1/queues/{p}.q2",
            {"filter_keys": ["region"], "fair_key": "tenant", "fair_weights": {"a": 3}},
        ),
        ("PATCH", f"/v1/queues/{p}.q2", {"paused": True, "retention_ms": 3_600_000}),
        ("PATCH", f"/v1/queues/{p}.q1", {"rate": "50/s burst 200"}),
        ("PUT", "/v1/kinds/report.build", {"concurrency": 2, "priority": 0}),
        ("PUT", "/v1/kinds/invoice.render", {"queues": [f"{p}.q1"], "concurrency": 3, "max_attempts": 4}),
        (
            "PUT",
            "/v1/kinds/hook.push",
            {
                "queues": [f"{p}.q2"],
                "delivery": "at_most_once",
                "dispatch": {
                    "url": "https://hooks.example.com/in",
                    "auth": {"env": "JOBQ_DISPATCH_AUTH_HOOK"},
                },
            },
        ),
        (
            "PUT",
            f"/v1/cron/{p}-nightly",
            {
                "queue": f"{p}.q1",
                "kind": "report.build",
                "cron": "0 3 * * *",
                "tz": "Europe/Paris",
                "args": {"full": True, "since": None},
            },
        ),
        (
            "PUT",
            f"/v1/cron/{p}-hourly",
            {"queue": f"{p}.q2", "kind": "hook.push", "every_s": 3600, "paused": True},
        ),
        (
            "PUT",
            f"/v1/switches/{p}-poison",
            {"queue": f"{p}.q1", "kind": "pdf.render", "meta": {"tenant": "acme"}},
        ),
    ]
    async with ops.gate_client(ROOT) as http:
        for method, path, body in calls:
            status, answer = await http(method, path, body)
            assert status == 200, (method, path, answer)


async def export(ops: Ops, *args: str, token: str = ROOT) -> str:
    done = await ops.jobq("export", *args, token=token)
    assert done.exit_code == 0, done.output
    return done.stdout


async def apply(ops: Ops, text: str, *args: str, token: str = ROOT) -> Result:
    return await ops.jobq("apply", "-f", "-", *args, token=token, stdin=text)


def plan_line(result: Result) -> str:
    return next(line for line in result.stdout.splitlines() if line.startswith("plan: "))


async def test_export_of_a_configured_stack_applied_back_changes_nothing(own: Own) -> None:
    ops, p = own, own.prefix
    await configure(ops)
    text = await export(ops)
    for line in (
        f'[queues."{p}.q1"]',
        'mode = "exclusive"',
        'lease_ms = "1m"',
        'rate = "50/s burst 200"',
        f'[queues."{p}.q1".kinds."invoice.render"]',
        "paused = true",
        'retention_ms = "1h"',
        '[kinds."report.build"]',
        'dispatch = { url = "https://hooks.example.com/in"',
        f"[cron.{p}-nightly]",
        'args_json = "{\\"full\\":true,\\"since\\":null}"',
        f"[switches.{p}-poison]",
        'meta = { tenant = "acme" }',
    ):
        assert line in text, (line, text)
    assert '[queues."' + p + '.q2".kinds."report.build"]' not in text, "what the every-queue options gave"
    planned = await apply(ops, text, "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert plan_line(planned).startswith("plan: 0 to create, 0 to update, 0 to delete")
    again = await apply(ops, text)
    assert (again.exit_code, plan_line(again)) == (0, plan_line(planned))

    one = await export(ops, "--queues", f"{p}.q1", token=OPS)  # a token of some queues: its own part
    assert "[kinds." not in one
    assert f"{p}.q2" not in one
    assert plan_line(await apply(ops, one, "--dry-run", token=OPS)).startswith(
        "plan: 0 to create, 0 to update"
    )


async def test_a_file_applied_to_an_empty_stack_recreates_it_exactly(
    own: Own, consul_client: consul.Consul, cron_settings: CronSettings
) -> None:
    ops = own
    await configure(ops)
    before = await export(ops)
    rate_key = ops.gate.gate.relay_keys.queue_rate_key(f"{ops.prefix}.q1")
    await ops.gate.stop()
    await ops.redis.flushdb()  # an empty stack: no queue, job type or switch (Redis), no schedule (Consul)
    await asyncio.to_thread(consul_client.kv.delete, cron_settings.kv_prefix, recurse=True)
    await asyncio.to_thread(consul_client.kv.delete, rate_key)
    async with ops.make_gate() as fresh:  # a gateway that never saw the old stack
        ops.gate = fresh
        assert await export(ops) == before.split("\n\n[")[0] + "\n", "nothing is left"
        made = await apply(ops, before)
        assert made.exit_code == 0, made.output
        assert plan_line(made) == "plan: 9 to create, 0 to update, 0 to delete, 0 unchanged"  # a rate's own
        assert "applied 9 change(s)" in made.stdout
        assert await export(ops) == before
        assert plan_line(await apply(ops, before, "--dry-run")).startswith("plan: 0 to create, 0 to update")


async def test_a_plan_is_field_by_field_prune_keeps_to_its_scope_and_tokens_are_checked(
    own: Own, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops, p = own, own.prefix
    q = f"{p}.q"
    file = f"""
[queues."{q}"]
lease_ms = "1m"

[queues."{q}".kinds.render]
concurrency = 2

[cron.{p}-a]
queue = "{q}"
kind = "render"
every_s = 600

[switches.{p}-s]
queue = "{q}"
kind = "poison"
"""
    async with ops.gate_client(ROOT) as http:  # someone else's schedule: out of the file's scope
        status, _ = await http(
            "PUT", f"/v1/cron/{p}-other", {"queue": f"{p}.other", "kind": "k", "every_s": 60}
        )
        assert status == 200
    made = await apply(ops, file, token=OPS)
    assert made.exit_code == 0, made.output
    out = made.stdout.splitlines()
    assert out[0] == "plan: 4 to create, 0 to update, 0 to delete, 0 unchanged"
    assert out[1:4] == [f"+ queue {q}", "    lease_ms: 60000", f"+ kind render in {q}"]
    assert f"+ cron {p}-a" in out
    assert out[-1] == "applied 4 change(s)"
    entries = [e for e in await audit.read(ops.redis, 50) if e.who == "ops"]
    assert {e.action for e in entries} >= {"gate.PUT /v1/queues/{queue}", "gate.PUT /v1/cron/{name}"}

    paused = await ops.jobq("queue", "pause", q)  # an operator's pause the file does not name
    assert paused.exit_code == 0
    changed = file.replace('lease_ms = "1m"', 'lease_ms = "2m"\nmax_attempts = 3').replace(
        f"[cron.{p}-a]", f"[cron.{p}-b]"
    )
    dry = await apply(ops, changed, "--dry-run", token=OPS)
    assert dry.exit_code == 1, "a dry run with changes"
    lines = dry.stdout.splitlines()
    assert lines[0] == "plan: 1 to create, 1 to update, 0 to delete, 2 unchanged"
    assert lines[1:4] == [f"~ queue {q}", "    lease_ms: 60000 → 120000", "    max_attempts: 10 → 3"]
    assert f"+ cron {p}-b" in lines
    assert f"- cron {p}-a" not in lines, "no prune asked"

    asked = await apply(ops, changed, "--prune", token=OPS)
    line = refused(asked, "confirmation_required")
    assert "delete 1 object(s) the file no longer names?" in line
    assert f"- cron {p}-a" in asked.stdout
    assert f"{p}-other" not in asked.stdout, "another queue's schedule is out of scope"
    done = await apply(ops, changed, "--prune", "--yes", "--json", token=OPS)
    assert done.exit_code == 0, done.output
    report = orjson.loads(done.stdout)
    assert [(c["action"], c["object"], c["name"]) for c in report["applied"]] == [
        ("update", "queue", q),
        ("create", "cron", f"{p}-b"),
        ("delete", "cron", f"{p}-a"),
    ]
    assert report["applied"][0]["fields"]["max_attempts"] == {"from": 10, "to": 3}
    info = doc_of(await ops.jobq("queue", "show", q, "--json"))
    assert (info["config"]["lease_ms"], info["config"]["paused"]) == (120_000, True), "the pause stays"
    listed = doc_of(await ops.jobq("export", token=ROOT), toml=True)
    assert set(listed["cron"]) == {f"{p}-b", f"{p}-other"}

    line = refused(await apply(ops, file, token=VIEWER), "scope_missing")
    assert "'viewer' lacks the 'admin' scope" in line
    teama = await apply(ops, file, token=TEAMA)
    refused(teama, "queue_forbidden")
    assert "applied 0 of 4 change(s) before the error" in teama.stderr  # (it sees none of them)
    bad = refused(await apply(ops, file.replace("every_s = 600", "every_s = 0")), "config_invalid")
    assert bad.startswith(f"error (config_invalid): <stdin>: [cron.{p}-a] every_s: Input should be greater")
    fast = refused(await apply(ops, file.replace('lease_ms = "1m"', 'rate = "fast"')), "config_invalid")
    assert f'[queues."{q}"] rate' in fast
    assert "not a rate: 'fast'" in fast


def doc_of(result: Result, *, toml: bool = False) -> Any:
    assert result.exit_code == 0, result.output
    if toml:
        import tomllib

        return tomllib.loads(result.stdout)
    return orjson.loads(result.stdout)


async def test_an_applications_declared_crons_join_the_plan(
    own: Own, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops, p = own, own.prefix
    module = f"{p}_jobs"
    (tmp_path / f"{module}.py").write_text(
        "from worker.registry import Registry\n"
        "registry = Registry()\n\n"
        f'@registry.job("report.nightly", queue="{p}.q", cron="0 3 * * *", cron_tz="Europe/Paris")\n'
        "async def nightly() -> None: ...\n\n"
        f'@registry.job("sync:crm@v2", queue="{p}.q", cron="*/5 * * * *")\n'
        "async def sync() -> None: ...\n\n"
        f'@registry.job("plain", queue="{p}.q")\n'
        "async def plain() -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    file = f'[queues."{p}.q"]\n'
    made = await apply(ops, file, "--app", f"{module}:registry")
    assert made.exit_code == 0, made.output
    assert "+ cron report.nightly" in made.stdout
    assert "+ cron sync-crm-v2" in made.stdout
    assert "applied 3 change(s)" in made.stdout
    exported = await export(ops, "--queues", f"{p}*")
    assert "[cron.report.nightly]" not in exported
    assert '[cron."report.nightly"]' in exported
    with_app = await export(ops, "--queues", f"{p}*", "--app", f"{module}:registry")
    assert "report.nightly" not in with_app, "the handlers declare it: apply --app brings it"
    again = await apply(ops, with_app, "--app", f"{module}:registry", "--dry-run")
    assert plan_line(again).startswith("plan: 0 to create, 0 to update, 0 to delete")
    twice = refused(await apply(ops, exported, "--app", f"{module}:registry"), "config_invalid")
    assert "[cron.report.nightly] is also declared by a handler" in twice
    sys.modules.pop(module, None)


def test_a_cron_no_schedule_takes_fails_at_the_decorator() -> None:
    reg = Registry()
    with pytest.raises(ValueError, match=r"report: cron='61 \* \* \* \*' \(tz 'UTC'\)"):

        @reg.job("report", cron="61 * * * *")
        async def report() -> None: ...

    with pytest.raises(ValueError, match="unknown time zone"):

        @reg.job("other", cron="@daily", cron_tz="Mars/Olympus")
        async def other() -> None: ...

    @reg.job("fine", cron="@daily")
    async def fine() -> None: ...

    assert [(s.kind, s.cron, s.schedule_name) for s in reg.scheduled()] == [("fine", "@daily", "fine")]
