"""``jobq demo`` outside a checkout (an installed jobq has no ``examples/``) says so in one line."""

from __future__ import annotations

from pathlib import Path

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
