"""``jobq worker`` options override the ``JOBQ_WORKER_*`` settings and ``--app`` is required; ``python -m
worker`` runs from the settings alone and stops with one line on a bad one (no servers: no pool starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from jobq.cli import app
from worker.settings import WorkerSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("JOBQ_WORKER_"):
            monkeypatch.delenv(name)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[WorkerSettings]:
    """The settings ``jobq worker`` would run a pool with (the pool itself is not started). The command
    configures logging inside CliRunner; later log lines must still reach the then-current stderr."""
    runs: list[WorkerSettings] = []
    monkeypatch.setattr("jobq.commands.worker.run", runs.append)
    return runs


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["worker", *args], env=env)


def test_a_missing_app_is_a_usage_error_naming_option_and_variable(started: list[WorkerSettings]) -> None:
    result = _invoke("--queues", "x")
    assert result.exit_code == 2
    assert "--app" in result.output
    assert "JOBQ_WORKER_APP" in result.output
    assert started == []


def test_options_override_the_settings(started: list[WorkerSettings]) -> None:
    env = {"JOBQ_WORKER_CONCURRENCY": "50", "JOBQ_WORKER_GRACE_S": "7", "JOBQ_WORKER_QUEUES": "from-env"}
    args = ("--app", "examples.demo_app", "--queues", "a,b", "--concurrency", "3", "--filter", "region=eu")
    result = _invoke(*args, "--burst", "--unknown-kind-retry", "0.5", env=env)
    assert result.exit_code == 0, result.output
    (settings,) = started
    assert (settings.app, settings.queues, settings.concurrency, settings.grace_s) == (
        "examples.demo_app",
        ["a", "b"],
        3,
        7.0,
    )
    assert (settings.filter, settings.burst, settings.unknown_kind_retry_s) == ({"region": "eu"}, True, 0.5)


def test_app_and_queues_may_come_from_the_environment(started: list[WorkerSettings]) -> None:
    env = {"JOBQ_WORKER_APP": "examples.demo_app:registry", "JOBQ_WORKER_QUEUES": "q1,q2"}
    result = _invoke(env=env)
    assert result.exit_code == 0, result.output
    assert (started[0].app, started[0].queues) == ("examples.demo_app:registry", ["q1", "q2"])


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "JOBQ_WORKER_APP"),
        (
            {"JOBQ_WORKER_APP": "examples.demo_app", "JOBQ_WORKER_QUEUES": "q", "JOBQ_WORKER_GRACE_S": "-1"},
            "GRACE_S",
        ),
        ({"JOBQ_WORKER_APP": "no.such.module", "JOBQ_WORKER_QUEUES": "q"}, "cannot import 'no.such.module'"),
    ],
)
def test_python_m_worker_stops_with_one_line(env: dict[str, str], named: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_WORKER_")}
    out = subprocess.run(
        [sys.executable, "-m", "worker"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert named in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
