"""``jobq demo`` outside a checkout (an installed jobq has no ``examples/``) says so in one line; the
processes it starts fit together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from jobq.cli import app
from jobq.commands import demo


def test_demo_without_its_examples_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "repo_root", lambda: tmp_path)
    result = CliRunner().invoke(app, ["demo", "--once"])
    assert result.exit_code == 2
    assert result.output.strip() == demo.NO_EXAMPLES


def test_the_demo_runs_a_dispatcher_whose_callbacks_its_gateways_accept(tmp_path: Path) -> None:
    """The dispatcher and its downstream are started with the gateways: the same callback secret, callbacks
    to a gateway of the demo, the downstream's URL handed to the workload's kind, loopback allowed."""
    from jobq import demo_workload
    from jobq.commands.stack import StackTokens

    started: dict[str, tuple[list[str], dict[str, str]]] = {}

    class Recorder(demo.Processes):
        def run(self, name: str, argv: list[str], env: dict[str, str]) -> Any:
            started[name] = (argv, env)
            return None

    tokens = StackTokens("gate-token", "admin", "read", secret=False)
    spec = demo_workload.pipeline_env(lambda _role: {}, tokens, str(tmp_path / "history"))
    running = demo._start(Recorder(tmp_path), spec)
    argv, env = started["dispatcher"]
    assert argv[-2:] == ["-m", "jqdispatch"]
    assert env["JOBQ_DISPATCHER_QUEUES"] == demo_workload.HOOK_QUEUE
    assert env["JOBQ_DISPATCHER_CALLBACK_URL"] == running.gateways[0][0].url
    secret = env["JOBQ_CALLBACK_SECRET"]
    assert secret
    assert {started[g][1]["JOBQ_CALLBACK_SECRET"] for g in ("gate-az-a", "gate-az-b")} == {secret}
    hook_argv, _ = started["hook"]
    assert hook_argv[-3:-1] == ["examples.dispatch_hook", "--port"]
    assert running.hook_url == f"http://127.0.0.1:{hook_argv[-1]}/hook"
    # the downstream listens on loopback, which a dispatcher refuses unless its egress policy allows it
    assert env["JOBQ_DISPATCHER_ALLOW_NETS"] == "127.0.0.0/8"
    assert demo_workload.HOOK_QUEUE not in started["worker"][0][-1]  # no pool takes the pushed jobs
