"""``eval "$(jobq stack env)"`` prepares a shell for the README's everyday commands: the stack's endpoints,
the local gateway's URL and a development token that a ``jobq gate`` started in that shell accepts."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from canary.settings import CanarySettings
from jobq.cli import app
from jobq.commands.stack import DEV_TOKEN
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqstack.manager import DEFAULT_PORTS, Stack, StackSpec
from kafkagate.settings import GateSettings


def stack_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> dict[str, str]:
    """The variables ``jobq stack env`` exports for the default stack, planned (not started)."""
    monkeypatch.setenv("JOBQ_HOME", str(home))
    Stack(StackSpec())  # plans it: ports and state.json, no process
    result = CliRunner().invoke(app, ["stack", "env"])
    assert result.exit_code == 0, result.output
    out: dict[str, str] = {}
    for line in result.stdout.splitlines():
        export, assignment = shlex.split(line)
        assert export == "export", line
        key, _, value = assignment.partition("=")
        out[key] = value
    return out


def test_exports_every_endpoint_the_gateway_url_and_a_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = stack_env(monkeypatch, tmp_path)
    assert env["JOBQ_KAFKA_BOOTSTRAP"] == f"127.0.0.1:{DEFAULT_PORTS['kafka']}"
    assert env["JOBQ_REDIS_URL"] == f"redis://127.0.0.1:{DEFAULT_PORTS['redis']}/0"
    assert env["CONSUL_HTTP_ADDR"] == f"127.0.0.1:{DEFAULT_PORTS['consul']}"
    assert env["JOBQ_URL"] == "http://127.0.0.1:28080"
    assert env["JOBQ_TOKEN"] == DEV_TOKEN


def test_services_started_in_that_shell_find_each_other(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = stack_env(monkeypatch, tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    gate = load(GateSettings)
    assert f"http://{gate.host}:{gate.port}" == env["JOBQ_URL"], "the gateway listens where clients send"
    assert [t.get_secret_value() for t in gate.tokens] == [env["JOBQ_TOKEN"]], "and accepts their token"
    canary = load(CanarySettings)
    assert canary.gateways == [env["JOBQ_URL"]]
    assert canary.token.get_secret_value() == env["JOBQ_TOKEN"]
    assert load(RedisSettings).url == env["JOBQ_REDIS_URL"]
    assert load(KafkaSettings).bootstrap == env["JOBQ_KAFKA_BOOTSTRAP"]
    assert load(ConsulSettings).addr == env["CONSUL_HTTP_ADDR"]
