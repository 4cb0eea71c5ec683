"""What a process imports before it does its work (start-up is what every CLI call, every worker spawned
by an autoscaler and every reload pays): ``jobq --help`` lists every command from ``jobq.cli``'s table and
imports none of their modules, whose summaries are the commands' own help; a worker pool imports no web
server, no Kafka or Consul client, no command line and no tracing SDK before its first claim. Guards of the
design, not timings (``loadtest/floors_bench.py`` measures the seconds)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from jobq.cli import COMMANDS, Later, app
from jqcore.extras import EXTRAS

HEAVY = [
    "jobq.commands",
    "redis",
    "aiohttp",
    "pydantic",
    "structlog",
    "confluent_kafka",
    "opentelemetry",
    "jqengine",
    "jqruntime",
    "kafkagate",
    "jqweb",
    "worker",
    "importlib.metadata",
]
"""Packages no command's listing needs (each, or any of its modules)."""

WORKER_UNUSED = [
    "aiohttp",  # the health server's, imported when a metrics port is set (jqruntime.health)
    "jqruntime.http",
    "opentelemetry",  # tracing's, imported when it is on (jqruntime.tracing); redis-py's (jqcore.imports)
    "concurrent.futures.process",  # mode="process" handlers' pool, imported when one first runs
    "jqcore.settings.kafka",  # the settings a pool never builds (jqcore.settings re-exports nothing: each
    "jqcore.settings.pipeline",  # name is imported from its own module)
    "jqcore.admission",  # what a record from Kafka must be: the engine imports it for a jobq.* kind only
    "jqcore.routing",  # the routing's settings (the canary's kind is the envelope's)
    "rich",
    "typer",
    "confluent_kafka",
    "consul",
    "kafkagate",
    "jqweb",
    "jqstack",
]
"""What a worker pool does not use before its first claim."""

LISTING = """
from typer.testing import CliRunner
from jobq.cli import app
result = CliRunner().invoke(app, ["--help"])
assert result.exit_code == 0, result.output
"""


def _imported(code: str, unused: list[str]) -> list[str]:
    """The modules of ``unused`` (each, or any module under it) that running ``code`` imported."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [m for m in json.loads(out) for u in unused if m == u or m.startswith(f"{u}.")]


def test_the_listing_imports_no_command_and_none_of_their_libraries() -> None:
    assert _imported(LISTING, HEAVY) == []


JOBQ_WORKER = """
import typer
from jobq.cli import app
typer.main.get_command(app).commands["worker"].load()
"""
"""What ``jobq worker`` imports before it runs: the command line's (typer, jobq.cli's error types) besides."""


def test_a_worker_pool_imports_only_what_it_uses() -> None:
    assert _imported("import worker.main, worker.settings, jqruntime.lifecycle", WORKER_UNUSED) == []
    unused = [name for name in WORKER_UNUSED if name not in ("typer", "jqstack")]
    assert _imported(JOBQ_WORKER, unused) == []


COLLECTOR = """
import gc, json, sys
import jobq.commands.worker as command
from jobq import cli

seen = []
command.run = lambda settings: seen.append([gc.isenabled(), gc.get_freeze_count()])
sys.argv = ["jobq", *sys.argv[1:]]
try:
    cli.main()
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps({"after": gc.isenabled(), "seen": seen}))
"""
"""``jobq`` with this script's arguments, the worker pool replaced by a note of the collector's state."""


@pytest.mark.parametrize("argv", [["worker", "--app", "app:registry", "--queues", "q"], ["--version"]])
def test_the_collector_is_paused_for_start_up_only(argv: list[str]) -> None:
    """``jobq``'s start-up runs without the cyclic collector: the command runs with it on again and with
    what the imports made frozen out of its reach; a command that ends before its module is imported
    (``--version``) leaves it on too."""
    run = subprocess.run([sys.executable, "-c", COLLECTOR, *argv], capture_output=True, text=True, check=True)
    found = json.loads(run.stdout.splitlines()[-1])
    assert found["after"], "main() left the collector off"
    if argv[0] == "worker":
        ((enabled, frozen),) = found["seen"]
        assert enabled, "the command ran without the collector"
        assert frozen > 10_000, "the start-up heap is not frozen"


def test_an_engine_makes_a_script_when_it_is_first_called() -> None:
    from redis.asyncio import Redis

    from jqengine import Engine

    scripts = Engine(Redis()).core.scripts
    assert dict(scripts) == {}
    claim = scripts["claim"]
    assert dict(scripts) == {"claim": claim}
    assert scripts["claim"] is claim
    with pytest.raises(KeyError):
        _ = scripts["no_such_script"]


def _listed() -> dict[str, str]:
    group = typer.main.get_command(app)
    return {name: command.help or "" for name, command in group.commands.items()}  # type: ignore[attr-defined]


def test_each_summary_is_the_first_paragraph_of_its_command_help() -> None:
    group = typer.main.get_command(app)
    for name, later in group.commands.items():  # type: ignore[attr-defined]
        assert isinstance(later, Later)
        real = later.load()
        first = inspect.cleandoc(real.short_help or real.help or "").split("\n\n")[0]
        assert later.help == " ".join(first.split()), (
            f"jobq {name}: copy its help's first paragraph to COMMANDS"
        )


def test_a_command_whose_extra_is_missing_is_listed_as_needing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "server", ("no_such_module",))
    listed = _listed()
    needs_server = {name for name, _, _, extras in COMMANDS if "server" in extras}
    assert needs_server
    for name in needs_server:
        assert listed[name] == r"(needs the server extra: pip install 'jobq\[server]')"
    assert listed["worker"].startswith("Run a worker pool")
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "status      (needs the server extra: pip install 'jobq[server]')" in result.output
