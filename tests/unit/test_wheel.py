"""The installed distribution is the product: the wheel (what ``pip install .`` and the image install) holds
the services, the client, the worker and the CLI — not the benchmarks, the tests, the examples or the tests'
stack tooling (``jqstack.testing``)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from jqstack.testing.wheel import build_wheel

LEFT_OUT = ("loadtest/", "tests/", "examples/", "jqstack/testing/")
"""What no path in the wheel may start with."""
MOVED = ("jqstack/backends.py", "jqstack/containers.py", "jqstack/faultproxy.py", "worker/examples.py")
"""Test and demo code that used to live in product packages."""
PRODUCT = (
    "jobq/cli.py",
    "kafkagate/app.py",
    "worker/pool.py",
    "jqcore/py.typed",
    "jqcore/schema/envelope.v1.json",
    "jqengine/py.typed",
    "jqengine/engine.py",
    "jqruntime/py.typed",
    "jqruntime/client/jobs.py",
    "jobq/testing.py",
    "jqruntime/stores/presence.py",
    "jqweb/static/app.css",
    "jqstack/manager.py",
)
LUA_DIR = Path(__file__).parents[2] / "jqengine" / "lua"
LUA = sorted(f"jqengine/lua/{p.relative_to(LUA_DIR).as_posix()}" for p in LUA_DIR.rglob("*.lua"))
"""The engine's scripts and their library (``lua/lib/``), every file (the loader reads them from the
installed package)."""


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Every path in a wheel built from a copy of this checkout (``jqstack.testing.wheel``)."""
    with zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("src"))) as whl:
        return whl.namelist()


def test_the_wheel_holds_no_benchmarks_tests_or_examples(wheel_names: list[str]) -> None:
    leaked = [n for n in wheel_names if n.startswith(LEFT_OUT) or n in MOVED]
    assert not leaked, f"the wheel ships what is not the product: {leaked[:20]}"


def test_the_wheel_holds_the_product(wheel_names: list[str]) -> None:
    missing = [p for p in PRODUCT if p not in wheel_names]
    assert not missing, missing
    assert LUA, "no script found in the checkout"
    assert any(n.startswith("jqengine/lua/lib/") for n in LUA), "no library function found in the checkout"
    assert [n for n in LUA if n not in wheel_names] == []
    assert any(n.endswith(".dist-info/entry_points.txt") for n in wheel_names)
