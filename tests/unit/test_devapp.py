"""What ``jobq dev`` learns of an application (imported in a child process) and the enqueue lines it prints
(``jobq/devapp.py``; the command itself runs in ``tests/e2e/test_dev.py``)."""

from __future__ import annotations

import json
import os
import shlex
import textwrap
from pathlib import Path

import pytest

from jobq.devapp import Kind, ProbeFailed, curl_line, probe, python_line

APP = """
    from pydantic import BaseModel
    from jobq import Registry

    registry = Registry()


    class Order(BaseModel):
        id: int
        note: str = ""


    @registry.job("shop.greet", queue="shop.greetings")
    def greet(name: str, punct: str = "!") -> str:
        return name + punct


    @registry.job("shop.ship", queue="shop.orders", payload=Order)
    async def ship(order: Order) -> None: ...
"""


def _env(folder: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_probe_reads_the_queues_kinds_and_the_package_to_watch(tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "jobs.py").write_text(textwrap.dedent(APP))
    info = probe("shop.jobs:registry", _env(tmp_path))
    assert info.queues == ("shop.greetings", "shop.orders")
    assert info.kinds == (
        Kind("shop.greet", "shop.greetings", ("name",)),  # the arguments without a default
        Kind("shop.ship", "shop.orders", ("id",)),  # a payload model's required fields
    )
    assert info.watch == (tmp_path / "shop").resolve()


def test_probe_of_a_module_watches_its_file(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(textwrap.dedent(APP))
    info = probe("tasks", _env(tmp_path))  # the attribute defaults to `registry`
    assert info.watch == (tmp_path / "tasks.py").resolve()


def test_an_app_that_does_not_import_says_why(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(ProbeFailed) as failed:
        probe("broken:registry", _env(tmp_path))
    said = str(failed.value)
    assert "SyntaxError" in said
    assert said.splitlines()[-1].startswith("error (app_invalid): --app 'broken:registry': SyntaxError")
    assert "<frozen" not in said  # the import machinery's frames are left out
    (tmp_path / "empty.py").write_text("registry = 42\n")
    with pytest.raises(ProbeFailed, match=r"is not a worker\.Registry"):
        probe("empty:registry", _env(tmp_path))


def test_the_enqueue_lines_name_the_first_served_kind_with_placeholders() -> None:
    kinds = [Kind("shop.greet", "shop.greetings", ("name",)), Kind("shop.tick", "shop.ticks", ())]
    url = "http://127.0.0.1:28080"
    curl = shlex.split(curl_line(url, "jobq-dev-token", kinds, ["shop.greetings"]))
    assert curl[:3] == ["curl", "-H", "Authorization: Bearer jobq-dev-token"]
    assert json.loads(curl[curl.index("-d") + 1]) == {"kind": "shop.greet", "args": {"name": "<name>"}}
    assert curl[-1] == f"{url}/v1/queues/shop.greetings/jobs"
    tick = shlex.split(curl_line(url, "t", kinds, ["shop.ticks"]))
    assert json.loads(tick[tick.index("-d") + 1]) == {"kind": "shop.tick"}

    line = shlex.split(python_line(url, "jobq-dev-token", kinds, ["shop.greetings"]))
    assert line[:4] == [f"JOBQ_URL={url}", "JOBQ_TOKEN=jobq-dev-token", "python", "-c"]
    assert line[4] == (
        'import jobq; h = jobq.Client.from_env().enqueue_kind("shop.greetings", "shop.greet", '
        '{"name": "<name>"}); print(h.result(timeout=30))'
    )
    compile(line[4], "<python line>", "exec")
    assert '"Authorization: Bearer $JOBQ_TOKEN"' in curl_line(url, "$JOBQ_TOKEN", kinds, [])  # expanded
