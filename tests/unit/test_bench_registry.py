"""The benchmarks' command line (``python -m loadtest``, ``./run bench``) and ``jobq bench``, which forwards
to it from a checkout and says in one line that the benchmarks are not installed anywhere else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from jobq.cli import app
from jobq.commands.bench import NOT_INSTALLED
from loadtest import __main__ as bench_cli


def test_loadtest_refuses_an_unknown_scenario() -> None:
    result = CliRunner().invoke(bench_cli.app, ["no-such-scenario"])
    assert result.exit_code == 2
    assert "unknown scenario 'no-such-scenario'" in result.output
    assert "stack" in bench_cli.SCENARIO_NAMES


def test_jobq_bench_forwards_to_loadtest() -> None:
    result = CliRunner().invoke(app, ["bench", "no-such-scenario"])
    assert result.exit_code == 2
    assert "unknown scenario 'no-such-scenario'" in result.output


def test_jobq_bench_without_loadtest_says_so_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # jobq as installed: no loadtest
    argv = [sys.executable, "-m", "jobq", "bench", "e2e", "--quick"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == NOT_INSTALLED
    assert done.stdout == ""


def test_backlog_is_for_the_neighbours_only() -> None:
    result = CliRunner().invoke(bench_cli.app, ["relay", "--backlog", "10"])
    assert result.exit_code == 2
    assert "--backlog: neighbours only" in result.output
