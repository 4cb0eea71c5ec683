"""The stack finds the checkout's deploy/ folder (Maven's pom, Consul's go.mod) from its own location; the
history's default folder (read from ``JOBQ_HOME`` by the kernel, which imports no jqstack) is the default
stack's."""

from __future__ import annotations

from pathlib import Path

import pytest

from jqcore.settings.pipeline import HistorySettings
from jqstack import paths


def test_repo_root_is_the_checkout_that_holds_deploy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBQ_DEPLOY_DIR", raising=False)
    assert (paths.repo_root() / "pyproject.toml").is_file()
    assert (paths.deploy_dir() / "kafka" / "pom.xml").is_file()
    assert (paths.deploy_dir() / "consul" / "go.mod").is_file()


@pytest.mark.parametrize("home", [None, "~/elsewhere", "/srv/jobq"])
def test_the_default_history_folder_is_the_default_stacks(
    monkeypatch: pytest.MonkeyPatch, home: str | None
) -> None:
    monkeypatch.delenv("JOBQ_HISTORY_PATH", raising=False)
    if home is None:
        monkeypatch.delenv("JOBQ_HOME", raising=False)
    else:
        monkeypatch.setenv("JOBQ_HOME", home)
    assert HistorySettings().root == paths.stack_dir("default") / "history"
    if home is None:
        assert HistorySettings().root == Path.home() / ".cache" / "jobq" / "stacks" / "default" / "history"
