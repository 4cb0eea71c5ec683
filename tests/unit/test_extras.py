"""jqcore.extras, the one table of which extra installs which library, kept true to pyproject.toml."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from jqcore.errors import JobqError
from jqcore.extras import EXTRAS, MissingExtra, extra_for, require
from jqstack.lockfile import normalize

PROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]


def test_each_extra_of_the_table_installs_its_modules() -> None:
    optional = PROJECT["optional-dependencies"]
    providers = importlib.metadata.packages_distributions()  # this venv has every extra (dev takes all)
    for extra, modules in EXTRAS.items():
        named = {normalize(Requirement(r).name) for r in optional[extra]}
        for module in modules:
            dists = {normalize(d) for d in providers[module.split(".")[0]]}
            assert dists & named, f"{module}: the {extra} extra installs none of {dists}"
    (everything,) = optional["all"]
    assert set(Requirement(everything).extras) == set(EXTRAS)
    assert "jobq[all]" in optional["dev"]


def test_no_library_of_an_extra_is_a_runtime_requirement() -> None:
    base = {normalize(Requirement(r).name) for r in PROJECT["dependencies"]}
    for extra in EXTRAS:
        leaked = base & {normalize(Requirement(r).name) for r in PROJECT["optional-dependencies"][extra]}
        assert not leaked, f"{leaked} of the {extra} extra is in the bare install"


@pytest.mark.parametrize(
    ("missing", "extra"),
    [
        ("confluent_kafka", "server"),
        ("consul.aio", "server"),
        ("croniter", "server"),
        ("jinja2", "web"),
        ("duckdb", "history"),
        ("opentelemetry", "tracing"),
        ("opentelemetry.sdk.trace", "tracing"),
        ("textual.app", "tui"),
        ("pyspark.sql", "spark"),
        ("no_such_module", None),
    ],
)
def test_extra_for_names_the_extra_of_a_missing_module(missing: str, extra: str | None) -> None:
    assert extra_for(ModuleNotFoundError(f"No module named {missing!r}", name=missing)) == extra


def test_require_raises_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    require("the gateway", "server", "web", "history")  # all installed here
    monkeypatch.setitem(EXTRAS, "web", ("jinja2", "no_such_module.sub"))
    with pytest.raises(MissingExtra) as caught:
        require("jobq web", "server", "web")
    assert str(caught.value) == "jobq web needs the web extra: pip install 'jobq[web]'"
    assert isinstance(caught.value, ImportError)
    assert isinstance(caught.value, JobqError)
    assert (caught.value.code, caught.value.extra, extra_for(caught.value)) == ("missing_extra", "web", "web")


def test_the_image_installs_the_extras_of_every_role_it_runs() -> None:
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    pins = r"lockfile\.py pins requirements\.lock pyproject\.toml (\S*) > runtime\.txt"
    runtime = re.findall(pins, dockerfile)
    assert runtime == ["server,web,history,tracing"]  # gate (--web), relay, scheduler, canary, web, traces
