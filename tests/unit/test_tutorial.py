"""docs/tutorial.md works as written: every block of it is run or checked by something here, and a block
nothing runs fails :func:`test_every_block_is_run_or_checked`.

- A block whose first line is ``# file: PATH`` is written into a temporary project at PATH (packages get
  an empty ``__init__.py``), the other Python blocks are snippets.
- One child process (:data:`DRIVER`, with the project and this checkout on its path, no ``JOBQ_URL``)
  imports every module of the project, runs every snippet and every top-level script under
  ``jobq.testing.inline`` (the registry the tutorial's ``pyproject.toml`` names), runs each FastAPI app
  with its lifespan under FastAPI's ``TestClient`` and sends it the requests of the tutorial's ``curl``
  lines to it, and calls each Django view (Django configured in that process) under
  ``jobq.testing.manual``, checking the job it enqueued.
- The tutorial's tests are run by pytest in a child process, in the project, as a user runs them: jobq's
  pytest plugin (the installed entry point) and the ``jobq_registry`` ini option.
- A shell line is checked as far as it can be without a stack: ``jobq ...`` is parsed by the real command
  line (its options exist and take those values) and ``jobq dev --app X`` loads X; ``pip install`` names
  extras that exist; ``python F`` and ``uvicorn M:app`` name the project's files; ``curl`` and ``pytest``
  are the runs above. The output ``jobq dev`` is shown printing holds the ``curl`` and Python lines it does
  print for the tutorial's application.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from jobq.cli import Later
from jobq.cli import app as cli
from jobq.devapp import curl_line, probe, python_line

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MARK = re.compile(r"^# file: (\S+)$")
LOCAL_URL, DEV_TOKEN = "http://127.0.0.1:28080", "jobq-dev-token"
"""What ``jobq dev`` prints on the default stack (``jobq stack env``)."""
APP_URL = "localhost:8000"
"""Where the tutorial's ``curl`` lines reach its FastAPI app (uvicorn's default)."""


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int
    """The fence's line in the tutorial (what a failure names)."""

    @property
    def file(self) -> str | None:
        first = self.text.splitlines()[0] if self.text else ""
        found = MARK.match(first)
        return found.group(1) if found else None

    @property
    def module(self) -> str | None:
        """The dotted module of a Python file block (``myapp.jobs``)."""
        if self.file is None or not self.file.endswith(".py"):
            return None
        return self.file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    def kind(self) -> str:
        """What runs or checks it (:func:`test_every_block_is_run_or_checked`); ``?``: nothing."""
        if self.lang == "text":
            return "output"
        if self.lang == "sh":
            return "commands"
        if self.lang == "toml":
            return "pytest-config" if self.file == "pyproject.toml" else "?"
        if self.lang != "python":
            return "?"
        if self.file is None:
            return "snippet"
        if self.file.startswith("tests/"):
            return "pytest"
        if "/" not in self.file:
            return "script"
        if re.search(r"^from fastapi import|^import fastapi", self.text, re.MULTILINE):
            return "fastapi"
        if re.search(r"^from django", self.text, re.MULTILINE):
            return "django"
        return "module"


def blocks() -> list[Block]:
    text = DOC.read_text()
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def of_kind(kind: str) -> list[Block]:
    return [b for b in blocks() if b.kind() == kind]


def commands() -> list[tuple[Block, str]]:
    """Every shell command of the tutorial (comments dropped, ``&&`` split), with its block."""
    out = []
    for block in of_kind("commands"):
        for line in block.text.splitlines():
            line = line.split(" #", 1)[0].strip()
            out += [(block, part.strip()) for part in line.split("&&") if part.strip()]
    return out


def registry_name() -> str:
    (config,) = of_kind("pytest-config")
    return str(tomllib.loads(config.text)["tool"]["pytest"]["ini_options"]["jobq_registry"])


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorial's files in a folder of their own."""
    root = tmp_path_factory.mktemp("tutorial")
    for block in blocks():
        if block.file is None:
            continue
        path = root / block.file
        path.parent.mkdir(parents=True, exist_ok=True)
        assert not path.exists(), f"line {block.line}: {block.file} is written twice"
        path.write_text(block.text)
        if block.module and "." in block.module and not block.file.startswith("tests/"):
            (path.parent / "__init__.py").touch()
    return root


def child_env(project: Path) -> dict[str, str]:
    """The project and this checkout on the path; no gateway configured (nothing may reach one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JOBQ_URL", "JOBQ_TOKEN", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(ROOT)])
    return env


DRIVER = r"""
import asyncio, json, runpy, shlex, sys, traceback
from importlib import import_module

from jobq.testing import inline, manual
from worker.main import load_registry

plan = json.loads(sys.argv[1])
registry = load_registry(plan["registry"])
report = {}


def ran(label, fn):
    try:
        report[label] = fn() or "ok"
    except BaseException:
        report[label] = "failed: " + traceback.format_exc()


for module in plan["modules"]:
    ran(f"module {module}", lambda: import_module(module) and None)


def snippet(code):
    def run():
        with inline(registry):
            exec(compile(code, "<tutorial>", "exec"), {"__name__": "__tutorial__"})
    return run


for line, code in plan["snippets"]:
    ran(f"snippet {line}", snippet(code))


def script(path):
    def run():
        with inline(registry):
            runpy.run_path(path, run_name="__main__")
    return run


for line, path in plan["scripts"]:
    ran(f"script {line}", script(path))


def fastapi(module, requests):
    def run():
        from fastapi.testclient import TestClient

        app = import_module(module).app
        answers = []
        with inline(registry), TestClient(app) as http:
            for method, path, body in requests:
                answer = http.request(method, path, json=body)
                assert answer.status_code < 300, (path, answer.status_code, answer.text)
                ref = answer.json()["job"]
                state = http.get(f"/jobs/{ref}").json()["state"]
                assert state == "completed", (ref, state)
                answers.append(f"{method} {path}: {answer.status_code}, job {state}")
        assert answers, f"{module}: no curl line of the tutorial reaches it"
        return "; ".join(answers)
    return run


for line, module in plan["fastapi"]:
    ran(f"fastapi {line}", fastapi(module, plan["requests"]))


def django(module):
    def run():
        import django
        from django.conf import settings
        from django.test import RequestFactory

        if not settings.configured:
            settings.configure(DEBUG=True, SECRET_KEY="tutorial", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__)
            django.setup()
        views = import_module(module)
        called = []
        for name in dir(views):
            view = getattr(views, name)
            if callable(view) and getattr(view, "__module__", "") == module and not isinstance(view, type):
                with manual(registry) as jobs:
                    answer = view(RequestFactory().post("/", {"email": "ada@example.com"}))
                    assert answer.status_code == 202, answer.status_code
                    (job,) = jobs.enqueued_jobs()
                    assert json.loads(answer.content) == {"job": f"{job.queue}/{job.id}"}
                    jobs.drain()
                    assert job.state == "completed", job.state
                called.append(f"{name}: 202, {job.kind}({job.args}) {job.state}")
        assert called, f"{module}: no view"
        return "; ".join(called)
    return run


urlpatterns = []
for line, module in plan["django"]:
    ran(f"django {line}", django(module))

print(json.dumps(report))
"""


def curl_requests() -> list[tuple[str, str, Any]]:
    """(method, path, JSON body) of each ``curl`` line to the tutorial's app."""
    found = []
    for _, command in commands():
        words = shlex.split(command)
        if words[0] != "curl" or not any(w.startswith(APP_URL) for w in words):
            continue
        method = words[words.index("-X") + 1] if "-X" in words else "GET"
        body = json.loads(words[words.index("-d") + 1]) if "-d" in words else None
        url = next(w for w in words if w.startswith(APP_URL))
        found.append((method, url.removeprefix(APP_URL), body))
    return found


@pytest.fixture(scope="module")
def driven(project: Path) -> dict[str, str]:
    """What :data:`DRIVER` reported: each module, snippet, script, FastAPI app and Django view."""

    def files(kind: str) -> list[tuple[int, str]]:
        return [(b.line, str(project / str(b.file))) for b in of_kind(kind)]

    plan = {
        "registry": registry_name(),
        "modules": [b.module for b in blocks() if b.kind() in ("module", "fastapi", "django")],
        "snippets": [(b.line, b.text) for b in of_kind("snippet")],
        "scripts": files("script"),
        "fastapi": [(b.line, b.module) for b in of_kind("fastapi")],
        "django": [(b.line, b.module) for b in of_kind("django")],
        "requests": curl_requests(),
    }
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(plan)],
        cwd=project,
        env=child_env(project),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _failed(report: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in report.items() if k.startswith(prefix) and v.startswith("failed")}


def test_every_module_imports(driven: dict[str, str]) -> None:
    assert [k for k in driven if k.startswith("module")]
    assert _failed(driven, "module") == {}


def test_every_snippet_and_script_runs_under_jobq_testing(driven: dict[str, str]) -> None:
    for block in of_kind("snippet") + of_kind("script"):
        label = f"{block.kind()} {block.line}"
        assert driven.get(label) == "ok", f"{label}: {driven.get(label, 'not run')}"


def test_the_fastapi_app_answers_the_tutorials_curl_lines(driven: dict[str, str]) -> None:
    assert of_kind("fastapi"), "the tutorial shows a FastAPI app"
    for block in of_kind("fastapi"):
        said = driven[f"fastapi {block.line}"]
        assert not said.startswith("failed"), said
        assert "POST /signup: 202, job completed" in said


def test_the_django_view_enqueues_the_job(driven: dict[str, str]) -> None:
    assert of_kind("django"), "the tutorial shows a Django view"
    for block in of_kind("django"):
        said = driven[f"django {block.line}"]
        assert not said.startswith("failed"), said
        assert "email.welcome(['ada@example.com']) completed" in said


def test_the_tutorials_tests_pass_under_pytest_with_jobqs_plugin(project: Path) -> None:
    tests = of_kind("pytest")
    assert tests, "the tutorial shows its tests"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *(str(b.file) for b in tests)],
        cwd=project,
        env=child_env(project),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for block in tests:
        names = re.findall(r"^def (test_\w+)\(", block.text, re.MULTILINE)
        assert names, f"line {block.line}: no test in it"
        for name in names:
            assert f"{block.file}::{name} PASSED" in done.stdout, done.stdout


def _jobq_parses(words: list[str]) -> str | None:
    """``jobq WORDS`` parsed by the real command line: what it says of an unknown option or a bad value
    (None: accepted). Typer vendors click: its classes are reached by their attributes, not imported."""
    command: Any = typer.main.get_command(cli)
    args = words[1:]
    while isinstance(getattr(command, "commands", None), dict) and args and args[0] in command.commands:
        command, args = command.commands[args[0]], args[1:]
        if isinstance(command, Later):  # listed by jobq.cli, its module imported when it runs
            command = command.load()
    assert command.name != "jobq", f"{' '.join(words)}: no such command"
    try:
        command.make_context(" ".join(words[: len(words) - len(args)]), list(args))
    except Exception as exc:
        if hasattr(exc, "format_message"):
            return str(exc.format_message())
        raise
    return None


def _check_jobq(words: list[str], project: Path) -> str | None:
    said = _jobq_parses(words)
    if said is not None:
        return said
    if words[1] == "dev":
        probe(words[words.index("--app") + 1], child_env(project))  # it loads, as jobq dev loads it
    return None


def _check_pip(words: list[str], project: Path) -> str | None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = [x for w in words for group in re.findall(r"\[([\w,-]+)\]", w) for x in group.split(",")]
    unknown = [x for x in wanted if x not in extras]
    return f"extras {unknown or 'none named'}" if unknown or not wanted else None


def _check_python(words: list[str], project: Path) -> str | None:
    return None if words[1] in {b.file for b in blocks()} else "no such file in the tutorial"


def _check_uvicorn(words: list[str], project: Path) -> str | None:
    module, _, attr = words[1].partition(":")
    apps = {b.module for b in of_kind("fastapi")}
    return None if module in apps and attr == "app" else "not the tutorial's FastAPI app"


def _check_curl(words: list[str], project: Path) -> str | None:
    return None if any(w.startswith(APP_URL) for w in words) else "a curl to anything but the app"


def _check_pytest(words: list[str], project: Path) -> str | None:
    return None if words == ["pytest"] else "pytest with arguments: the test runs it without"


CHECKS = {
    "jobq": _check_jobq,
    "pip": _check_pip,
    "python": _check_python,
    "uvicorn": _check_uvicorn,
    "curl": _check_curl,  # sent by the FastAPI run (test_the_fastapi_app_answers_the_tutorials_curl_lines)
    "pytest": _check_pytest,  # run (test_the_tutorials_tests_pass_under_pytest_with_jobqs_plugin)
}


def test_every_command_is_accepted_as_written(project: Path) -> None:
    problems = []
    for block, command in commands():
        inner = re.fullmatch(r'eval "\$\((.*)\)"', command)
        words = shlex.split(inner.group(1) if inner else command)
        check = CHECKS.get(words[0])
        said = check(words, project) if check else "nothing checks this command"
        if said:
            problems.append(f"line {block.line}: {command}: {said}")
    assert problems == []


def test_jobq_devs_output_shows_the_lines_it_prints_for_this_app(project: Path) -> None:
    info = probe(registry_name(), child_env(project))
    queues = info.queues
    printed = [
        curl_line(LOCAL_URL, DEV_TOKEN, info.kinds, queues),
        python_line(LOCAL_URL, DEV_TOKEN, info.kinds, queues),
    ]
    (output,) = of_kind("output")
    shown = [line.strip() for line in output.text.splitlines()]
    for line in printed:
        assert line in shown, f"jobq dev prints {line!r}"


def test_every_block_is_run_or_checked() -> None:
    unrun = [f"line {b.line} ({b.lang or 'no language'})" for b in blocks() if b.kind() == "?"]
    assert unrun == [], "a block of docs/tutorial.md that nothing here runs or checks"
    kinds = {b.kind() for b in blocks()}
    assert {"snippet", "script", "fastapi", "django", "pytest", "commands", "output"} <= kinds
