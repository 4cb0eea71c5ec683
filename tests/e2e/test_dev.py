"""``jobq dev`` on a tiny application in a temporary folder, as a developer runs it: a real ``jobq dev``
process on the session's stack brings up the pipeline and the worker, the ``curl`` line it prints enqueues
a job that completes, a changed handler file reloads the worker (the next job runs the new code), and
Ctrl-C (SIGINT) leaves no process behind.

Its topic, queue, relay locks, consumer groups and scheduler group are the test's own (``<prefix>``), so
it shares the stack with every other test; the stack itself was running and keeps running.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from jqengine import Engine, JobInfo
from jqstack.procs import free_port
from jqstack.supervise import Child, Children
from jqstack.testing.backends import NativeTestStack, SessionStack

Eventually = Callable[..., Awaitable[Any]]
PROC = Path("/proc").is_dir()

APP = """
    import logging

    from jobq import Registry

    registry = Registry()
    log = logging.getLogger("tinyapp")


    @registry.job("tiny.echo", queue="{queue}")
    def echo(text: str) -> str:
        log.info("echoing %s", text)
        return "{version}:" + text
"""


def _write_app(folder: Path, queue: str, version: str) -> None:
    (folder / "jobs.py").write_text(textwrap.dedent(APP.format(queue=queue, version=version)))


def _settings(prefix: str) -> dict[str, str]:
    """The names this test's pipeline owns (a topic, its sides, events, Consul keys, groups)."""
    return {
        "JOBQ_DEFAULT_TOPIC": f"{prefix}.jobs",
        "JOBQ_EVENTS_TOPIC": f"{prefix}.events",
        "JOBQ_FAR_TOPIC": f"{prefix}.schedule",
        "JOBQ_RELAY_KV_PREFIX": f"jobq-dev/{prefix}",
        "JOBQ_RELAY_GROUP_PREFIX": f"dev-{prefix}",
        "JOBQ_SCHEDULER_GROUP": f"dev-{prefix}",
        "JOBQ_CRON_KV_PREFIX": f"jobq-dev/{prefix}/cron",
    }


def _ours(prefix: str) -> list[str]:
    """Every process still running whose environment names this test's topic: anything ``jobq dev``
    started, whatever it recorded (threads and zombies left out)."""
    mark = f"JOBQ_DEFAULT_TOPIC={prefix}.jobs".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if mark in environ.split(b"\0") and state != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found


async def _output(path: Path) -> str:
    return await asyncio.to_thread(lambda: path.read_text(errors="replace") if path.exists() else "")


async def _completed(eventually: Eventually, engine: Engine, queue: str, job_id: str) -> JobInfo:
    done: JobInfo = await eventually(
        lambda: engine.reads.get_job(queue, job_id), lambda j: j is not None and j.state == "completed", 90
    )
    return done


def _python(line: str, text: str) -> str:
    """Run the Python line ``jobq dev`` printed (``jobq.Client.from_env()``, waiting for the result) with
    this interpreter, its placeholder filled in; what it printed."""
    words = [w.replace("<text>", text) for w in shlex.split(line)]
    env = dict(w.split("=", 1) for w in words[:2])  # JOBQ_URL=... JOBQ_TOKEN=...
    assert words[2:4] == ["python", "-c"], words
    done = subprocess.run(
        [sys.executable, "-c", words[4]],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def _curl(line: str, text: str) -> str:
    """Run the ``curl`` line ``jobq dev`` printed, its placeholder filled in; the new job's id."""
    argv = [a.replace("<text>", text) for a in shlex.split(line)]
    done = subprocess.run(["curl", "-s", "--fail-with-body", *argv[1:]], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    (job_id,) = orjson.loads(done.stdout)["ids"]
    return str(job_id)


async def test_jobq_dev_runs_the_app_reloads_it_on_change_and_stops_clean(
    stack: SessionStack, engine: Engine, prefix: str, tmp_path: Path, eventually: Eventually
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("jobq dev runs on a native stack")
    if not PROC:
        pytest.skip("the stray-process check reads /proc")
    queue = f"{prefix}.tiny"
    app_dir = tmp_path / "project"
    (app_dir / "tinyapp").mkdir(parents=True)
    (app_dir / "tinyapp" / "__init__.py").write_text("")
    _write_app(app_dir / "tinyapp", queue, "v1")
    work, out = tmp_path / "work", tmp_path / "dev.out"
    argv = [  # started as a script's background job is: SIGINT ignored (Ctrl-C must still stop it)
        *("sh", "-c", 'trap "" INT; exec "$@"', "sh"),
        *(sys.executable, "-m", "jobq", "dev", "--app", "tinyapp.jobs:registry"),
        *("--stack", stack.stack.spec.name, "--workdir", str(work)),
        *("--port", str(free_port()), "--web-port", str(free_port()), "--debounce-ms", "200"),
    ]
    env = {**os.environ, **_settings(prefix), "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"}

    with Children(grace_s=60.0) as children:
        dev: Child = children.start("dev", argv, output=out, env=env, cwd=app_dir)
        banner = await eventually(lambda: _output(out), lambda text: "Ctrl-C stops everything" in text, 240)
        assert dev.running(), banner
        state = orjson.loads((work / "dev.json").read_bytes())
        assert state["queues"] == [queue]  # the queues the registry's kinds name
        assert state["pid"] == dev.pid
        assert f"dashboard  {state['dashboard']}  sign in with jobq-dev-admin" in banner
        assert f"gateway    {state['gateway']}  token jobq-dev-token  (JOBQ_URL, JOBQ_TOKEN)" in banner
        assert f"JOBQ_URL={state['gateway']} JOBQ_TOKEN=jobq-dev-token python -c" in banner
        assert "jobq.Client.from_env().enqueue_kind(" in banner
        (curl,) = [line.strip() for line in banner.splitlines() if line.strip().startswith("curl ")]
        (python,) = [line.strip() for line in banner.splitlines() if line.strip().startswith("JOBQ_URL=")]
        assert f"{state['gateway']}/v1/queues/{queue}/jobs" in curl

        first = await asyncio.to_thread(_curl, curl, "hi")  # the printed line, as a developer pastes it
        got = await _completed(eventually, engine, queue, first)
        assert got.result == '"v1:hi"'
        assert await asyncio.to_thread(_python, python, "py") == "v1:py"  # the Python line, run as printed

        _write_app(app_dir / "tinyapp", queue, "version2")  # the developer saves the handler
        await eventually(lambda: _output(out), lambda text: "worker reloaded" in text, 120)
        second = await asyncio.to_thread(_curl, curl, "again")
        got = await _completed(eventually, engine, queue, second)
        assert got.result == '"version2:again"'

        text = await _output(out)
        assert "changed: jobs.py" in text
        echoed = [line for line in text.splitlines() if "echoing again" in line]  # the worker's output, here
        assert echoed, text[-5000:]
        assert f"job_id={second}" in echoed[0]
        assert f"queue={queue}" in echoed[0]

        dev.signal(signal.SIGINT)  # Ctrl-C
        code = await dev.exited(120)
    text = out.read_text(errors="replace")
    assert code == 0, text[-5000:]
    assert "had to kill" not in text, text[-5000:]
    assert "the stack keeps running" in text  # it was running before: left as it was
    processes = orjson.loads((work / "dev.json").read_bytes())["processes"]
    names = [p["name"] for p in processes]
    assert names == ["gate", "relay", "scheduler", "web", "worker-1", "worker-2"], names
    stray = _ours(prefix)  # any process with this pipeline's settings: dev.json's and whatever else
    assert stray == [], stray
    stack.check()  # the stack's servers still run
