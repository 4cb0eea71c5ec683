"""docs/settings.md's tables are the settings classes' (``docs/gen_settings.py`` renders them)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_settings import BaseSettings

import jqcore.settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings", ROOT / "docs" / "gen_settings.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def product_settings_classes() -> set[type[BaseSettings]]:
    for module in pkgutil.iter_modules(jqcore.settings.__path__):  # the shared ones, a module per concern
        importlib.import_module(f"jqcore.settings.{module.name}")
    for path in ROOT.glob("*/settings.py"):  # each service's
        importlib.import_module(f"{path.parent.name}.settings")
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    ours = {p.rstrip("*").rstrip(".") for p in include["include"]}
    found: set[type[BaseSettings]] = set()
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.split(".")[0] in ours:
                found.add(sub)
    return found


def test_the_settings_doc_is_generated_from_the_classes(gen: ModuleType) -> None:
    current = gen.DOC.read_text()
    stale = f"docs/settings.md is out of date: run `{gen.COMMAND}` to regenerate it"
    assert gen.render(current) == current, stale


def test_every_settings_class_is_in_the_doc(gen: ModuleType) -> None:
    listed = {gen.settings_class(path) for path in gen.CLASSES}
    missing = product_settings_classes() - listed
    assert not missing, f"add {sorted(c.__qualname__ for c in missing)} to CLASSES in docs/gen_settings.py"


def test_every_setting_says_what_it_does(gen: ModuleType) -> None:
    undocumented = [
        f"{cls.__name__}.{name}"
        for cls in map(gen.settings_class, gen.CLASSES)
        for name, field in gen.own_fields(cls)
        if not gen.meaning(cls, name, field)
    ]
    assert not undocumented, f"give these fields an attribute docstring: {undocumented}"
    assert all(gen.settings_class(path).__doc__ for path in gen.CLASSES)


def test_units_and_defaults_are_rendered(gen: ModuleType) -> None:
    table = "\n".join(gen.generated().splitlines())
    assert "| `JOBQ_GATE_PRODUCE_TIMEOUT_MS` | int, ≥ 1000 | `10000` ms |" in table
    assert "| `JOBQ_GATE_MAX_BODY_BYTES` | int, ≥ 1048576 | `8388608` bytes (8 MiB) |" in table
    assert "| `JOBQ_REDIS_URL` (`REDIS_URL`) | text |" in table
    assert "| `JOBQ_WORKER_APP` | text, non-empty | **required** |" in table
    assert "| `JOBQ_SCHEDULER_NAME` | text | `<host>:<pid>` |" in table
