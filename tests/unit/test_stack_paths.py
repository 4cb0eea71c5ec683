"""The stack finds the checkout's deploy/ folder (Maven's pom, Consul's go.mod) from its own location."""

from __future__ import annotations

import pytest

from jqstack import paths


def test_repo_root_is_the_checkout_that_holds_deploy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBQ_DEPLOY_DIR", raising=False)
    assert (paths.repo_root() / "pyproject.toml").is_file()
    assert (paths.deploy_dir() / "kafka" / "pom.xml").is_file()
    assert (paths.deploy_dir() / "consul" / "go.mod").is_file()
